//! The two replicas of `dist/install.yaml` on the real node when a Pod goes: the leader deleted
//! while it waits for a table's advisory lock exits at once (well within its grace period), its
//! database sessions end, and it hands the Lease back, so another replica (the standby, or the
//! Pod started in the deleted one's place) takes over before the Lease could have expired and
//! migrates the table once the lock is free; a container killed with
//! SIGKILL is restarted by the kubelet, once, and the operator converges again; and with the node
//! cordoned, the PodDisruptionBudget lets one replica be evicted and refuses the second.
//!
//! Like `node_install`, these run after the rest, one at a time (`scripts/test.sh`).

use std::process::Command;
use std::time::{Duration, Instant};

use boxtable_operator::controller::leader::LEASE_DURATION;
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;

use crate::support::Sql;
use crate::support::control_plane::{ControlPlane, OPERATOR_NAMESPACE};
use crate::support::node::{assert_succeeded, get_json, printed, wait_for};
use crate::support::node_install::{Install, is_ready, name, secret_for};
use crate::support::{TestDb, fresh_db};

/// The grace period `dist/install.yaml` gives the operator's Pods.
const GRACE: Duration = Duration::from_secs(60);

/// A BoxTable for `public.outbox` in `namespace`, reading Secret `db`, waiting up to 10 minutes
/// for the lock.
fn outbox(namespace: &str) -> String {
    format!(
        "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: orders-outbox\n  \
         namespace: {namespace}\nspec:\n  box: Outbox\n  database:\n    secretRef:\n      name: db\n  \
         lock:\n    timeout: 10m\n"
    )
}

/// Creates `namespace` afresh, with Secret `db` for `db` and the outbox BoxTable.
fn apply_outbox(install: &mut Install, namespace: &str, db: &TestDb) {
    let plane = install.plane;
    plane.fresh_namespace(namespace);
    install.namespace(namespace);
    let manifests = format!(
        "{}---\n{}",
        secret_for(install.node, namespace, "db", db),
        outbox(namespace)
    );
    plane
        .kubectl_admin(&["apply", "-f", "-"], Some(&manifests))
        .unwrap_or_else(|m| panic!("{m}"));
}

fn wait_ready(plane: &ControlPlane, namespace: &str) {
    let waited = plane.kubectl_as(
        &plane.admin_kubeconfig,
        &[
            "-n",
            namespace,
            "wait",
            "--for=condition=Ready",
            "boxtable/orders-outbox",
            "--timeout=120s",
        ],
        None,
    );
    assert_succeeded(
        plane,
        &waited,
        "orders-outbox did not reach Ready",
        &["-n", namespace, "boxtable", "orders-outbox"],
    );
}

/// A runtime, a fresh database, and `dist/install.yaml` with its two replicas Ready: the
/// install, its Pods and the name of the leader's.
fn a_database_and_two_ready_replicas() -> (
    tokio::runtime::Runtime,
    TestDb,
    Install,
    Vec<serde_json::Value>,
    String,
) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(fresh_db());
    let install = Install::dist();
    let pods = install.ready_pods(2);
    let leader = install.leader(&pods);
    (runtime, db, install, pods, leader)
}

