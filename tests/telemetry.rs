//! The metrics and health server: `/healthz`, `/readyz` and `/metrics` over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers fail loudly

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use boxtable_operator::reason::Reason;
use boxtable_operator::telemetry::{
    LockOutcome, Metrics, Readiness, ReconcileResult, TelemetryServer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// One HTTP/1.1 GET with `Connection: close`; returns (status, headers, body).
async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

async fn start() -> (
    SocketAddr,
    Arc<Metrics>,
    Readiness,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let server = TelemetryServer::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new());
    let readiness = Readiness::new();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let (metrics, readiness, shutdown) = (metrics.clone(), readiness.clone(), shutdown.clone());
        async move { server.serve(metrics, readiness, shutdown).await.unwrap() }
    });
    (addr, metrics, readiness, shutdown, task)
}

#[tokio::test]
async fn healthz_answers_200_while_the_process_runs() {
    let (addr, _, _, shutdown, _) = start().await;
    assert_eq!(get(addr, "/healthz").await.0, 200);
    shutdown.cancel();
}

#[tokio::test]
async fn readyz_answers_503_until_the_controller_is_ready() {
    let (addr, _, readiness, shutdown, _) = start().await;
    assert_eq!(get(addr, "/readyz").await.0, 503);
    readiness.set_ready();
    assert_eq!(get(addr, "/readyz").await.0, 200);
    readiness.set_not_ready();
    assert_eq!(get(addr, "/readyz").await.0, 503);
    shutdown.cancel();
}

#[tokio::test]
async fn metrics_lists_boxtable_families_and_counts_failures_by_reason() {
    let (addr, metrics, _, shutdown, _) = start().await;
    let (status, head, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    for family in [
        "# TYPE boxtable_reconciles counter",
        "# TYPE boxtable_reconcile_duration_seconds histogram",
        "# TYPE boxtable_lock_wait_seconds histogram",
        "# TYPE boxtable_lock_outcomes counter",
        "# TYPE boxtable_migrations_applied counter",
        "# TYPE boxtable_failures counter",
    ] {
        assert!(body.contains(family), "missing {family} in\n{body}");
    }
    assert!(
        body.contains("boxtable_failures_total{reason=\"LockTimeout\"} 0"),
        "{body}"
    );

    metrics.record_failure(Reason::LockTimeout);
    metrics.record_lock(LockOutcome::TimedOut, Duration::from_secs(30));
    metrics.record_reconcile(ReconcileResult::Stalled, Duration::from_millis(40));
    let (_, _, body) = get(addr, "/metrics").await;
    assert!(
        body.contains("boxtable_failures_total{reason=\"LockTimeout\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("boxtable_lock_outcomes_total{outcome=\"timed_out\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("boxtable_reconciles_total{result=\"stalled\"} 1"),
        "{body}"
    );
    shutdown.cancel();
}

#[tokio::test]
async fn cancelling_the_token_stops_the_server() {
    let (addr, _, _, shutdown, task) = start().await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
