//! The controller's PostgreSQL sessions on the real kube-apiserver: many BoxTables on one
//! database share the pool's few sessions across resyncs, a rotated Secret starts new sessions and
//! ends the old backends, and a pooled session terminated by the server is replaced without the
//! next pass failing.

use std::collections::BTreeSet;

use boxtable_operator::db::PoolSettings;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support;
use crate::support::Sql;
use crate::support::controller::*;

/// The sum of a metric's series whose line starts with `series`.
fn metric(h: &Harness, series: &str) -> f64 {
    h.metrics
        .encode()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn sessions_opened(h: &Harness) -> f64 {
    metric(h, "boxtable_db_sessions_opened_total{")
}

/// The backends the operator has on the test database.
async fn operator_pids(h: &Harness) -> BTreeSet<i32> {
    support::operator_sessions(&h.sql().await)
        .await
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

#[tokio::test]
async fn a_resync_of_many_boxtables_on_one_database_opens_no_session() {
    let h = Harness::start().await;
    let bound = PoolSettings::default().per_target;
    let names: Vec<String> = (0..12).map(|i| format!("orders-{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        h.apply(boxtable(name).table(&format!("outbox_{i:02}")))
            .await;
    }
    for name in &names {
        h.wait_ready(name).await;
    }
    let opened = sessions_opened(&h);
    let pids = operator_pids(&h).await;
    println!("12 BoxTables reconciled: {opened} sessions opened, backends {pids:?}");
    assert!(
        opened >= 1.0 && opened <= bound as f64,
        "at most {bound} sessions for 12 BoxTables on one database, opened {opened}"
    );
    assert!(pids.len() <= bound, "{pids:?}");

    // Two resyncs of every BoxTable (the resync interval is 2 s).
    h.wait_for_passes(2 * names.len() as u64).await;

    let after = sessions_opened(&h);
    println!(
        "after {} resync passes: {} sessions opened",
        2 * names.len(),
        after - opened
    );
    assert_eq!(after, opened, "a resync opens no session");
    assert_eq!(
        operator_pids(&h).await,
        pids,
        "the same backends served the resync"
    );
    for name in &names {
        assert!(is_ready(&h.get(name).await), "{name} stays Ready");
    }
}

/// A login role with `password` that may create tables in the test database's `public`.
async fn role(h: &Harness, password: &str) -> String {
    let role = format!("ctl_{}", h.db.name);
    h.sql()
        .await
        .batch(&format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'; \
             GRANT ALL ON DATABASE \"{}\" TO \"{role}\"; \
             GRANT ALL ON SCHEMA public TO \"{role}\";",
            h.db.name
        ))
        .await;
    role
}

fn url_as(h: &Harness, role: &str, password: &str) -> String {
    let config = h.db.config();
    let (host, port) = match (config.get_hosts().first(), config.get_ports().first()) {
        (Some(tokio_postgres::config::Host::Tcp(host)), Some(port)) => (host.clone(), *port),
        _ => panic!("DATABASE_URL must name a TCP host"),
    };
    format!("postgres://{role}:{password}@{host}:{port}/{}", h.db.name)
}

#[tokio::test]
async fn a_rotated_secret_starts_new_sessions_and_ends_the_old_backends() {
    let h = Harness::builder().without_secret().start().await;
    let role = role(&h, "first-password").await;
    h.create_secret_with(&url_as(&h, &role, "first-password"))
        .await;
    h.apply_ready(boxtable("orders")).await;
    let old = operator_pids(&h).await;
    assert!(!old.is_empty());

    // The password is rotated: the old sessions would go on working, but the Secret now says to
    // log in with the new one.
    h.sql()
        .await
        .batch(&format!("ALTER ROLE \"{role}\" PASSWORD 'second-password'"))
        .await;
    Api::<Secret>::namespaced(h.client.clone(), &h.namespace)
        .patch(
            SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {
                "connectionString": url_as(&h, &role, "second-password")
            }})),
        )
        .await
        .unwrap();

    wait_until("the sessions of the old password to end", || async {
        let now = operator_pids(&h).await;
        !now.is_empty() && now.is_disjoint(&old)
    })
    .await;
    assert!(
        metric(
            &h,
            "boxtable_db_sessions_closed_total{reason=\"superseded\"}"
        ) >= 1.0,
        "{}",
        h.metrics.encode().unwrap()
    );
    assert!(is_ready(&h.get("orders").await));
}

#[tokio::test]
async fn a_pooled_session_terminated_by_the_server_is_replaced_and_the_next_pass_succeeds() {
    // No resync during the test: the only pass after the kill is the one requested below.
    let h = Harness::without_resync().await;
    h.apply_ready(boxtable("orders")).await;
    wait_until("the pass's session to be idle in the pool", || async {
        metric(&h, "boxtable_db_sessions_idle ") == 1.0
    })
    .await;
    let old = operator_pids(&h).await;
    assert_eq!(old.len(), 1, "{old:?}");
    let sql = h.sql().await;
    for pid in &old {
        sql.execute("SELECT pg_terminate_backend($1)", &[pid])
            .await
            .unwrap();
    }
    wait_until("the terminated backend to be gone", || async {
        operator_pids(&h).await.is_empty()
    })
    .await;
    let failures = metric(&h, "boxtable_failures_total{");

    h.annotate_and_wait_for_a_pass(
        "orders",
        "brighter.dev/reconcile-requested-at",
        "2026-12-01T12:00:00Z",
    )
    .await;

    assert_eq!(
        metric(&h, "boxtable_failures_total{"),
        failures,
        "the pass after the kill did not fail"
    );
    assert!(is_ready(&h.get("orders").await));
    assert_eq!(
        metric(
            &h,
            "boxtable_db_sessions_opened_total{reason=\"replaced_broken\"}"
        ),
        1.0
    );
    let now = operator_pids(&h).await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert!(now.is_disjoint(&old));
}
