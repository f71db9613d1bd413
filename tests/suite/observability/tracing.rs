//! OpenTelemetry export of the real `boxtable-operator run --otlp-endpoint`, received by an
//! OTLP/HTTP receiver inside the test (an HTTP server decoding the protobuf bodies with
//! `opentelemetry-proto`) while the operator reconciles BoxTables on the real control plane and
//! PostgreSQL: one trace per pass, with the Secret read, the lock wait and the migration as its
//! children, the pass's attributes, and no password anywhere in what was sent. An endpoint the
//! binary cannot send to (`https://`: it has no TLS for OTLP) is refused at start.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::support::boxtable::boxtable;
use crate::support::e2e::Cluster;

const WAIT: Duration = Duration::from_secs(120);

/// What the receiver got: every request body as sent, and the spans decoded from them.
#[derive(Default)]
struct Received {
    bodies: Vec<Vec<u8>>,
    spans: Vec<Span>,
    service_names: Vec<String>,
}

/// An OTLP/HTTP receiver on a free port; `/v1/traces` accepts protobuf export requests.
async fn receiver() -> (SocketAddr, Arc<Mutex<Received>>) {
    let received = Arc::new(Mutex::new(Received::default()));
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(
                |State(received): State<Arc<Mutex<Received>>>, body: Bytes| async move {
                    let request = ExportTraceServiceRequest::decode(body.as_ref())
                        .expect("an OTLP protobuf export request");
                    let mut received = received.lock().unwrap();
                    received.bodies.push(body.to_vec());
                    for resource in request.resource_spans {
                        if let Some(resource) = &resource.resource {
                            received.service_names.extend(
                                resource
                                    .attributes
                                    .iter()
                                    .filter(|kv| kv.key == "service.name")
                                    .filter_map(|kv| string(kv.value.as_ref()?.value.as_ref()?)),
                            );
                        }
                        for scope in resource.scope_spans {
                            received.spans.extend(scope.spans);
                        }
                    }
                    // An empty ExportTraceServiceResponse.
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                },
            ),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, received)
}

