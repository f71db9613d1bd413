//! What the real `boxtable-operator run` binary tells its operators, read as they would read it:
//! its stderr (a file, as a log collector sees it) and its `/metrics` scraped over HTTP while it
//! reconciles BoxTables on the real control plane.

use std::time::Duration;

use crate::support::boxtable::boxtable;
use crate::support::e2e::{Cluster, scrape};

const WAIT: Duration = Duration::from_secs(120);

/// The value of `series` in `body`; `None` when the series is not there.
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_logs_its_metrics_port_and_each_migration_in_plain_text_and_counts_steps_and_drops()
 {
    let cluster = Cluster::start().await;
    let ns = "telemetry";
    cluster.secret(ns, "db").await;
    let operator = cluster.operator(ns, "e2e-telemetry");
    let addr = operator.metrics_address(&cluster).await;
    assert_ne!(
        addr.port(),
        0,
        "the real port is logged, not the requested 0"
    );

    cluster
        .apply_boxtable_ready(ns, boxtable("orders").table("orders_outbox").drop_policy())
        .await;
    let migrated = cluster
        .eventually("the migration's info line", WAIT, || async {
            operator
                .logs()
                .lines()
                .find(|l| {
                    l.contains(" INFO ") && l.contains("migrated") && l.contains("orders_outbox")
                })
                .map(str::to_owned)
        })
        .await;
    println!("{migrated}");
    for field in [
        "table=public.orders_outbox",
        "path=Fresh",
        "from_version=0",
        "to_version=8",
        "steps=1",
    ] {
        assert!(migrated.contains(field), "{field} missing from: {migrated}");
    }

    let body = scrape(addr).await;
    // A fresh install is one step: the table created at V8 with one history row.
    assert_eq!(
        value(&body, "boxtable_migrations_applied_total{box=\"outbox\"}"),
        Some(1.0),
        "{body}"
    );
    for not_a_failure in ["Suspended", "Deleting", "DropBlocked", "Cancelled"] {
        assert_eq!(
            value(
                &body,
                &format!("boxtable_failures_total{{reason=\"{not_a_failure}\"}}")
            ),
            None,
            "{not_a_failure} is not a failure"
        );
    }
    assert_eq!(
        value(&body, "boxtable_drops_total{result=\"dropped\"}"),
        Some(0.0)
    );

    cluster
        .kubectl_ok(&["-n", ns, "delete", "boxtable", "orders", "--timeout=120s"])
        .await;
    let body = scrape(addr).await;
    assert_eq!(
        value(&body, "boxtable_drops_total{result=\"dropped\"}"),
        Some(1.0),
        "{body}"
    );
    let metrics: Vec<&str> = body
        .lines()
        .filter(|l| {
            l.starts_with("boxtable_drops_total")
                || l.starts_with("boxtable_migrations_applied_total")
        })
        .collect();
    println!("{}", metrics.join("\n"));

    let logs = operator.logs();
    assert!(
        !logs.contains('\u{1b}'),
        "stderr is a file, not a terminal: no colour codes"
    );
}

/// The Ready condition of `boxtable/<name>` in `ns`, as the API server has it.
async fn ready_condition(cluster: &Cluster, ns: &str, name: &str) -> Option<serde_json::Value> {
    let object = format!("boxtable/{name}");
    let json = cluster
        .kubectl_ok(&["-n", ns, "get", &object, "-o", "json"])
        .await;
    let object: serde_json::Value = serde_json::from_str(&json).unwrap();
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
}

/// Creates a Drop BoxTable `name` for `table` in `ns`, waits until it is Ready, deletes it and
/// waits until it is gone (dropped, its finalizer removed).
async fn create_and_delete(cluster: &Cluster, ns: &str, name: &str, table: &str) {
    cluster
        .apply(
            boxtable(name)
                .namespace(ns)
                .table(table)
                .secret("db")
                .drop_policy()
                .manifest(),
        )
        .await;
    cluster.wait_ready(ns, name).await;
    let object = format!("boxtable/{name}");
    cluster
        .kubectl_ok(&["-n", ns, "delete", &object, "--timeout=120s"])
        .await;
}

