//! The API server going away under the operator: kube-apiserver killed and restarted (by its
//! supervisor, as a kubelet restarts a static pod) while a migration runs, and an etcd compaction
//! that makes the operator's watch position expire (410 Gone). The operator converges with
//! nothing lost and nothing done twice. These tests restart the shared API server, so they live in
//! a test binary of their own and run one at a time.

use std::process::ExitStatus;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{Mutex, MutexGuard};

use crate::support::Sql;
use crate::support::boxtable::boxtable;
use crate::support::e2e::{Cluster, ControlPlane, OperatorToken, connect};

const WAIT: Duration = Duration::from_secs(180);

/// One restart at a time.
static RESTARTS: Mutex<()> = Mutex::const_new(());

/// The turn to restart (held until the guard is dropped), and a cluster whose forbidden requests
/// the test checks itself, leaving out the restart, with the connection Secret `db` in `ns`: the
/// guard, the cluster, its control plane and the operator's token.
async fn a_turn_to_restart(
    ns: &str,
) -> (
    MutexGuard<'static, ()>,
    Cluster,
    &'static ControlPlane,
    OperatorToken,
) {
    let turn = RESTARTS.lock().await;
    let mut cluster = Cluster::start().await;
    let plane = cluster.plane.unwrap();
    let token = cluster.token.take().unwrap();
    cluster.secret(ns, "db").await;
    (turn, cluster, plane, token)
}

/// Sends SIGKILL to kube-apiserver; returns how `kill` exited and the pid it was sent to.
fn kill_apiserver(plane: &ControlPlane) -> (ExitStatus, u32) {
    let old = plane.apiserver_pid();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &old.to_string()])
        .status()
        .unwrap();
    (killed, old)
}

/// Whether kube-apiserver's pid file names another process than `old`.
fn apiserver_replaced(plane: &ControlPlane, old: u32) -> bool {
    let pid = std::fs::read_to_string(&plane.apiserver_pidfile).unwrap_or_default();
    pid.trim() != old.to_string()
}

