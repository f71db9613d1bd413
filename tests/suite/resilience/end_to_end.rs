//! End to end: PostgreSQL, the real kube-apiserver (through a fault-injecting proxy for the test of
//! API-server trouble), the real `boxtable-operator` binary and the real `kubectl`, the way a user
//! drives them.

use std::time::Duration;

use crate::support;
use crate::support::Sql;
use crate::support::boxtable::boxtable;
use crate::support::e2e::{Cluster, Rule, connect, find_kubectl};

const WAIT: Duration = Duration::from_secs(60);

/// Operator sessions (application_name `boxtable-operator/<namespace>/...`) in the test database.
async fn operator_sessions(observer: &tokio_postgres::Client, namespace: &str) -> i64 {
    observer
        .value(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1",
            &[&format!("boxtable-operator/{namespace}/%")],
        )
        .await
}

/// Waits until no operator session for `namespace` is left.
async fn wait_until_no_sessions(
    cluster: &Cluster,
    observer: &tokio_postgres::Client,
    namespace: &str,
    what: &str,
) {
    cluster
        .eventually(what, WAIT, || async {
            (operator_sessions(observer, namespace).await == 0).then_some(())
        })
        .await;
}

async fn history_rows(cluster: &Cluster, table: &str) -> Vec<(i32, String)> {
    let client = connect(&cluster.db.url).await;
    client
        .query(
            "SELECT \"MigrationVersion\", \"Description\" FROM public.\"__BrighterMigrationHistory\" \
             WHERE \"BoxTableName\" = $1 ORDER BY 1",
            &[&table],
        )
        .await
        .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        .unwrap_or_default()
}

async fn columns(cluster: &Cluster, table: &str) -> Vec<String> {
    let client = connect(&cluster.db.url).await;
    client
        .column(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name = $1 ORDER BY 1",
            &[&table],
        )
        .await
}

#[test]
fn a_missing_kubectl_fails_with_instructions_instead_of_skipping() {
    let empty = tempfile::tempdir().unwrap();
    let message = find_kubectl(empty.path().to_str().unwrap()).unwrap_err();
    assert!(message.contains("kubectl is not on PATH"), "{message}");
    assert!(message.contains("Install it"), "{message}");
}

