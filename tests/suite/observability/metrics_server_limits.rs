//! The real `boxtable-operator run`'s metrics and health server under abuse and with
//! `--metrics-secure`, on the real control plane: half-sent requests are closed after the
//! header-read timeout, no more connections are held than the limit while `/metrics` and
//! `/healthz` keep answering; secured, `/metrics` answers 401 without a valid token, 403 to a
//! ServiceAccount not bound to `boxtable-operator-metrics-reader` and 200 once it is, over HTTPS,
//! with the operator running as its ServiceAccount under the RBAC of `deploy/`.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use boxtable_operator::telemetry::LIMITS;

use crate::support::e2e::{Cluster, https_get, scrape};

const HALF_SENT: usize = 200;

/// Whether the server still holds `stream` open (no EOF or reset seen yet).
fn still_open(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

fn open_count(streams: &mut [TcpStream]) -> usize {
    streams
        .iter_mut()
        .map(still_open)
        .filter(|open| *open)
        .count()
}

/// One plain HTTP/1.1 GET of `path`: its status.
async fn status_of(addr: SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    raw.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed_after_the_header_timeout_while_metrics_and_health_answer() {
    let cluster = Cluster::start().await;
    let operator = cluster.operator("metrics-server", "e2e-metrics-server");
    let addr = operator.metrics_address(&cluster).await;
    assert!(scrape(addr).await.contains("boxtable_build_info"));
    let rss_before = operator.rss_kib();

    // Each sends half a request line and stops.
    let started = Instant::now();
    let mut half_sent: Vec<TcpStream> = (0..HALF_SENT)
        .map(|_| {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(b"GET /metr").unwrap();
            stream.set_nonblocking(true).unwrap();
            stream
        })
        .collect();

    // Above the limit the oldest idle connections are closed at once, so no more than the limit
    // stays open, well before the header timeout could have closed any.
    let within_limit = cluster
        .eventually(
            "the server to hold no more connections than its limit",
            LIMITS.header_read,
            || {
                let open = open_count(&mut half_sent);
                async move { (open <= LIMITS.max_connections).then_some(open) }
            },
        )
        .await;
    let at = started.elapsed();
    assert!(
        at < LIMITS.header_read,
        "only the header timeout brought the count down ({within_limit} open after {at:?})"
    );

    // Meanwhile the server answers.
    let body = scrape(addr).await;
    assert!(body.contains("boxtable_build_info"), "{body}");
    assert_eq!(status_of(addr, "/healthz").await, 200);
    let rss_during = operator.rss_kib();

    // Every half-sent request is closed by the server once its header time is up.
    let deadline = LIMITS.header_read + Duration::from_secs(10);
    let mut open = HALF_SENT;
    while open > 0 {
        open = open_count(&mut half_sent);
        assert!(
            started.elapsed() < deadline,
            "{open} of {HALF_SENT} half-sent requests still open after {:?} (header timeout {:?})",
            started.elapsed(),
            LIMITS.header_read
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_closed = started.elapsed();
    assert_eq!(status_of(addr, "/healthz").await, 200);
    let rss_after = operator.rss_kib();
    println!(
        "{HALF_SENT} half-sent requests (limit {}): {within_limit} still open after {at:?}, \
         0 after {all_closed:?} (header timeout {:?}); operator RSS {rss_before} KiB before, \
         {rss_during} KiB while held, {rss_after} KiB after",
        LIMITS.max_connections, LIMITS.header_read
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secured_metrics_answer_401_without_a_token_403_without_the_reader_binding_and_200_with_it()
{
    let cluster = Cluster::start().await;
    let plane = cluster.plane.unwrap();
    // The component's ClusterRoles: the operator's right to review callers, the readers' role.
    for file in [
        "deploy/components/secure-metrics/metrics-auth-role.yaml",
        "deploy/components/secure-metrics/metrics-reader-role.yaml",
    ] {
        plane
            .kubectl_admin(&["apply", "-f", file], None)
            .unwrap_or_else(|m| panic!("{m}"));
    }
    let ns = plane.create_namespace("metrics-secure");
    plane
        .kubectl_admin(&["-n", &ns, "create", "serviceaccount", "scraper"], None)
        .unwrap_or_else(|m| panic!("{m}"));
    let scraper = plane.service_account_token(&ns, "scraper");

    let operator = cluster.operator_with(&ns, "e2e-metrics-secure", &["--metrics-secure"]);
    let addr = operator.metrics_address(&cluster).await;
    let line = operator
        .logs()
        .lines()
        .find(|l| l.contains("address="))
        .unwrap()
        .to_owned();
    assert!(line.contains(&format!("https://{addr}")), "{line}");

    // The probes need no token.
    assert_eq!(https_get(addr, "/healthz", None).await.0, 200);
    cluster
        .eventually(
            "/readyz to answer 200",
            Duration::from_secs(120),
            || async { (https_get(addr, "/readyz", None).await.0 == 200).then_some(()) },
        )
        .await;

    let (status, body) = https_get(addr, "/metrics", None).await;
    assert_eq!(status, 401, "no token: {body}");
    let (status, body) = https_get(addr, "/metrics", Some("not-a-token")).await;
    assert_eq!(status, 401, "a token the API server does not know: {body}");
    let (status, body) = https_get(addr, "/metrics", Some(&scraper.token)).await;
    assert_eq!(status, 403, "a ServiceAccount without the binding: {body}");

    let binding = format!("{ns}-metrics-reader");
    plane
        .kubectl_admin(
            &[
                "create",
                "clusterrolebinding",
                &binding,
                "--clusterrole=boxtable-operator-metrics-reader",
                &format!("--serviceaccount={ns}:scraper"),
            ],
            None,
        )
        .unwrap_or_else(|m| panic!("{m}"));
    // A refusal is remembered for a few seconds; then the binding lets the scraper in.
    let body = cluster
        .eventually(
            "the bound ServiceAccount to be let in",
            Duration::from_secs(60),
            || async {
                let (status, body) = https_get(addr, "/metrics", Some(&scraper.token)).await;
                (status == 200).then_some(body)
            },
        )
        .await;
    assert!(body.contains("boxtable_build_info"), "{body}");
    let (status, _) = https_get(addr, "/metrics", None).await;
    assert_eq!(status, 401, "still no way in without a token");

    let _ = plane.kubectl_admin(&["delete", "clusterrolebinding", &binding], None);
}