fn string(value: &Value) -> Option<String> {
    match value {
        Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

/// The string attribute `key` of `span`.
fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| string(kv.value.as_ref()?.value.as_ref()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pass_is_one_trace_with_the_secret_read_the_lock_wait_and_the_migration_as_children_and_no_password()
 {
    let cluster = Cluster::start().await;
    let ns = "tracing";
    cluster.secret(ns, "db").await;
    let password = cluster
        .db
        .url
        .parse::<tokio_postgres::Config>()
        .unwrap()
        .get_password()
        .map(|p| String::from_utf8(p.to_vec()).unwrap())
        .expect("the test database URL has a password");
    // A Secret with a wrong password: its pass fails on authentication, and the failure is
    // exported as well (with its error, never the password).
    let wrong = "wrong-password-7f3e1c";
    let mut url = url_with_password(&cluster.db.url, wrong);
    url.push_str("&connect_timeout=10");
    cluster
        .apply(format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: wrong\n  namespace: {ns}\nstringData:\n  connectionString: {url:?}\n"
        ))
        .await;

    let (addr, received) = receiver().await;
    let endpoint = format!("http://{addr}");
    let operator = cluster.operator_with(ns, "e2e-tracing", &["--otlp-endpoint", &endpoint]);
    cluster
        .apply_boxtable(ns, boxtable("orders").table("orders_outbox"))
        .await;
    cluster
        .apply(
            boxtable("refused")
                .namespace(ns)
                .table("refused_outbox")
                .secret("wrong")
                .manifest(),
        )
        .await;
    cluster.wait_ready(ns, "orders").await;

    // The pass that migrated: a root span with its three children.
    let (pass, children) = cluster
        .eventually(
            "the migrating pass's trace at the receiver",
            WAIT,
            || async {
                let received = received.lock().unwrap();
                let pass = received.spans.iter().find(|s| {
                    s.name == "reconcile"
                        && attribute(s, "boxtable") == Some(format!("{ns}/orders"))
                        && received
                            .spans
                            .iter()
                            .any(|c| c.name == "migration" && c.parent_span_id == s.span_id)
                })?;
                let children: Vec<Span> = received
                    .spans
                    .iter()
                    .filter(|c| c.trace_id == pass.trace_id && c.parent_span_id == pass.span_id)
                    .cloned()
                    .collect();
                let names: Vec<&str> = children.iter().map(|c| c.name.as_str()).collect();
                (["read_secret", "lock_wait", "migration"]
                    .iter()
                    .all(|n| names.contains(n)))
                .then(|| (pass.clone(), children))
            },
        )
        .await;
    assert!(
        pass.parent_span_id.is_empty(),
        "each pass is the root of its own trace"
    );
    assert_eq!(attribute(&pass, "boxtable"), Some(format!("{ns}/orders")));
    assert_eq!(
        attribute(&pass, "table").as_deref(),
        Some("public.orders_outbox")
    );
    assert_eq!(attribute(&pass, "outcome").as_deref(), Some("success"));
    for child in &children {
        assert!(
            child.start_time_unix_nano >= pass.start_time_unix_nano
                && child.end_time_unix_nano <= pass.end_time_unix_nano,
            "{} lies within its pass",
            child.name
        );
    }
    let child = |name: &str| children.iter().find(|c| c.name == name).unwrap();
    assert_eq!(
        attribute(child("read_secret"), "secret").as_deref(),
        Some("db")
    );
    assert_eq!(
        attribute(child("lock_wait"), "lock_key").as_deref(),
        Some("BrighterMigration_public.orders_outbox")
    );
    assert_eq!(
        attribute(child("migration"), "table").as_deref(),
        Some("public.orders_outbox")
    );
    // The lock is waited for before the migration runs under it.
    assert!(child("lock_wait").end_time_unix_nano <= child("migration").start_time_unix_nano);

    // The refused pass: exported, given up on (stalled), its table named.
    let refused = cluster
        .eventually("the refused pass's span", WAIT, || async {
            let received = received.lock().unwrap();
            received
                .spans
                .iter()
                .find(|s| {
                    s.name == "reconcile"
                        && attribute(s, "boxtable") == Some(format!("{ns}/refused"))
                        && attribute(s, "outcome").is_some()
                })
                .cloned()
        })
        .await;
    assert_eq!(attribute(&refused, "outcome").as_deref(), Some("stalled"));
    assert_eq!(
        attribute(&refused, "table").as_deref(),
        Some("public.refused_outbox")
    );

    let received = received.lock().unwrap();
    assert!(
        received
            .service_names
            .iter()
            .all(|s| s == "boxtable-operator")
            && !received.service_names.is_empty(),
        "{:?}",
        received.service_names
    );
    for body in &received.bodies {
        for secret in [password.as_str(), wrong] {
            assert!(
                !body.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "an exported span holds a password"
            );
        }
    }
    println!(
        "received {} spans in {} export requests",
        received.spans.len(),
        received.bodies.len()
    );
    drop(operator);
}

/// `url` (a postgres:// URL with user and password) with its password replaced.
fn url_with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, host) = rest.split_once('@').unwrap();
    let user = userinfo.split(':').next().unwrap();
    let host = if host.contains('?') {
        host.to_owned()
    } else {
        format!("{host}?sslmode=disable")
    };
    format!("{scheme}://{user}:{password}@{host}")
}

#[test]
fn an_https_otlp_endpoint_is_refused_at_start_with_a_message_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    for endpoint in ["https://127.0.0.1:4318", "127.0.0.1:4318"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_boxtable-operator"))
            .args([
                "run",
                "--metrics-addr",
                "127.0.0.1:0",
                "--otlp-endpoint",
                endpoint,
            ])
            // No cluster: the refusal must come first, from the flag alone.
            .env("KUBECONFIG", dir.path().join("none"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{endpoint}: {stderr}");
        assert!(
            stderr.contains("the OTLP endpoint must be an http:// URL")
                && stderr.contains("without TLS"),
            "{endpoint}: {stderr}"
        );
        assert!(
            !stderr.contains("Kubernetes client"),
            "{endpoint}: refused before anything else starts: {stderr}"
        );
    }
}