/// Whether a JSON log line carries `boxtable` = `expected`: as a field of its own, or in its span
/// or one of the spans it was written in.
fn json_line_names(line: &serde_json::Value, expected: &str) -> bool {
    line["fields"]["boxtable"] == expected
        || line["span"]["boxtable"] == expected
        || line["spans"]
            .as_array()
            .is_some_and(|spans| spans.iter().any(|s| s["boxtable"] == expected))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_about_a_boxtable_names_its_namespace_and_name_in_text_and_in_json() {
    let cluster = Cluster::start().await;
    let (text_ns, json_ns) = ("log-fields-text", "log-fields-json");
    cluster.secret(text_ns, "db").await;
    cluster.secret(json_ns, "db").await;
    let text = cluster.operator(text_ns, "log-fields-text");
    let json = cluster.operator_with(json_ns, "log-fields-json", &["--log-format", "json"]);

    // A whole life: created, migrated, dropped, gone. "ledger" appears in a line only when the
    // line is about this BoxTable (its name, its table, its session's application name).
    tokio::join!(
        create_and_delete(&cluster, text_ns, "ledger", "ledger_text_outbox"),
        create_and_delete(&cluster, json_ns, "ledger", "ledger_json_outbox"),
    );

    let logs = text.logs();
    let about: Vec<&str> = logs.lines().filter(|l| l.contains("ledger")).collect();
    assert!(
        about
            .iter()
            .any(|l| l.contains(" INFO ") && l.contains("migrated")),
        "the migration is logged:\n{logs}"
    );
    for line in &about {
        if line.contains("migrated") {
            println!("{line}");
        }
        assert!(
            line.contains(&format!("boxtable={text_ns}/ledger")),
            "a text line about the BoxTable without boxtable={text_ns}/ledger: {line}"
        );
    }

    let logs = json.logs();
    let expected = format!("{json_ns}/ledger");
    let mut migrated = 0;
    for raw in logs.lines().filter(|l| l.contains("ledger")) {
        let line: serde_json::Value = serde_json::from_str(raw)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {raw}"));
        assert!(
            json_line_names(&line, &expected),
            "a JSON line about the BoxTable without boxtable {expected}: {raw}"
        );
        if line["fields"]["message"] == "migrated" {
            println!("{raw}");
            migrated += 1;
        }
    }
    assert_eq!(migrated, 1, "the migration is logged once:\n{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_drop_boxtable_logs_no_warning() {
    let cluster = Cluster::start().await;
    let ns = "quiet-deletion";
    cluster.secret(ns, "db").await;
    let operator = cluster.operator(ns, "quiet-deletion");

    create_and_delete(&cluster, ns, "orders", "quiet_outbox").await;
    // The deletion's last watch event may queue one more pass, for an object that is gone by
    // then; it is answered at once, before a pass over a BoxTable created afterwards (whose
    // events come later on the same watch) can finish.
    cluster
        .apply_boxtable_ready(ns, boxtable("later").table("later_outbox").drop_policy())
        .await;
    cluster
        .eventually("the later BoxTable's pass to end", WAIT, || async {
            operator
                .logs()
                .lines()
                .find(|l| l.contains(" reconciled ") && l.contains("later"))
                .map(str::to_owned)
        })
        .await;
    let logs = operator.logs();
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(
        warnings.is_empty(),
        "a normal deletion logs no warning:\n{}",
        warnings.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_environment_migrates_without_notice_lines() {
    // RUST_LOG and the log format exactly as deploy/deployment.yaml sets them (the chart's
    // defaults and dist/install.yaml render the same Deployment; their tests compare them).
    let deployment: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(crate::support::e2e::root().join("deploy/deployment.yaml"))
            .unwrap(),
    )
    .unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let log_filter = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "RUST_LOG")
        .and_then(|e| e["value"].as_str())
        .expect("the Deployment sets RUST_LOG")
        .to_owned();
    let log_format: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .filter(|a| a.starts_with("--log-format"))
        .collect();
    assert_eq!(log_format, ["--log-format=json"]);

    let cluster = Cluster::start().await;
    let ns = "shipped-logs";
    cluster.secret(ns, "db").await;
    let operator = cluster.operator_with_log_filter(ns, "shipped-logs", &log_format, &log_filter);
    // The second table's migration finds the history table there already.
    cluster
        .apply_boxtable_ready(ns, boxtable("first").table("first_outbox").drop_policy())
        .await;
    cluster
        .apply_boxtable_ready(ns, boxtable("second").table("second_outbox").drop_policy())
        .await;
    let migrated = cluster
        .eventually("both migrations' info lines", WAIT, || async {
            let logs = operator.logs();
            let migrated = logs
                .lines()
                .filter(|l| l.contains(r#""message":"migrated""#))
                .count();
            (migrated == 2).then_some(logs)
        })
        .await;
    assert!(
        !migrated.contains("NOTICE"),
        "RUST_LOG={log_filter} logs the driver's notices:\n{migrated}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_pass_is_logged_as_a_refusal_never_as_a_failed_migration() {
    let cluster = Cluster::start().await;
    let ns = "refusals";
    cluster.secret(ns, "db").await;
    // The same database through another host name: the cache cannot tell it is the same table,
    // so only the ownership record in the database refuses the second BoxTable.
    let alias = cluster.db.url.replacen("@127.0.0.1:", "@localhost:", 1);
    assert_ne!(
        alias, cluster.db.url,
        "the test database is reached as 127.0.0.1"
    );
    cluster
        .apply(format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: alias\n  namespace: {ns}\nstringData:\n  connectionString: {alias:?}\n"
        ))
        .await;
    let operator = cluster.operator(ns, "refusals");
    cluster
        .apply_boxtable_ready(ns, boxtable("owner").table("shared_outbox").drop_policy())
        .await;
    cluster
        .apply(
            boxtable("second")
                .namespace(ns)
                .table("shared_outbox")
                .secret("alias")
                .drop_policy()
                .manifest(),
        )
        .await;
    cluster
        .apply_boxtable(
            ns,
            boxtable("billing")
                .table("outbox")
                .schema("billing")
                .drop_policy(),
        )
        .await;
    for (name, table, reason) in [
        ("second", "public.shared_outbox", "TableConflict"),
        ("billing", "billing.outbox", "SchemaNotFound"),
    ] {
        cluster
            .eventually(&format!("{name} stalled with {reason}"), WAIT, || async {
                ready_condition(&cluster, ns, name)
                    .await
                    .filter(|c| c["reason"] == reason)
            })
            .await;
        let line = cluster
            .eventually(
                &format!("the log line of {name}'s refusal"),
                WAIT,
                || async {
                    operator
                        .logs()
                        .lines()
                        .find(|l| {
                            l.contains(&format!("table={table}"))
                                && (l.contains("refused") || l.contains("failed"))
                        })
                        .map(str::to_owned)
                },
            )
            .await;
        println!("{line}");
        assert!(line.contains(&format!("boxtable={ns}/{name}")), "{line}");
        assert!(line.contains("refused"), "{line}");
        assert!(
            !line.contains("migration failed") && !line.contains("run failed"),
            "nothing was attempted, so nothing says a run or migration failed: {line}"
        );
    }
}