#[test]
fn a_missing_control_plane_fails_with_instructions_instead_of_skipping() {
    let message = support::control_plane::find(|_| None).unwrap_err();
    assert!(message.contains("is not set"), "{message}");
    assert!(message.contains("scripts/test.sh"), "{message}");
    assert!(message.contains("cp_start"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_the_examples_gets_every_boxtable_ready_and_get_wide_shows_the_columns() {
    let cluster = Cluster::start().await;
    connect(&cluster.db.url)
        .await
        .batch("CREATE SCHEMA billing")
        .await;
    let _operator = cluster.operator("shop", "e2e-examples");

    cluster.kubectl_ok(&["apply", "-f", "examples/"]).await;
    // The example Secret points at a placeholder host; point it at the test database in the
    // Npgsql form. The operator sees the Secret change and reconciles without a restart.
    let config = cluster.db.config();
    let port = config.get_ports()[0];
    let password = String::from_utf8(config.get_password().unwrap().to_vec()).unwrap();
    let npgsql = format!(
        "Host=127.0.0.1;Port={port};Database={};Username=postgres;Password={password};SSL Mode=Disable",
        cluster.db.name
    );
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: shop-db\n  namespace: shop\nstringData:\n  connectionString: {npgsql:?}\n"
    );
    cluster.apply(secret).await;

    for name in [
        "orders-outbox",
        "orders-inbox",
        "scratch-outbox",
        "billing-outbox",
    ] {
        cluster.wait_ready_within("shop", name, 60).await;
    }
    let wide = cluster
        .kubectl_ok(&["-n", "shop", "get", "boxtables", "-o", "wide"])
        .await;
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "BOX", "TABLE", "VERSION", "LOCK", "READY", "REASON", "DRIFTED", "AGE", "KEY",
            "MESSAGE"
        ],
        "{wide}"
    );
    let outbox = wide
        .lines()
        .find(|l| l.starts_with("orders-outbox "))
        .unwrap();
    let cells: Vec<&str> = outbox.split_whitespace().collect();
    assert_eq!(
        &cells[..8],
        [
            "orders-outbox",
            "Outbox",
            "public.outbox",
            "8",
            "Released",
            "True",
            "Migrated",
            "False"
        ],
        "{wide}"
    );
    assert_eq!(cells[9], "-5469556670739463647", "{wide}");
    let inbox = wide
        .lines()
        .find(|l| l.starts_with("orders-inbox "))
        .unwrap();
    assert!(
        inbox.contains("public.inbox")
            && inbox.contains(" 2 ")
            && inbox.contains("-1057658561702081089"),
        "{wide}"
    );
    let narrow = cluster.kubectl_ok(&["-n", "shop", "get", "bt"]).await;
    assert!(
        !narrow.contains("KEY") && !narrow.contains("DRIFTED"),
        "the key and drift columns are only shown with -o wide:\n{narrow}"
    );
    cluster
        .no_advisory_lock_left("no advisory lock is left behind")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_operator_processes_migrate_twenty_boxtables_exactly_once() {
    let cluster = Cluster::start().await;
    cluster.secret("pair", "db").await;
    let first = cluster.operator("pair", "e2e-first");
    let second = cluster.operator("pair", "e2e-second");
    let manifests: String = (1..=20)
        .map(|i| {
            boxtable(&format!("outbox-{i:02}"))
                .namespace("pair")
                .table(&format!("outbox_{i:02}"))
                .secret("db")
                .manifest()
        })
        .collect();
    cluster.apply(manifests).await;
    cluster.wait_ready_within("pair", "--all", 90).await;
    for mut operator in [first, second] {
        operator.signal("TERM");
        let status = operator.child.wait().unwrap();
        assert!(
            status.success(),
            "graceful exit: {status:?}\n{}",
            operator.logs()
        );
    }
    let observer = connect(&cluster.db.url).await;
    wait_until_no_sessions(
        &cluster,
        &observer,
        "pair",
        "the operators' sessions to end",
    )
    .await;
    for i in 1..=20 {
        let rows = history_rows(&cluster, &format!("outbox_{i:02}")).await;
        assert_eq!(
            rows,
            vec![(8, "fresh install at V8".to_owned())],
            "outbox_{i:02} migrated exactly once"
        );
    }
    cluster
        .no_advisory_lock_left("no advisory lock is left behind")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_operator_leaves_no_partial_table_or_lock_and_a_restart_converges() {
    let cluster = Cluster::start().await;
    cluster.secret("kill", "db").await;
    let blocker = connect(&cluster.db.url).await;
    // A V1 outbox (the 2019 shape without dispatched): bootstrap adds seven steps.
    blocker.batch("CREATE TABLE public.victim (Id BIGSERIAL PRIMARY KEY, MessageId UUID UNIQUE NOT NULL, \
             Topic VARCHAR(255), MessageType VARCHAR(32), Timestamp timestamptz, HeaderBag TEXT, Body TEXT); \
             INSERT INTO public.victim (MessageId, Topic) VALUES (gen_random_uuid(), 'kept');").await;
    blocker
        .batch("BEGIN; LOCK TABLE public.victim IN ACCESS SHARE MODE")
        .await;
    let before = columns(&cluster, "victim").await;
    let operator = cluster.operator("kill", "e2e-killed");
    cluster
        .apply_boxtable("kill", boxtable("victim").table("victim"))
        .await;

    // Wait until the operator is inside its migration transaction, blocked on the first ALTER.
    cluster.wait_for_alter_blocked_on_lock("kill", WAIT).await;
    let observer = connect(&cluster.db.url).await;
    operator.signal("KILL");
    drop(operator);
    blocker.batch("COMMIT").await;

    // The orphaned backend finishes its statement, finds its client gone and rolls back.
    wait_until_no_sessions(
        &cluster,
        &observer,
        "kill",
        "the killed operator's session to end",
    )
    .await;
    cluster.no_advisory_lock_left("no lock leaked").await;
    assert_eq!(
        columns(&cluster, "victim").await,
        before,
        "no partial migration survived"
    );
    assert!(
        history_rows(&cluster, "victim").await.is_empty(),
        "no history rows survived"
    );

    let _restarted = cluster.operator("kill", "e2e-restarted");
    cluster.wait_ready_within("kill", "victim", 60).await;
    let rows = history_rows(&cluster, "victim").await;
    assert_eq!(
        rows.first(),
        Some(&(1, "bootstrap: detected at V1".to_owned())),
        "{rows:?}"
    );
    assert_eq!(rows.last().map(|r| r.0), Some(8), "{rows:?}");
    assert_eq!(rows.len(), 8, "{rows:?}");
    let kept: i64 = observer
        .value(
            "SELECT count(*) FROM public.victim WHERE topic = 'kept'",
            &[],
        )
        .await;
    assert_eq!(kept, 1, "existing rows survive");
    cluster
        .no_advisory_lock_left("no advisory lock is left behind")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_converges_through_api_server_errors_conflicts_and_dropped_watches() {
    let cluster = Cluster::start_with_faults().await;
    cluster.secret("faults", "db").await;
    let failing = cluster.api.add(Rule::status(500).times(3).method("PATCH"));
    let conflicting = cluster.api.add(
        Rule::status(409)
            .times(2)
            .method("PATCH")
            .path_prefix("/apis/brighter.dev"),
    );
    let unavailable = cluster.api.add(
        Rule::status(503)
            .times(2)
            .method("GET")
            .path_prefix("/api/v1/namespaces/faults/secrets"),
    );
    let watches = cluster.api.add(Rule::count().watch(true));
    let _operator = cluster.operator("faults", "e2e-faults");
    let manifests: String = (1..=3)
        .map(|i| {
            boxtable(&format!("faulty-{i}"))
                .namespace("faults")
                .table(&format!("faulty_{i}"))
                .secret("db")
                .manifest()
        })
        .collect();
    cluster.apply(manifests).await;
    // Cut the operator's watches three times, each time once it is watching (again).
    let mut seen = 0;
    for _ in 0..3 {
        cluster
            .eventually("the operator to watch (again)", WAIT, || async {
                (watches.hits() > seen).then_some(())
            })
            .await;
        seen = watches.hits();
        cluster.api.drop_watches();
    }
    cluster.wait_ready_within("faults", "--all", 90).await;
    assert_eq!(failing.hits(), 3, "500s injected");
    assert_eq!(conflicting.hits(), 2, "409s injected");
    assert_eq!(unavailable.hits(), 2, "503s injected");
    assert!(
        cluster.api.received() > cluster.api.forwarded(),
        "faulted requests never reach the server"
    );
    for i in 1..=3 {
        assert_eq!(
            history_rows(&cluster, &format!("faulty_{i}")).await.len(),
            1,
            "faulty_{i} migrated exactly once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_manifests_are_refused_by_kubectl_apply_and_nothing_reaches_the_database() {
    let cluster = Cluster::start().await;
    cluster.secret("bad", "db").await;
    let _operator = cluster.operator("bad", "e2e-bad");
    let valid = boxtable("good")
        .namespace("bad")
        .table("good_outbox")
        .secret("db")
        .manifest();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "identifier with a leading digit",
            valid.replace("table: good_outbox", "table: 1outbox"),
            "spec.table",
        ),
        (
            "SQL injection in the table",
            valid.replace("table: good_outbox", "table: \"x; DROP TABLE y; --\""),
            "spec.table",
        ),
        (
            "quote in the schema",
            valid.replace("table: good_outbox", "table: ok\n  schema: \"a\\\"b\""),
            "spec.schema",
        ),
        (
            "a name over 63 bytes",
            valid.replace("table: good_outbox", &format!("table: a{}", "b".repeat(63))),
            "spec.table",
        ),
        (
            "a wrong enum",
            valid.replace("box: Outbox", "box: Mailbox"),
            "spec.box",
        ),
        (
            "a bad duration",
            valid.replace(
                "      name: db\n",
                "      name: db\n  lock:\n    timeout: 30 seconds\n",
            ),
            "spec.lock.timeout",
        ),
    ];
    for (what, manifest, field) in &cases {
        let out = cluster
            .kubectl_with_stdin(&["apply", "-f", "-"], Some(manifest.clone()))
            .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what} was accepted");
        assert!(
            stderr.contains("is invalid") && stderr.contains(field),
            "{what}: {stderr}"
        );
    }

    // Changing the table of an existing BoxTable is refused by the CEL immutability rule.
    cluster.apply(valid.clone()).await;
    cluster.wait_ready_within("bad", "good", 60).await;
    let renamed = valid.replace("table: good_outbox", "table: other_outbox");
    let out = cluster
        .kubectl_with_stdin(&["apply", "-f", "-"], Some(renamed))
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("table is immutable"),
        "{stderr}"
    );

    let client = connect(&cluster.db.url).await;
    let tables: Vec<String> = client
        .column(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables \
             WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1",
            &[],
        )
        .await;
    assert_eq!(
        tables,
        ["public.__BrighterMigrationHistory", "public.good_outbox"]
    );
}
