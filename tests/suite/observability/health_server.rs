//! The metrics and health server: `/healthz`, `/readyz` and `/metrics` over real HTTP.

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

/// BoxTables as the controller's cache holds them, changed by the test.
#[derive(Default)]
struct Cache(std::sync::Mutex<Vec<Arc<boxtable_operator::crd::BoxTable>>>);

impl boxtable_operator::telemetry::ObjectSource for Cache {
    fn boxtables(&self) -> Vec<Arc<boxtable_operator::crd::BoxTable>> {
        self.0.lock().unwrap().clone()
    }
}

/// A BoxTable named `name` whose conditions are (type, status, reason); none at all when empty.
fn boxtable_with(
    name: &str,
    conditions: &[(&str, &str, &str)],
) -> boxtable_operator::crd::BoxTable {
    let conditions: Vec<serde_json::Value> = conditions
        .iter()
        .map(|(type_, status, reason)| {
            serde_json::json!({"type": type_, "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2026-11-30T01:49:28Z"})
        })
        .collect();
    let mut object = serde_json::json!({
        "apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable",
        "metadata": {"name": name, "namespace": "shop", "uid": name},
        "spec": {"box": "Outbox", "table": name, "database": {"secretRef": {"name": "db"}}},
    });
    if !conditions.is_empty() {
        object["status"] = serde_json::json!({ "conditions": conditions });
    }
    serde_json::from_value(object).unwrap()
}

fn ready(reason: &str) -> [(&str, &str, &str); 3] {
    [
        ("Ready", "True", reason),
        ("Reconciling", "False", reason),
        ("Stalled", "False", reason),
    ]
}

fn stalled(reason: &str) -> [(&str, &str, &str); 3] {
    [
        ("Ready", "False", reason),
        ("Reconciling", "False", reason),
        ("Stalled", "True", reason),
    ]
}

fn reconciling(reason: &str) -> [(&str, &str, &str); 3] {
    [
        ("Ready", "False", reason),
        ("Reconciling", "True", reason),
        ("Stalled", "False", reason),
    ]
}

