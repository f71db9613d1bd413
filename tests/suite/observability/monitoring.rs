//! The monitoring a running `boxtable-operator run` offers, scraped over HTTP while it reconciles
//! BoxTables on the real control plane and PostgreSQL: the per-state gauge follows creations,
//! failures and deletions, the lock gauges follow a lock held in the middle of a migration and a
//! session blocked on it, and every metric the dashboard and the alert rules read is one the
//! process exports (and the README documents).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;

use crate::support;
use crate::support::Sql;
use crate::support::boxtable::boxtable;
use crate::support::e2e::{Cluster, connect, scrape};

const WAIT: Duration = Duration::from_secs(120);

/// The value of exactly `series` (name and labels) in a scrape.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// Scrapes until `series` reads `expected`.
async fn wait_for_sample(cluster: &Cluster, addr: SocketAddr, series: &str, expected: f64) {
    cluster
        .eventually(&format!("{series} to read {expected}"), WAIT, || async {
            (sample(&scrape(addr).await, series) == Some(expected)).then_some(())
        })
        .await;
}

/// The sample names of a scrape (`boxtable_lock_wait_seconds_bucket`, `..._total`, ...).
fn sample_names(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_operator_exports_every_metric_the_dashboard_and_the_alerts_read_and_counts_boxtables_by_state()
 {
    let cluster = Cluster::start().await;
    let ns = "monitoring";
    cluster.secret(ns, "db").await;
    let operator = cluster.operator(ns, "e2e-monitoring");
    let addr = operator.metrics_address(&cluster).await;

    // One table migrated, one BoxTable stalled on a missing Secret.
    cluster
        .apply_boxtable(ns, boxtable("orders").table("orders_outbox"))
        .await;
    cluster
        .apply(
            boxtable("lost")
                .namespace(ns)
                .table("lost_outbox")
                .secret("no-such-secret")
                .manifest(),
        )
        .await;
    wait_for_sample(
        &cluster,
        addr,
        r#"boxtable_objects{state="stalled",reason="SecretNotFound"}"#,
        1.0,
    )
    .await;
    cluster.wait_ready(ns, "orders").await;
    let body = cluster
        .eventually("one ready BoxTable in boxtable_objects", WAIT, || async {
            let body = scrape(addr).await;
            let ready: f64 = body
                .lines()
                .filter(|l| l.starts_with(r#"boxtable_objects{state="ready","#))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum();
            (ready == 1.0).then_some(body)
        })
        .await;
    assert_eq!(sample(&body, "boxtable_leader"), Some(1.0), "{body}");
    assert_eq!(sample(&body, "boxtable_lock_held"), Some(0.0), "{body}");
    let build_info = body
        .lines()
        .find(|l| l.starts_with("boxtable_build_info{"))
        .unwrap_or_else(|| panic!("no boxtable_build_info in\n{body}"));
    assert!(
        build_info.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && !build_info.contains("revision=\"\"")
            && build_info.ends_with(" 1"),
        "{build_info}"
    );

    // Every metric the dashboard and the alerts read is exported (`up` is Prometheus' own).
    let exported = sample_names(&body);
    let mut read = BTreeSet::new();
    for (panel, query) in support::monitoring::dashboard_queries() {
        for name in support::monitoring::metric_names(&query) {
            assert!(
                exported.contains(&name),
                "dashboard panel {panel:?} reads {name}, which the operator does not export:\n{query}\nexported: {exported:?}"
            );
            read.insert(name);
        }
    }
    for (alert, expr) in support::monitoring::alerts() {
        for name in support::monitoring::metric_names(&expr) {
            assert!(
                name == "up" || exported.contains(&name),
                "alert {alert} reads {name}, which the operator does not export:\n{expr}"
            );
        }
    }
    println!(
        "the dashboard reads {} exported metrics: {read:?}",
        read.len()
    );
    // And the README documents every family the process exports.
    let readme = std::fs::read_to_string(support::monitoring::root().join("README.md")).unwrap();
    for family in body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
    {
        let documented = [family.to_owned(), format!("{family}_total")]
            .iter()
            .any(|name| readme.contains(&format!("| `{name}` |")));
        assert!(documented, "README's metrics table lacks {family}");
    }

    // Deleting the stalled BoxTable takes it out of the count.
    cluster
        .kubectl_ok(&["-n", ns, "delete", "boxtable", "lost", "--timeout=120s"])
        .await;
    wait_for_sample(
        &cluster,
        addr,
        r#"boxtable_objects{state="stalled",reason="SecretNotFound"}"#,
        0.0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_held_reads_1_while_a_migration_holds_the_lock_and_a_session_blocked_on_it_is_counted_at_release()
 {
    let cluster = Cluster::start().await;
    let ns = "monitoring-lock";
    cluster.secret(ns, "db").await;
    // A V1 outbox (bootstrap then seven steps); an open transaction's ACCESS SHARE lock keeps the
    // migration's first ALTER waiting, inside the transaction, with the advisory lock held.
    let blocker = cluster.v1_outbox_held_open("held").await;
    let operator = cluster.operator(ns, "e2e-monitoring-lock");
    let addr = operator.metrics_address(&cluster).await;
    cluster
        .apply_boxtable(ns, boxtable("held").table("held"))
        .await;
    cluster.wait_for_alter_blocked_on_lock(ns, WAIT).await;
    wait_for_sample(&cluster, addr, "boxtable_lock_held", 1.0).await;
    assert_eq!(
        sample(&scrape(addr).await, "boxtable_lock_blocked_sessions_total"),
        Some(0.0)
    );

    // A session that waits in a blocking pg_advisory_lock on the same key.
    let key = LockIdentity::for_table(&QualifiedName::parse(Some("public"), "held").unwrap()).key();
    let waiter = connect(&cluster.db.url).await;
    let waiting = tokio::spawn(async move {
        waiter
            .execute("SELECT pg_advisory_lock($1)", &[&key])
            .await
            .unwrap();
        waiter
    });
    let observer = connect(&cluster.db.url).await;
    cluster
        .eventually("the blocking waiter in pg_locks", WAIT, || async {
            let n: i64 = observer
                .value(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                    &[],
                ).await;
            (n == 1).then_some(())
        })
        .await;

    // Let the migration finish: it finds the waiter just before it releases the lock.
    blocker.batch("COMMIT").await;
    wait_for_sample(&cluster, addr, "boxtable_lock_blocked_sessions_total", 1.0).await;
    let body = scrape(addr).await;
    assert_eq!(
        sample(&body, "boxtable_lock_blocked_wait_seconds_count"),
        Some(1.0),
        "{body}"
    );
    assert!(
        sample(&body, "boxtable_lock_blocked_wait_seconds_sum").unwrap() > 0.0,
        "{body}"
    );
    wait_for_sample(&cluster, addr, "boxtable_lock_held", 0.0).await;
    let waiter = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    waiter
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    drop(waiter);
    cluster.wait_ready(ns, "held").await;
}
