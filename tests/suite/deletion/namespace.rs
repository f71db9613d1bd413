//! Deleting a namespace that holds BoxTables, on the real control plane: the namespace controller
//! deletes everything in it at once, Secrets included. The operator keeps the
//! `drop.brighter.dev/<uid>` finalizer on a Secret that a `deletionPolicy: Drop` BoxTable
//! needs, so every Drop table is dropped, Retain tables stay, and the namespace goes away.

use std::process::Output;
use std::time::Duration;

use crate::support::Sql;
use crate::support::boxtable::boxtable;
use crate::support::e2e::{Cluster, Operator, connect};

/// Namespace deletion runs through the namespace controller's passes; generous on a busy machine.
const WAIT: Duration = Duration::from_secs(180);

async fn table_exists(cluster: &Cluster, table: &str) -> bool {
    connect(&cluster.db.url)
        .await
        .value(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!("public.{table}")],
        )
        .await
}

async fn history_tables(cluster: &Cluster) -> Vec<String> {
    connect(&cluster.db.url)
        .await
        .column(
            "SELECT \"BoxTableName\" FROM public.\"__BrighterMigrationHistory\" ORDER BY 1",
            &[],
        )
        .await
}

/// Sets up namespace `ns` with two Drop BoxTables and one Retain BoxTable, all Ready.
async fn three_ready_boxtables(cluster: &Cluster, ns: &str) {
    cluster.secret(ns, "db").await;
    let manifests = boxtable("drop-a")
        .namespace(ns)
        .table("drop_a")
        .secret("db")
        .drop_policy()
        .manifest()
        + &boxtable("drop-b")
            .namespace(ns)
            .table("drop_b")
            .secret("db")
            .drop_policy()
            .manifest()
        + &boxtable("kept")
            .namespace(ns)
            .table("kept")
            .secret("db")
            .manifest();
    cluster.apply(manifests).await;
    cluster.wait_ready_within(ns, "--all", 120).await;
}

/// The `kubectl` arguments that print Secret `db` in `ns` in `output` (`-o`).
fn get_secret_db<'a>(ns: &'a str, output: &'a str) -> [&'a str; 7] {
    ["-n", ns, "get", "secret", "db", "-o", output]
}

async fn secret_finalizers(cluster: &Cluster, ns: &str) -> String {
    cluster
        .kubectl_ok(&get_secret_db(ns, "jsonpath={.metadata.finalizers}"))
        .await
}

/// Waits until Secret `db` in `ns` carries a `drop.brighter.dev/` finalizer, failing with `what`.
async fn wait_secret_kept(cluster: &Cluster, ns: &str, what: &str) {
    cluster
        .eventually(what, WAIT, || async {
            secret_finalizers(cluster, ns)
                .await
                .contains("drop.brighter.dev/")
                .then_some(())
        })
        .await;
}

/// Whether `kubectl get` failed because the object does not exist.
fn not_found(out: &Output) -> bool {
    !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound")
}

/// Deletes namespace `ns` without waiting for it to go.
async fn delete_namespace(cluster: &Cluster, ns: &str) {
    cluster
        .kubectl_ok(&["delete", "namespace", ns, "--wait=false"])
        .await;
}

async fn wait_namespace_gone(cluster: &Cluster, ns: &str) {
    cluster
        .eventually(&format!("namespace {ns} to be deleted"), WAIT, || async {
            let out = cluster.kubectl(&["get", "namespace", ns]).await;
            not_found(&out).then_some(())
        })
        .await;
}

/// A cluster, an operator (`e2e-<ns>`) watching `ns`, and there the BoxTables of
/// [`three_ready_boxtables`], Ready, with the Secret kept for the drops.
async fn drop_and_retain_boxtables_ready_in(ns: &str) -> (Cluster, Operator) {
    let cluster = Cluster::start().await;
    let operator = cluster.operator(ns, &format!("e2e-{ns}"));
    three_ready_boxtables(&cluster, ns).await;
    wait_secret_kept(&cluster, ns, "the Secret to be kept for the drops").await;
    (cluster, operator)
}

