//! Outcomes that are Ready but deserve a Warning: a table whose history a newer Brighter wrote
//! (`AheadOfOperator`), and a migration that committed although the advisory lock was already
//! gone when the operator released it (Ready `Migrated`, a `LockLost` Warning and a metric).

use crate::support;
use crate::support::controller::*;

fn warnings_with_reason(events: &[k8s_openapi::api::events::v1::Event], reason: &str) -> usize {
    events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason))
        .count()
}

#[tokio::test]
async fn a_table_a_newer_brighter_took_to_v9_is_ready_ahead_of_the_operator_with_a_warning() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders")).await;
    let sql = h.sql().await;
    support::migrate::write_history(
        &sql,
        "public",
        "public",
        "outbox",
        9,
        "Add a column a newer Brighter knows",
    )
    .await;

    h.patch_spec("orders", serde_json::json!({"targetVersion": 7}))
        .await;
    let bt = h
        .wait_for("orders", "Ready=True (AheadOfOperator)", |bt| {
            is_ready(bt)
                && bt
                    .status
                    .as_ref()
                    .is_some_and(|s| reason(s) == "AheadOfOperator")
        })
        .await;

    let status = bt.status.unwrap();
    assert!(has(&status, "Stalled", "False"), "{status:?}");
    assert_eq!(status.applied_version, Some(9));
    assert_eq!(h.history_versions("public", "outbox").await, vec![8, 9]);
    wait_until("a Warning event AheadOfOperator", || async {
        warnings_with_reason(&h.events("orders").await, "AheadOfOperator") == 1
    })
    .await;
}

#[tokio::test]
async fn a_lock_gone_after_commit_leaves_the_table_migrated_with_a_warning_and_a_metric() {
    let h = Harness::start().await;
    let sql = h.sql().await;
    support::migrate::release_lock_at_commit_of_history_rows(&sql, lock_key("public", "outbox"))
        .await;

    let bt = h.apply_ready(boxtable("orders")).await;

    let status = bt.status.unwrap();
    assert_eq!(reason(&status), "Migrated", "{status:?}");
    assert_eq!(status.applied_version, Some(8));
    assert_eq!(h.history_versions("public", "outbox").await, vec![8]);
    wait_until("a Warning event LockLost", || async {
        warnings_with_reason(&h.events("orders").await, "LockLost") == 1
    })
    .await;
    let metrics = h.metrics.encode().unwrap();
    assert!(
        metrics.contains("boxtable_lock_lost_after_commit_total 1"),
        "{metrics}"
    );
}
