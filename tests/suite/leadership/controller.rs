//! The controller with leader election against the real kube-apiserver, running as the
//! operator's ServiceAccount: Lease renewals answered 503, or stalled for 20 seconds, in the middle
//! of a long migration leave the migration running; a standby reports ready; and a leader that
//! shuts down hands over to the standby at once. Each test has a namespace of its own, with the
//! leader-election Role of `deploy/rbac.yaml` bound there, so the tests do not share a Lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use boxtable_operator::controller::leader::Timing;
use boxtable_operator::controller::{self, RunError, Settings};
use boxtable_operator::crd::BoxTable;
use boxtable_operator::telemetry::{Metrics, Readiness};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::Sql;
use crate::support::control_plane::{ControlPlane, OperatorToken, control_plane};
use crate::support::controller::{BoxTableBuilder, NAMESPACE, SECRET, boxtable, is_ready};
use crate::support::fault_proxy::{FaultProxy, Rule, RuleHandle};
use crate::support::wait::wait_until;

/// A 12 s lease renewed every 300 ms and given up after 10 s without a renewal (one Lease request
/// may take 5 s).
const TIMING: Timing = Timing {
    lease_duration: Duration::from_secs(12),
    renew_deadline: Duration::from_secs(10),
    retry_period: Duration::from_millis(300),
};

/// The leader-election Role and RoleBinding of `deploy/rbac.yaml`, to apply in a test namespace.
fn leader_election_rbac() -> String {
    let rbac = include_str!("../../../deploy/rbac.yaml");
    let docs: Vec<&str> = rbac
        .split("\n---\n")
        .filter(|doc| doc.contains("\nkind: Role\n") || doc.contains("\nkind: RoleBinding\n"))
        .collect();
    assert_eq!(
        docs.len(),
        2,
        "deploy/rbac.yaml has one leader-election Role and binding"
    );
    docs.join("\n---\n")
}

/// A namespace of the test's own on the real API server, the admin's client, the operator's
/// token, and a test database with its Secret.
struct Cluster {
    plane: &'static ControlPlane,
    namespace: String,
    client: kube::Client,
    token: OperatorToken,
    db: support::TestDb,
}

impl Cluster {
    async fn start() -> Cluster {
        let plane = control_plane();
        let namespace = plane.create_namespace(NAMESPACE);
        plane
            .kubectl_admin(
                &["apply", "-n", &namespace, "-f", "-"],
                Some(&leader_election_rbac()),
            )
            .unwrap_or_else(|message| panic!("{message}"));
        let client = plane.admin_client().await;
        let token = plane.operator_token();
        let db = support::fresh_db().await;
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": namespace},
            "stringData": {"connectionString": db.url},
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), &namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        Cluster {
            plane,
            namespace,
            client,
            token,
            db,
        }
    }

    /// A client with the operator's token, straight to the server.
    async fn operator_client(&self) -> kube::Client {
        self.plane.client_for_token(&self.token).await
    }

    /// Creates the BoxTable in the test's namespace.
    async fn create(&self, builder: BoxTableBuilder) {
        let mut bt = builder.build();
        bt.metadata.namespace = Some(self.namespace.clone());
        self.boxtables()
            .create(&PostParams::default(), &bt)
            .await
            .unwrap();
    }

    /// Waits until the BoxTable `name` is Ready, failing with `what`.
    async fn wait_ready(&self, name: &str, what: &str) {
        wait_until(what, || async {
            self.boxtables()
                .get(name)
                .await
                .is_ok_and(|bt| is_ready(&bt))
        })
        .await;
    }

    fn boxtables(&self) -> Api<BoxTable> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(controller::CONTROLLER_NAME)
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    }

    fn replica(&self, client: kube::Client, identity: &str) -> Replica {
        replica(client, &self.namespace, identity)
    }
}

impl Drop for Cluster {
    /// A call the operator made that `deploy/rbac.yaml` does not allow fails the test.
    fn drop(&mut self) {
        support::control_plane::assert_no_forbidden_requests(self.plane, &self.token);
    }
}

/// One operator replica with leader election.
struct Replica {
    readiness: Readiness,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
}

fn replica(client: kube::Client, namespace: &str, identity: &str) -> Replica {
    let readiness = Readiness::new();
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let settings = Settings {
        namespaces: vec![namespace.to_owned()],
        concurrency: 4,
        resync: Duration::from_secs(2),
        retry_base: Duration::from_millis(500),
        instance: identity.to_owned(),
        leader_election_namespace: Some(namespace.to_owned()),
        leader_timing: TIMING,
        secret_label_selector: None,
        sessions: Default::default(),
        cluster_name: "test".to_owned(),
    };
    let task = tokio::spawn(controller::run(
        client,
        settings,
        metrics.clone(),
        readiness.clone(),
        shutdown.clone(),
    ));
    Replica {
        readiness,
        metrics,
        shutdown,
        task,
    }
}

impl Replica {
    /// `boxtable_leader` as this replica's `/metrics` shows it.
    fn leader_gauge(&self) -> f64 {
        let body = self.metrics.encode().unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix("boxtable_leader ")?.parse().ok())
            .unwrap_or_else(|| panic!("no boxtable_leader in\n{body}"))
    }
}

/// Operator sessions whose statement waits on a table lock.
async fn blocked_migrations(sql: &tokio_postgres::Client) -> i64 {
    sql.value(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'boxtable-operator/%' \
         AND wait_event_type = 'Lock' AND wait_event = 'relation' AND datname = current_database()",
        &[],
    )
    .await
}