/// Kills kube-apiserver and waits until its supervisor has a new one serving `/readyz`; returns
/// when that began.
async fn kill_and_wait_for_restart(cluster: &Cluster, plane: &ControlPlane) -> Timestamp {
    let killed_at = Timestamp::now();
    let (killed, old) = kill_apiserver(plane);
    assert!(killed.success());
    cluster
        .eventually("kube-apiserver to be restarted and ready", WAIT, || async {
            if !apiserver_replaced(plane, old) {
                return None;
            }
            let out = cluster.kubectl(&["get", "--raw", "/readyz"]).await;
            (out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok")
                .then_some(())
        })
        .await;
    killed_at
}

/// Fails if RBAC refused any request made with `token`, except while the API server restarted
/// (`from` until a little after `ready`).
fn assert_no_forbidden_requests_outside(
    plane: &ControlPlane,
    token: &OperatorToken,
    from: Timestamp,
    ready: Timestamp,
) {
    let to = ready + jiff::SignedDuration::from_secs(5);
    let refused = plane.forbidden_requests_outside(token, from, to);
    assert!(
        refused.is_empty(),
        "deploy/rbac.yaml does not allow calls the operator made:\n{}",
        refused.join("\n")
    );
}

async fn history(cluster: &Cluster, table: &str) -> Vec<i32> {
    connect(&cluster.db.url)
        .await
        .query(
            "SELECT \"MigrationVersion\" FROM public.\"__BrighterMigrationHistory\" \
             WHERE \"BoxTableName\" = $1 ORDER BY 1",
            &[&table],
        )
        .await
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_survives_the_api_server_being_killed_and_restarted_and_runs_once() {
    let ns = "apirestart";
    let (_turn, cluster, plane, token) = a_turn_to_restart(ns).await;
    // A V1 outbox, its first ALTER held up by a reader's lock: the migration is mid-transaction.
    let blocker = cluster.v1_outbox_held_open("busy").await;
    let operator = cluster.operator(ns, "e2e-apirestart");
    cluster
        .apply_boxtable(ns, boxtable("busy").table("busy"))
        .await;
    cluster
        .wait_for_alter_blocked_on_lock("apirestart", WAIT)
        .await;

    // The API server dies mid-migration; the migration then commits while it is away, so the
    // status write after it meets a dead server and must be retried against the new one.
    let killed_at = Timestamp::now();
    let (_, old) = kill_apiserver(plane);
    blocker.batch("COMMIT").await;
    cluster
        .eventually("kube-apiserver to be restarted and ready", WAIT, || async {
            if !apiserver_replaced(plane, old) {
                return None;
            }
            let out = cluster.kubectl(&["get", "--raw", "/readyz"]).await;
            out.status.success().then_some(())
        })
        .await;
    let ready_at = Timestamp::now();

    cluster.wait_ready_within(ns, "busy", 180).await;
    let rows = history(&cluster, "busy").await;
    assert_eq!(
        rows,
        (1..=8).collect::<Vec<_>>(),
        "each step once: {rows:?}\n{}",
        operator.logs()
    );
    cluster
        .no_advisory_lock_left("no advisory lock is left behind")
        .await;
    assert_no_forbidden_requests_outside(plane, &token, killed_at, ready_at);
}

/// etcd's current revision, from its JSON gateway.
async fn etcd_revision(plane: &ControlPlane) -> i64 {
    let body = etcd_post(plane, "/v3/kv/range", r#"{"key":"AA=="}"#).await;
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    value["header"]["revision"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn etcd_post(plane: &ControlPlane, path: &str, body: &str) -> String {
    let url = format!("{}{path}", plane.etcd);
    let body = body.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "30", "-X", "POST", "-d", &body, &url])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_etcd_compaction_expires_the_watch_the_operator_relists_and_converges() {
    let ns = "compaction";
    let (_turn, cluster, plane, token) = a_turn_to_restart(ns).await;
    let _operator = cluster.operator(ns, "e2e-compaction");
    cluster
        .apply_boxtable_ready(ns, boxtable("first").table("first_outbox"))
        .await;
    let lists_before = list_calls(plane, &token);

    // Move etcd's revision well past the operator's watch position, compact it away, and restart
    // the API server so its watch cache starts from the compacted store: the operator's re-watch
    // from its old position is answered 410 Gone and it has to list again.
    for i in 0..20 {
        cluster
            .kubectl_ok(&["-n", ns, "create", "configmap", &format!("churn-{i}")])
            .await;
    }
    let revision = etcd_revision(plane).await;
    etcd_post(
        plane,
        "/v3/kv/compaction",
        &format!(r#"{{"revision":"{revision}","physical":true}}"#),
    )
    .await;
    let killed_at = kill_and_wait_for_restart(&cluster, plane).await;
    let ready_at = Timestamp::now();

    cluster
        .apply_boxtable(ns, boxtable("second").table("second_outbox"))
        .await;
    cluster.wait_ready_within(ns, "second", 180).await;
    cluster
        .eventually("the operator to list BoxTables again", WAIT, || async {
            (list_calls(plane, &token) > lists_before).then_some(())
        })
        .await;
    assert_eq!(
        history(&cluster, "first_outbox").await,
        [8],
        "migrated once"
    );
    assert_eq!(history(&cluster, "second_outbox").await, [8]);
    assert_no_forbidden_requests_outside(plane, &token, killed_at, ready_at);
}

/// `list boxtables` calls the operator made (a relist after 410 Gone shows as one).
fn list_calls(plane: &ControlPlane, token: &OperatorToken) -> usize {
    plane
        .audit_events()
        .iter()
        .filter(|e| {
            token.made(e) && e["verb"] == "list" && e["objectRef"]["resource"] == "boxtables"
        })
        .count()
}