/// Waits until namespace `ns` is gone, then asserts that both Drop tables were dropped and the
/// Retain table kept.
async fn assert_namespace_gone_with_drops_done_and_retain_kept(cluster: &Cluster, ns: &str) {
    wait_namespace_gone(cluster, ns).await;
    assert!(
        !table_exists(cluster, "drop_a").await,
        "drop_a was not dropped"
    );
    assert!(
        !table_exists(cluster, "drop_b").await,
        "drop_b was not dropped"
    );
    assert!(
        table_exists(cluster, "kept").await,
        "the Retain table was dropped"
    );
    assert_eq!(history_tables(cluster).await, ["kept"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_with_drop_and_retain_boxtables_drops_the_drop_tables_and_completes() {
    let ns = "nsdelete";
    let (cluster, _operator) = drop_and_retain_boxtables_ready_in(ns).await;

    delete_namespace(&cluster, ns).await;

    assert_namespace_gone_with_drops_done_and_retain_kept(&cluster, ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_deleted_while_the_operator_is_down_completes_once_it_is_back() {
    let ns = "nsdelete-down";
    let (cluster, mut operator) = drop_and_retain_boxtables_ready_in(ns).await;
    operator.signal("TERM");
    operator.child.wait().unwrap();

    // With the operator away, the namespace controller deletes everything it can: the Secret is
    // marked for deletion (or gone, if nothing kept it), the BoxTables wait on their finalizer.
    delete_namespace(&cluster, ns).await;
    cluster
        .eventually(
            "the namespace controller to delete the Secret",
            WAIT,
            || async {
                let out = cluster
                    .kubectl(&get_secret_db(ns, "jsonpath={.metadata.deletionTimestamp}"))
                    .await;
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                (!out.status.success() || !stdout.is_empty()).then_some(())
            },
        )
        .await;

    let _back = cluster.operator(ns, "e2e-nsdelete-back");
    assert_namespace_gone_with_drops_done_and_retain_kept(&cluster, ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_operator_gone_retain_boxtables_and_their_namespace_are_deleted_without_hanging() {
    let cluster = Cluster::start().await;
    let ns = "uninstall-retain";
    let mut operator = cluster.operator(ns, "e2e-uninstall-retain");
    cluster.secret(ns, "db").await;
    cluster
        .apply(
            boxtable("kept-a")
                .namespace(ns)
                .table("kept_a")
                .secret("db")
                .manifest()
                + &boxtable("kept-b")
                    .namespace(ns)
                    .table("kept_b")
                    .secret("db")
                    .manifest()
                + &boxtable("kept-c")
                    .namespace(ns)
                    .table("kept_c")
                    .secret("db")
                    .manifest(),
        )
        .await;
    cluster.wait_ready_within(ns, "--all", 120).await;
    let finalizers = cluster
        .kubectl_ok(&[
            "-n",
            ns,
            "get",
            "boxtable",
            "-o",
            "jsonpath={.items[*].metadata.finalizers}",
        ])
        .await;
    assert_eq!(finalizers.trim(), "", "Retain BoxTables carry no finalizer");
    assert_eq!(secret_finalizers(&cluster, ns).await, "");

    // Uninstalling the operator first: it is stopped (here) or removed, and nothing is left to
    // remove a finalizer.
    operator.signal("TERM");
    operator.child.wait().unwrap();

    cluster
        .kubectl_ok(&["-n", ns, "delete", "boxtable", "kept-a", "--timeout=60s"])
        .await;
    delete_namespace(&cluster, ns).await;
    wait_namespace_gone(&cluster, ns).await;
    for table in ["kept_a", "kept_b", "kept_c"] {
        assert!(
            table_exists(&cluster, table).await,
            "{table}: Retain keeps the table"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_finished_by_hand_leaves_no_finalizer_on_the_secret_and_its_namespace_goes() {
    let cluster = Cluster::start().await;
    let ns = "nsdelete-by-hand";
    let _operator = cluster.operator(ns, "e2e-nsdelete-by-hand");
    cluster.secret(ns, "db").await;
    cluster
        .apply(
            boxtable("stuck")
                .namespace(ns)
                .table("stuck_outbox")
                .secret("db")
                .drop_policy()
                .manifest(),
        )
        .await;
    cluster.wait_ready(ns, "stuck").await;
    wait_secret_kept(&cluster, ns, "the Secret to be kept for the drop").await;
    // A row makes the drop wait for consent, so its deletion stays stuck until someone acts.
    connect(&cluster.db.url)
        .await
        .batch("INSERT INTO public.stuck_outbox (messageid, topic, body) VALUES ('m-1', 't', 'b')")
        .await;
    cluster
        .kubectl_ok(&["-n", ns, "delete", "boxtable", "stuck", "--wait=false"])
        .await;
    cluster
        .eventually("the drop to wait for consent", WAIT, || async {
            let reason = cluster
                .kubectl_ok(&[
                    "-n",
                    ns,
                    "get",
                    "boxtable",
                    "stuck",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}",
                ])
                .await;
            (reason == "DropBlocked").then_some(())
        })
        .await;

    // The last resort of Troubleshooting: the BoxTable's finalizer removed by hand.
    cluster
        .kubectl_ok(&[
            "-n",
            ns,
            "patch",
            "boxtable",
            "stuck",
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/metadata/finalizers"}]"#,
        ])
        .await;
    cluster
        .eventually("the BoxTable to go", WAIT, || async {
            let out = cluster
                .kubectl(&["-n", ns, "get", "boxtable", "stuck"])
                .await;
            not_found(&out).then_some(())
        })
        .await;

    delete_namespace(&cluster, ns).await;
    wait_namespace_gone(&cluster, ns).await;
    assert!(
        table_exists(&cluster, "stuck_outbox").await,
        "a drop given up by hand drops nothing"
    );
}
