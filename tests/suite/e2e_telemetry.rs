//! What the real `boxtable-operator run` binary tells its operators, read as they would read it:
//! its stderr (a file, as a log collector sees it) and its `/metrics` scraped over HTTP while it
//! reconciles BoxTables on the real control plane.

use std::time::Duration;

use crate::support::e2e::{Cluster, scrape};

const WAIT: Duration = Duration::from_secs(120);

fn boxtable(ns: &str, name: &str, table: &str) -> String {
    format!(
        "---\napiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
         spec:\n  box: Outbox\n  table: {table}\n  deletionPolicy: Drop\n  database:\n    secretRef:\n      name: db\n"
    )
}

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

    cluster.apply(boxtable(ns, "orders", "orders_outbox")).await;
    cluster.wait_ready(ns, "orders").await;
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