#[test]
fn the_leader_deleted_during_a_lock_wait_exits_at_once_and_hands_the_lease_over() {
    const NS: &str = "node-failover";
    let (runtime, db, mut install, _pods, leader) = a_database_and_two_ready_replicas();
    let plane = install.plane;

    // A Brighter application holds the table's migration lock: the leader waits for it.
    let app = runtime.block_on(db.connect());
    let table = QualifiedName::parse(Some("public"), "outbox").unwrap();
    let key = LockIdentity::for_table(&table).key();
    runtime.block_on(async {
        app.query_one("SELECT pg_advisory_lock($1)", &[&key])
            .await
            .unwrap();
    });
    apply_outbox(&mut install, NS, &db);
    wait_for(
        "the leader waiting for the lock",
        Duration::from_secs(60),
        || {
            let bt = get_json(plane, &["-n", NS, "boxtable", "orders-outbox"]);
            (bt["status"]["lock"]["state"] == "Waiting").then_some(())
        },
    );
    let sessions_since = |since: &str| -> i64 {
        runtime.block_on(async {
            app.value(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name LIKE 'boxtable-operator/%' AND backend_start < $1::text::timestamptz",
                &[&since],
            ).await
        })
    };
    let deleted_at: String = runtime.block_on(async { app.value("SELECT now()::text", &[]).await });
    assert!(
        sessions_since(&deleted_at) > 0,
        "the waiting leader has a session open"
    );

    // Delete the leader's Pod; follow the Lease until another replica holds it: the standby, or
    // the Pod the Deployment starts in the deleted one's place, whichever asks first.
    let (_, mut renewed, _) = install.lease();
    let started = Instant::now();
    plane
        .kubectl_admin(
            &[
                "-n",
                OPERATOR_NAMESPACE,
                "delete",
                "pod",
                &leader,
                "--wait=false",
            ],
            None,
        )
        .unwrap_or_else(|m| panic!("{m}"));
    let acquired = wait_for(
        "another replica to hold the Lease",
        Duration::from_secs(90),
        || {
            let (holder, renew, acquire) = install.lease();
            if holder == leader {
                renewed = renew.or(renewed);
            }
            (!holder.is_empty() && holder != leader).then_some((holder, acquire))
        },
    );
    let took_over = started.elapsed();
    let gone = wait_for("the leader's Pod to be gone", GRACE * 2, || {
        let pods = get_json(plane, &["-n", OPERATOR_NAMESPACE, "pods"]);
        (!pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == leader.as_str()))
        .then(|| started.elapsed())
    });
    // Without the hand-back the standby could only take the Lease once it expired, a lease
    // duration after the leader's last renewal.
    let (new_leader, acquired) = acquired;
    let (renewed, acquired) = (renewed.unwrap(), acquired.unwrap());
    let after_renewal = acquired.duration_since(renewed);
    assert!(
        after_renewal < jiff::SignedDuration::try_from(LEASE_DURATION).unwrap(),
        "{new_leader} took the Lease {after_renewal:#} after the leader's last renewal: it expired \
         instead of being handed back"
    );
    // A process that ignored SIGTERM would be killed at the end of the grace period.
    assert!(
        gone < GRACE / 2,
        "the deleted leader's Pod took {gone:?} to go (grace period {GRACE:?})"
    );
    wait_for(
        "the deleted leader's sessions to end",
        Duration::from_secs(30),
        || (sessions_since(&deleted_at) == 0).then_some(()),
    );
    let locks: i64 = runtime.block_on(async {
        app.value(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND pid <> pg_backend_pid() \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
    });
    assert_eq!(locks, 0, "an advisory lock held by another session");

    // The application lets go: the new leader migrates the table, once.
    runtime.block_on(async {
        app.query_one("SELECT pg_advisory_unlock($1)", &[&key])
            .await
            .unwrap();
    });
    wait_ready(plane, NS);
    let bt = get_json(plane, &["-n", NS, "boxtable", "orders-outbox"]);
    assert_eq!(bt["status"]["appliedVersion"], 8, "{bt:#}");
    let repeated: i64 = runtime.block_on(async {
        app.value(
            "SELECT count(*) - count(DISTINCT \"MigrationVersion\") \
             FROM public.\"__BrighterMigrationHistory\" WHERE \"BoxTableName\" = 'outbox'",
            &[],
        )
        .await
    });
    assert_eq!(repeated, 0, "a migration recorded twice in the history");
    install.ready_pods(2);
    eprintln!(
        "failover: {new_leader} held the Lease {:.1}s after the leader's Pod was deleted \
         ({after_renewal:#} after the leader's last renewal); the Pod was gone in {:.1}s",
        took_over.as_secs_f64(),
        gone.as_secs_f64()
    );
}