#[tokio::test]
async fn boxtable_objects_counts_the_cache_by_state_and_reason_and_a_deleted_boxtable_stops_counting()
 {
    let (addr, metrics, _, shutdown, _) = start().await;
    let cache = Arc::new(Cache::default());
    metrics.count_objects(cache.clone());
    *cache.0.lock().unwrap() = vec![
        Arc::new(boxtable_with("a", &ready("Migrated"))),
        Arc::new(boxtable_with("b", &ready("Migrated"))),
        Arc::new(boxtable_with("c", &ready("UpToDate"))),
        Arc::new(boxtable_with("d", &stalled("SecretNotFound"))),
        Arc::new(boxtable_with("e", &reconciling("WaitingForLock"))),
        Arc::new(boxtable_with("f", &[("Ready", "False", "Suspended")])),
        Arc::new(boxtable_with("g", &[])),
        Arc::new(boxtable_with("h", &ready("FromAFutureVersion"))),
    ];
    let (_, _, body) = get(addr, "/metrics").await;
    assert!(body.contains("# TYPE boxtable_objects gauge"), "{body}");
    for (series, expected) in [
        (r#"boxtable_objects{state="ready",reason="Migrated"}"#, 2.0),
        (r#"boxtable_objects{state="ready",reason="UpToDate"}"#, 1.0),
        (r#"boxtable_objects{state="ready",reason="Unknown"}"#, 1.0),
        (
            r#"boxtable_objects{state="stalled",reason="SecretNotFound"}"#,
            1.0,
        ),
        (
            r#"boxtable_objects{state="reconciling",reason="WaitingForLock"}"#,
            1.0,
        ),
        (
            r#"boxtable_objects{state="suspended",reason="Suspended"}"#,
            1.0,
        ),
        (r#"boxtable_objects{state="pending",reason="None"}"#, 1.0),
        (r#"boxtable_objects{state="stalled",reason="None"}"#, 0.0),
    ] {
        assert_eq!(sample(&body, series), Some(expected), "{series} in\n{body}");
    }

    // The stalled one is deleted, and a Migrated one moves on to UpToDate.
    cache
        .0
        .lock()
        .unwrap()
        .retain(|bt| !["d", "a"].contains(&bt.metadata.name.as_deref().unwrap()));
    cache
        .0
        .lock()
        .unwrap()
        .push(Arc::new(boxtable_with("a", &ready("UpToDate"))));
    let (_, _, body) = get(addr, "/metrics").await;
    for (series, expected) in [
        (
            r#"boxtable_objects{state="stalled",reason="SecretNotFound"}"#,
            0.0,
        ),
        (r#"boxtable_objects{state="ready",reason="Migrated"}"#, 1.0),
        (r#"boxtable_objects{state="ready",reason="UpToDate"}"#, 2.0),
    ] {
        assert_eq!(sample(&body, series), Some(expected), "{series} in\n{body}");
    }
    shutdown.cancel();
}

#[tokio::test]
async fn boxtable_drifted_counts_the_cached_boxtables_whose_drifted_condition_is_true() {
    let (addr, metrics, _, shutdown, _) = start().await;
    let cache = Arc::new(Cache::default());
    metrics.count_objects(cache.clone());
    let drifted = |name: &str, status: &str| {
        Arc::new(boxtable_with(
            name,
            &[
                ("Ready", "True", "UpToDate"),
                ("Drifted", status, "Drifted"),
            ],
        ))
    };
    *cache.0.lock().unwrap() = vec![
        drifted("a", "True"),
        drifted("b", "True"),
        drifted("c", "False"),
        Arc::new(boxtable_with("d", &ready("Migrated"))),
    ];
    let (_, _, body) = get(addr, "/metrics").await;
    assert!(body.contains("# TYPE boxtable_drifted gauge"), "{body}");
    assert_eq!(sample(&body, "boxtable_drifted"), Some(2.0), "{body}");

    // One is deleted, the other's drift is gone.
    *cache.0.lock().unwrap() = vec![drifted("b", "False")];
    let (_, _, body) = get(addr, "/metrics").await;
    assert_eq!(sample(&body, "boxtable_drifted"), Some(0.0), "{body}");
    shutdown.cancel();
}

#[tokio::test]
async fn build_info_names_the_version_and_the_git_revision_and_the_leader_gauge_follows_set_leader()
{
    let (addr, metrics, _, shutdown, _) = start().await;
    let (_, _, body) = get(addr, "/metrics").await;
    let revision = boxtable_operator::telemetry::REVISION;
    assert!(!revision.is_empty());
    // The suite runs in a git checkout: the revision is its commit, not the fallback.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(head.status.success(), "the tests run in a git checkout");
    assert_eq!(revision, String::from_utf8(head.stdout).unwrap().trim());
    let series = format!(
        "boxtable_build_info{{version=\"{}\",revision=\"{revision}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(sample(&body, &series), Some(1.0), "{series} in\n{body}");

    assert_eq!(sample(&body, "boxtable_leader"), Some(0.0), "{body}");
    metrics.set_leader(true);
    assert_eq!(
        sample(&get(addr, "/metrics").await.2, "boxtable_leader"),
        Some(1.0)
    );
    metrics.set_leader(false);
    assert_eq!(
        sample(&get(addr, "/metrics").await.2, "boxtable_leader"),
        Some(0.0)
    );
    shutdown.cancel();
}

#[tokio::test]
async fn lock_held_counts_the_locks_this_process_holds_and_blocked_sessions_are_counted_at_release()
{
    let (addr, metrics, _, shutdown, _) = start().await;
    assert_eq!(
        sample(&get(addr, "/metrics").await.2, "boxtable_lock_held"),
        Some(0.0)
    );
    let first = boxtable_operator::lock::HeldLock::taken();
    let second = boxtable_operator::lock::HeldLock::taken();
    assert_eq!(
        sample(&get(addr, "/metrics").await.2, "boxtable_lock_held"),
        Some(2.0)
    );
    drop(first);
    assert_eq!(
        sample(&get(addr, "/metrics").await.2, "boxtable_lock_held"),
        Some(1.0)
    );
    drop(second);
    assert_eq!(
        sample(&get(addr, "/metrics").await.2, "boxtable_lock_held"),
        Some(0.0)
    );

    metrics.record_blocked(boxtable_operator::lock::Blocked::default());
    metrics.record_blocked(boxtable_operator::lock::Blocked {
        sessions: 2,
        longest: Duration::from_secs(4),
    });
    let (_, _, body) = get(addr, "/metrics").await;
    assert_eq!(
        sample(&body, "boxtable_lock_blocked_sessions_total"),
        Some(2.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "boxtable_lock_blocked_wait_seconds_count"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "boxtable_lock_blocked_wait_seconds_sum"),
        Some(4.0),
        "{body}"
    );
    shutdown.cancel();
}

/// The value of exactly `series` (name and labels) in a scrape; `None` when it is not there.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}
