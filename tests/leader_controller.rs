//! The controller with leader election against the local API server: Lease renewals answered 503
//! in the middle of a long migration leave the migration running, a standby reports ready, and a
//! leader that shuts down hands over to the standby at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod controller_support;
#[path = "support/fault_proxy.rs"]
mod fault_proxy;
mod migrate_support;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use boxtable_localapi::{LocalApi, LocalApiHandle};
use boxtable_operator::controller::leader::Timing;
use boxtable_operator::controller::{self, RunError, Settings};
use boxtable_operator::crd::BoxTable;
use boxtable_operator::telemetry::{Metrics, Readiness};
use controller_support::{NAMESPACE, SECRET, boxtable, is_ready};
use fault_proxy::{FaultProxy, Rule};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long any wait on a condition may take: generous, for busy machines.
const WAIT: Duration = Duration::from_secs(60);

/// A 12 s lease renewed every 300 ms and given up after 10 s without a renewal (one Lease request
/// may take 5 s).
const TIMING: Timing = Timing {
    lease_duration: Duration::from_secs(12),
    renew_deadline: Duration::from_secs(10),
    retry_period: Duration::from_millis(300),
};

/// The local API server, a client for it and a test database with its Secret.
struct Cluster {
    _api: LocalApiHandle,
    client: kube::Client,
    db: support::TestDb,
}

impl Cluster {
    async fn start() -> Cluster {
        let api = LocalApi::builder()
            .crd_file(concat!(env!("CARGO_MANIFEST_DIR"), "/crds/boxtable.yaml"))
            .namespace(NAMESPACE)
            .start()
            .await
            .unwrap();
        let client = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
        let db = support::fresh_db().await;
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": NAMESPACE},
            "stringData": {"connectionString": db.url},
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        Cluster {
            _api: api,
            client,
            db,
        }
    }

    fn boxtables(&self) -> Api<BoxTable> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    async fn holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.client.clone(), NAMESPACE)
            .get_opt(controller::CONTROLLER_NAME)
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    }
}

/// One operator replica with leader election.
struct Replica {
    readiness: Readiness,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
}

fn replica(client: kube::Client, identity: &str) -> Replica {
    let readiness = Readiness::new();
    let shutdown = CancellationToken::new();
    let settings = Settings {
        namespaces: vec![NAMESPACE.to_owned()],
        concurrency: 4,
        resync: Duration::from_secs(2),
        retry_base: Duration::from_millis(500),
        instance: identity.to_owned(),
        leader_election_namespace: Some(NAMESPACE.to_owned()),
        leader_timing: TIMING,
    };
    let task = tokio::spawn(controller::run(
        client,
        settings,
        Arc::new(Metrics::new()),
        readiness.clone(),
        shutdown.clone(),
    ));
    Replica {
        readiness,
        shutdown,
        task,
    }
}

/// Polls `check` every 100 ms until it holds; fails naming `what` after [`WAIT`].
async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < WAIT, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Operator sessions whose statement waits on a table lock.
async fn blocked_migrations(sql: &tokio_postgres::Client) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'boxtable-operator/%' \
         AND wait_event_type = 'Lock' AND wait_event = 'relation'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewals_answered_503_during_a_long_migration_do_not_cancel_it() {
    let cluster = Cluster::start().await;
    let sql = cluster.db.connect().await;
    migrate_support::outbox_at(&sql, "public.victim", 6, 1).await;
    // The migration blocks on its first ALTER until this transaction ends.
    let blocker = cluster.db.connect().await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE public.victim IN ACCESS SHARE MODE")
        .await
        .unwrap();
    let proxy = FaultProxy::start(cluster.client.clone()).await;
    let leader = replica(proxy.client(), "pod-a");
    wait_until("pod-a leads", || async {
        cluster.holder().await.as_deref() == Some("pod-a")
    })
    .await;
    cluster
        .boxtables()
        .create(
            &PostParams::default(),
            &boxtable("victim").table("victim").build(),
        )
        .await
        .unwrap();
    wait_until("the migration blocks on the table lock", || async {
        blocked_migrations(&sql).await == 1
    })
    .await;

    // The Lease endpoint answers 503 for 6 s: longer than one request may take, so the client's
    // own retries of the 503 run out of time and the elector has to retry.
    let unavailable = proxy.add(
        Rule::status(503)
            .method("PUT")
            .path_contains("/leases/")
            .during(Duration::from_secs(6)),
    );
    let renewed = proxy.add(Rule::count().method("PUT").path_contains("/leases/"));
    wait_until(
        "6 s of renewals answered 503, then two good ones",
        || async { leader.task.is_finished() || (unavailable.hits() > 0 && renewed.hits() >= 2) },
    )
    .await;

    assert!(!leader.task.is_finished(), "the controller stopped");
    assert_eq!(
        blocked_migrations(&sql).await,
        1,
        "the migration is still running"
    );
    blocker.batch_execute("ROLLBACK").await.unwrap();
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
async fn a_standby_is_ready_and_takes_over_at_once_when_the_leader_shuts_down() {
    let cluster = Cluster::start().await;
    let first = replica(cluster.client.clone(), "pod-a");
    wait_until("pod-a leads and is ready", || async {
        cluster.holder().await.as_deref() == Some("pod-a") && first.readiness.is_ready()
    })
    .await;
    let second = replica(cluster.client.clone(), "pod-b");

    wait_until("the standby is ready", || async {
        second.readiness.is_ready()
    })
    .await;
    assert_eq!(cluster.holder().await.as_deref(), Some("pod-a"));
    assert!(!second.task.is_finished());
    cluster
        .boxtables()
        .create(&PostParams::default(), &boxtable("orders").build())
        .await
        .unwrap();
    wait_until("orders is Ready", || async {
        cluster
            .boxtables()
            .get("orders")
            .await
            .is_ok_and(|bt| is_ready(&bt))
    })
    .await;

    first.shutdown.cancel();
    first.task.await.unwrap().unwrap();
    let handed_back = Instant::now();
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
        .boxtables()
        .create(
            &PostParams::default(),
            &boxtable("billing").table("billing_outbox").build(),
        )
        .await
        .unwrap();
    wait_until("billing is Ready under the new leader", || async {
        cluster
            .boxtables()
            .get("billing")
            .await
            .is_ok_and(|bt| is_ready(&bt))
    })
    .await;
    wait_until("the new leader is ready", || async {
        second.readiness.is_ready()
    })
    .await;
    second.shutdown.cancel();
    second.task.await.unwrap().unwrap();
}