#[test]
fn a_container_killed_with_sigkill_is_restarted_once_by_the_kubelet_and_converges() {
    const NS: &str = "node-sigkill";
    let (_runtime, db, mut install, pods, leader) = a_database_and_two_ready_replicas();
    let plane = install.plane;
    let pod = pods.iter().find(|p| name(p) == leader).unwrap();
    let pid = install.operator_pid(pod);
    let started = Instant::now();
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .output()
        .unwrap();
    assert!(killed.status.success(), "kill: {}", printed(&killed));
    let restarted = wait_for(
        "the killed container restarted and Ready",
        Duration::from_secs(120),
        || {
            let pod = get_json(plane, &["-n", OPERATOR_NAMESPACE, "pod", &leader]);
            let status = &pod["status"]["containerStatuses"][0];
            (status["restartCount"] == 1
                && is_ready(&pod)
                && status["state"]["running"].is_object())
            .then(|| (started.elapsed(), status.clone()))
        },
    );
    let (after, status) = restarted;
    assert_eq!(
        status["lastState"]["terminated"]["exitCode"], 137,
        "killed by SIGKILL: {status:#}"
    );
    // The operator converges: a BoxTable applied now reaches Ready (whichever replica leads).
    apply_outbox(&mut install, NS, &db);
    wait_ready(plane, NS);
    // No crash loop: the killed container restarted once, the other never.
    for pod in install.ready_pods(2) {
        let restarts = &pod["status"]["containerStatuses"][0]["restartCount"];
        let expected = if name(&pod) == leader { 1 } else { 0 };
        assert_eq!(restarts, expected, "{}: {:#}", name(&pod), pod["status"]);
    }
    eprintln!(
        "SIGKILL: the kubelet restarted the leader's container, Ready again {:.1}s after the kill",
        after.as_secs_f64()
    );
}

/// Uncordons the node when dropped.
struct Cordoned(&'static ControlPlane, String);

impl Drop for Cordoned {
    fn drop(&mut self) {
        let _ = self.0.kubectl_admin(&["uncordon", &self.1], None);
    }
}

/// `POST pods/NAME/eviction`: kubectl's output.
fn evict(plane: &ControlPlane, pod: &str) -> std::process::Output {
    let eviction = serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": OPERATOR_NAMESPACE},
    });
    plane.kubectl_as(
        &plane.admin_kubeconfig,
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        Some(&eviction.to_string()),
    )
}

#[test]
fn with_the_node_cordoned_the_pdb_allows_evicting_one_replica_and_refuses_the_second() {
    let install = Install::dist();
    let plane = install.plane;
    let pods = install.ready_pods(2);
    plane
        .kubectl_admin(&["cordon", &install.node.name], None)
        .unwrap_or_else(|m| panic!("{m}"));
    let _cordoned = Cordoned(plane, install.node.name.clone());
    wait_for(
        "the PodDisruptionBudget to allow one disruption",
        Duration::from_secs(60),
        || {
            let pdb = get_json(
                plane,
                &["-n", OPERATOR_NAMESPACE, "pdb", "boxtable-operator"],
            );
            (pdb["status"]["currentHealthy"] == 2 && pdb["status"]["disruptionsAllowed"] == 1)
                .then_some(())
        },
    );
    let (first, second) = (name(&pods[0]), name(&pods[1]));
    let evicted = evict(plane, &first);
    assert!(
        evicted.status.success(),
        "evicting {first}: {}",
        printed(&evicted)
    );
    let refused = evict(plane, &second);
    assert!(
        !refused.status.success(),
        "evicting {second} as well was allowed"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("disruption budget"),
        "refused for another reason: {}",
        printed(&refused)
    );
    // The second replica runs on; the first one's replacement waits, unschedulable.
    let after = get_json(plane, &["-n", OPERATOR_NAMESPACE, "pod", &second]);
    assert!(after["metadata"]["deletionTimestamp"].is_null() && is_ready(&after));
    wait_for(
        "the replacement Pod pending on the cordoned node",
        Duration::from_secs(60),
        || {
            install
                .pods()
                .iter()
                .any(|p| {
                    name(p) != first
                        && name(p) != second
                        && p["status"]["phase"] == "Pending"
                        && p["spec"]["nodeName"].is_null()
                })
                .then_some(())
        },
    );
}