/// Starts a leader through a fault proxy, blocks its migration of `public.victim` (V6 to V8) on a
/// table lock, adds the Lease fault `fault` returns (its counter), waits until it has been hit,
/// `lasting` has passed and two more renewals have gone through, and checks that the migration
/// went on and finished under the same leader.
async fn a_long_migration_survives(
    lasting: Duration,
    fault: impl FnOnce(&FaultProxy) -> RuleHandle,
) {
    let cluster = Cluster::start().await;
    let sql = cluster.db.connect().await;
    support::migrate::outbox_at(&sql, "public.victim", 6, 1).await;
    // The migration blocks on its first ALTER until this transaction ends.
    let blocker = cluster.db.connect().await;
    blocker
        .batch("BEGIN; LOCK TABLE public.victim IN ACCESS SHARE MODE")
        .await;
    let proxy = FaultProxy::start(cluster.operator_client().await).await;
    let leader = cluster.replica(proxy.client(), "pod-a");
    wait_until("pod-a leads", || async {
        cluster.holder().await.as_deref() == Some("pod-a")
    })
    .await;
    // Longer than the default DDL lock wait (10 s): this migration is meant to wait out the fault.
    cluster
        .create(boxtable("victim").table("victim").ddl_lock_timeout("5m"))
        .await;
    wait_until("the migration blocks on the table lock", || async {
        blocked_migrations(&sql).await == 1
    })
    .await;

    let added = Instant::now();
    let faulted = fault(&proxy);
    let renewed = proxy.add(Rule::count().method("PUT").path_contains("/leases/"));
    wait_until("the fault to be hit and to have lasted", || async {
        leader.task.is_finished() || (faulted.hits() > 0 && added.elapsed() >= lasting)
    })
    .await;
    let before = renewed.hits();
    wait_until("two good renewals after the fault", || async {
        leader.task.is_finished() || renewed.hits() >= before + 2
    })
    .await;

    assert!(!leader.task.is_finished(), "the controller stopped");
    assert_eq!(cluster.holder().await.as_deref(), Some("pod-a"));
    assert_eq!(
        blocked_migrations(&sql).await,
        1,
        "the migration is still running"
    );
    blocker.batch("ROLLBACK").await;
    wait_until("victim is Ready at version 8", || async {
        cluster.boxtables().get("victim").await.is_ok_and(|bt| {
            is_ready(&bt) && bt.status.as_ref().and_then(|s| s.applied_version) == Some(8)
        })
    })
    .await;
    let last_run = cluster
        .boxtables()
        .get("victim")
        .await
        .unwrap()
        .status
        .unwrap()
        .last_run
        .unwrap();
    assert_eq!((last_run.from_version, last_run.to_version), (6, 8));
    leader.shutdown.cancel();
    leader.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewals_answered_503_during_a_long_migration_do_not_cancel_it() {
    // The Lease endpoint answers 503 for 6 s: longer than one request may take, so the client's
    // own retries of the 503 run out of time and the elector has to retry.
    a_long_migration_survives(Duration::from_secs(6), |proxy| {
        proxy.add(
            Rule::status(503)
                .method("PUT")
                .path_contains("/leases/")
                .during(Duration::from_secs(6)),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewal_stalled_for_20_seconds_during_a_long_migration_does_not_cancel_it() {
    // The renewal hangs for 20 s (longer than the renew deadline) and then times out; the
    // elector abandons it after half the renew deadline and renews with a new request.
    a_long_migration_survives(Duration::from_secs(20), |proxy| {
        proxy.add(
            Rule::stall(Duration::from_secs(20))
                .then_status(504)
                .method("PUT")
                .path_contains("/leases/")
                .times(1),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_is_ready_and_takes_over_at_once_when_the_leader_shuts_down() {
    let cluster = Cluster::start().await;
    let mut first = cluster.replica(cluster.operator_client().await, "pod-a");
    wait_until("pod-a leads and is ready", || async {
        cluster.holder().await.as_deref() == Some("pod-a") && first.readiness.is_ready()
    })
    .await;
    let mut second = cluster.replica(cluster.operator_client().await, "pod-b");

    wait_until("the standby is ready", || async {
        second.readiness.is_ready()
    })
    .await;
    assert_eq!(cluster.holder().await.as_deref(), Some("pod-a"));
    assert!(!second.task.is_finished());
    assert_eq!(first.leader_gauge(), 1.0, "the leader's boxtable_leader");
    assert_eq!(second.leader_gauge(), 0.0, "a standby's boxtable_leader");
    cluster.create(boxtable("orders")).await;
    cluster.wait_ready("orders", "orders is Ready").await;

    first.shutdown.cancel();
    (&mut first.task).await.unwrap().unwrap();
    let handed_back = Instant::now();
    assert_eq!(
        first.leader_gauge(),
        0.0,
        "handed back: no longer the leader"
    );
    wait_until("pod-b leads", || async {
        cluster.holder().await.as_deref() == Some("pod-b")
    })
    .await;
    assert!(
        handed_back.elapsed() < TIMING.lease_duration,
        "taken over at the next try, not after expiry: {:?}",
        handed_back.elapsed()
    );
    cluster
        .create(boxtable("billing").table("billing_outbox"))
        .await;
    cluster
        .wait_ready("billing", "billing is Ready under the new leader")
        .await;
    wait_until("the new leader is ready", || async {
        second.readiness.is_ready()
    })
    .await;
    assert_eq!(
        second.leader_gauge(),
        1.0,
        "the new leader's boxtable_leader"
    );
    second.shutdown.cancel();
    (&mut second.task).await.unwrap().unwrap();
    assert_eq!(second.leader_gauge(), 0.0);
}
