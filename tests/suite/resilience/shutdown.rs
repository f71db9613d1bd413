//! Shutdown (SIGTERM) of the real binary against the real kube-apiserver, behind the fault proxy:
//! a leader hands the Lease back before the process exits (the proxy holds the hand-back's read of
//! the Lease for a while: the process has to wait for it), so a standby takes over at its next try
//! instead of after a whole lease duration; and an operator whose BoxTable cache has not synced
//! yet (the proxy holds its first list) still exits at once; and a pass stopped while it waited
//! for the advisory lock says so, not that it rolled anything back.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use boxtable_operator::controller::CONTROLLER_NAME;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::DeleteParams;

use crate::support::Sql;
use crate::support::control_plane::OPERATOR_NAMESPACE;
use crate::support::e2e::{Cluster, Rule, connect, operator_binary};
use crate::support::reliability::hold_brighter_lock;

/// How long any wait on a condition may take: generous, for busy machines.
const WAIT: Duration = Duration::from_secs(60);
/// How long the proxy holds each read of the Lease once the leader is told to stop.
const HOLD: Duration = Duration::from_secs(3);

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(CONTROLLER_NAME)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// The operator process, killed when the test ends, also when it fails before the SIGTERM.
struct Operator(Child);

impl std::ops::Deref for Operator {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Operator {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the operator binary on `namespace` with `extra` arguments, talking through `kubeconfig`.
fn operator(kubeconfig: &Path, log: &Path, namespace: &str, extra: &[&str]) -> Operator {
    let child = Command::new(operator_binary())
        .args(["run", "--namespace", namespace])
        .args(["--metrics-addr", "127.0.0.1:0", "--instance", "pod-a"])
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info,boxtable_operator=debug")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Operator(child)
}

/// Sends SIGTERM and waits (polling, up to [`WAIT`]) for the process to exit successfully;
/// returns how long it took.
async fn terminate(operator: &mut Operator, log: &Path) -> Duration {
    let status = Command::new("kill")
        .args(["-TERM", &operator.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let signalled = Instant::now();
    let exit = loop {
        if let Some(exit) = operator.try_wait().unwrap() {
            break exit;
        }
        if signalled.elapsed() > WAIT {
            let _ = operator.kill();
            panic!(
                "the operator did not exit within {WAIT:?} of SIGTERM; log:\n{}",
                std::fs::read_to_string(log).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        exit.success(),
        "exit {exit}; log:\n{}",
        std::fs::read_to_string(log).unwrap()
    );
    signalled.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_leader_hands_the_lease_back_before_it_exits() {
    let cluster = Cluster::start_with_faults().await;
    cluster.secret("leader-shutdown", "db").await;
    let leases = Api::<Lease>::namespaced(cluster.admin_client().await, OPERATOR_NAMESPACE);
    let _ = leases
        .delete(CONTROLLER_NAME, &DeleteParams::default())
        .await;
    let log = cluster.dir.path().join("leader.log");
    let mut operator = operator(
        &cluster.operator_kubeconfig,
        &log,
        "leader-shutdown",
        &[
            "--leader-election",
            "--leader-election-namespace",
            OPERATOR_NAMESPACE,
        ],
    );
    let started = Instant::now();
    while holder(&leases).await.as_deref() != Some("pod-a") {
        assert!(started.elapsed() < WAIT, "pod-a never took the Lease");
        assert!(
            operator.try_wait().unwrap().is_none(),
            "the operator exited"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The hand-back reads the Lease, then clears its holder; each read now takes HOLD.
    let held = cluster
        .api
        .add(Rule::stall(HOLD).method("GET").path_contains("/leases/"));
    let took = terminate(&mut operator, &log).await;
    assert!(held.hits() >= 1, "the Lease was read through the proxy");
    assert_eq!(
        holder(&leases).await,
        None,
        "the Lease is handed back before the process exits ({took:?} after SIGTERM); log:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sigtermed_before_its_cache_synced_exits_at_once() {
    let cluster = Cluster::start_with_faults().await;
    cluster.secret("unsynced-shutdown", "db").await;
    // The first list of BoxTables is held far longer than the test waits for the exit.
    let list = cluster.api.add(
        Rule::stall(WAIT * 3)
            .method("GET")
            .path_contains("/boxtables")
            .watch(false),
    );
    let log = cluster.dir.path().join("unsynced.log");
    let mut operator = operator(&cluster.operator_kubeconfig, &log, "unsynced-shutdown", &[]);
    let started = Instant::now();
    while list.hits() == 0 {
        assert!(
            started.elapsed() < WAIT,
            "the operator never listed BoxTables"
        );
        assert!(
            operator.try_wait().unwrap().is_none(),
            "the operator exited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    terminate(&mut operator, &log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_lock_wait_says_the_pass_stopped_waiting_and_changed_nothing() {
    let cluster = Cluster::start().await;
    let ns = "stopped-waiting";
    cluster.secret(ns, "db").await;
    let holder = connect(&cluster.db.url).await;
    hold_brighter_lock(&holder, "waited_outbox").await;
    let mut operator = cluster.operator(ns, "stopped-waiting");
    cluster
        .apply(format!(
            "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: waited\n  namespace: {ns}\n\
             spec:\n  box: Outbox\n  table: waited_outbox\n  lock:\n    timeout: 30m\n  database:\n    secretRef:\n      name: db\n"
        ))
        .await;
    let ready = || async {
        let json = cluster
            .kubectl_ok(&["-n", ns, "get", "boxtable/waited", "-o", "json"])
            .await;
        let object: serde_json::Value = serde_json::from_str(&json).unwrap();
        object["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
    };
    cluster
        .eventually("the BoxTable waiting for the lock", WAIT, || async {
            ready().await.filter(|c| c["reason"] == "WaitingForLock")
        })
        .await;

    operator.signal("TERM");
    let signalled = Instant::now();
    let exit = loop {
        if let Some(exit) = operator.child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            signalled.elapsed() < WAIT,
            "the operator did not exit within {WAIT:?} of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "exit {exit}; log:\n{}", operator.logs());

    let ready = ready().await.unwrap();
    let message = ready["message"].as_str().unwrap();
    assert_eq!(ready["reason"], "Cancelled", "{ready}");
    assert!(
        message.contains(
            "was stopped by an operator shutdown while waiting for advisory lock \
             BrighterMigration_public.waited_outbox; nothing was changed"
        ),
        "{message}"
    );
    assert!(
        !message.contains("rolled back"),
        "it only waited: {message}"
    );
    let logs = operator.logs();
    assert!(
        logs.contains(
            "the migration stopped by shutdown while waiting for advisory lock \
             BrighterMigration_public.waited_outbox; nothing was changed"
        ),
        "{logs}"
    );
    assert!(!logs.contains("rolled back and unlocked"), "{logs}");
    let exists: bool = holder
        .value(
            "SELECT to_regclass('public.waited_outbox') IS NOT NULL",
            &[],
        )
        .await;
    assert!(!exists, "nothing was created");
}
