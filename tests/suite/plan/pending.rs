//! A suspended BoxTable as a reviewable plan, on the real control plane: `status.pending` lists
//! the versions and descriptions a run would apply; un-suspending applies exactly those, or, when
//! the table changed in between, re-plans and says so (a `Replanned` Warning and the Ready
//! message).

use boxtable_operator::crd::{BoxTable, PendingVersion};
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::migrate::catalog::step_statements;
use boxtable_operator::migrate::{BoxKind, RunPath};
use serde_json::json;

use crate::support;
use crate::support::Sql;
use crate::support::controller::*;

fn has_pending(bt: &BoxTable) -> bool {
    bt.status.as_ref().is_some_and(|s| s.pending.is_some())
}

fn versions(descriptions: &[(u32, &str)]) -> Vec<PendingVersion> {
    descriptions
        .iter()
        .map(|(version, description)| PendingVersion {
            version: *version,
            description: (*description).to_owned(),
        })
        .collect()
}

/// A table at version 5, then suspended with target 8: the plan is 6, 7, 8.
async fn suspended_at_five(h: &Harness) -> BoxTable {
    h.apply_ready(boxtable("orders").outbox().target(5)).await;
    h.patch_spec("orders", json!({"suspend": true, "targetVersion": 8}))
        .await;
    h.wait_for("orders", "Suspended with a pending plan", |bt| {
        has_pending(bt) && reason(bt.status.as_ref().unwrap()) == "Suspended"
    })
    .await
}

#[tokio::test]
async fn a_suspended_boxtable_shows_its_plan_and_unsuspending_applies_exactly_it() {
    // A long resync: only the spec changes start passes.
    let h = Harness::without_resync().await;
    let bt = suspended_at_five(&h).await;

    let status = bt.status.unwrap();
    let pending = status.pending.clone().unwrap();
    assert_eq!(pending.path, RunPath::Normal);
    assert_eq!((pending.from_version, pending.to_version), (5, 8));
    assert_eq!(
        pending.versions,
        versions(&[
            (6, "Add workflowid, jobid columns"),
            (7, "Add dataref, specversion columns"),
            (8, "Add causationid column and replay index"),
        ])
    );
    let message = &condition(&status, "Ready").unwrap().message;
    assert!(
        message.contains("setting suspend: false applies versions 6, 7, 8"),
        "{message}"
    );
    let raw = h.raw("orders").await;
    assert_eq!(raw["status"]["pending"]["versions"][0]["version"], json!(6));
    assert_eq!(h.history_versions("public", "outbox").await, vec![5]);

    h.patch_spec("orders", json!({"suspend": false})).await;
    let bt = h.wait_ready("orders").await;

    let status = bt.status.unwrap();
    assert_eq!(status.pending, None, "the plan is gone once applied");
    assert_eq!(
        h.history_versions("public", "outbox").await,
        vec![5, 6, 7, 8]
    );
    let last_run = status.last_run.clone().unwrap();
    assert_eq!((last_run.from_version, last_run.to_version), (5, 8));
    let message = &condition(&status, "Ready").unwrap().message;
    assert!(!message.contains("re-planned"), "{message}");
    assert!(
        !h.events("orders")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("Replanned"))
    );
}

#[tokio::test]
async fn a_table_that_changed_while_suspended_is_replanned_and_says_so() {
    let h = Harness::without_resync().await;
    suspended_at_five(&h).await;

    // While suspended, an application migrates the table to version 6 (as Brighter would: the
    // step's DDL and its history row).
    let client = h.sql().await;
    let table = QualifiedName::parse(Some("public"), "outbox").unwrap();
    let v6 = BoxKind::Outbox.version(6).unwrap();
    for statement in step_statements(v6, &table) {
        client.batch(&statement).await;
    }
    support::migrate::write_history(&client, "public", "public", "outbox", 6, v6.description).await;

    h.patch_spec("orders", json!({"suspend": false})).await;
    let bt = h.wait_ready("orders").await;

    let status = bt.status.unwrap();
    assert_eq!(status.pending, None);
    assert_eq!(
        h.history_versions("public", "outbox").await,
        vec![5, 6, 7, 8]
    );
    let message = &condition(&status, "Ready").unwrap().message;
    assert!(
        message.contains(
            "re-planned: the table or the target changed since the pending plan was shown (it said: migrate from version 5 to 8; the run found version 6 and did: migrate from version 6 to 8)"
        ),
        "{message}"
    );
    wait_until("a Replanned Warning", || async {
        h.events("orders").await.iter().any(|e| {
            e.reason.as_deref() == Some("Replanned")
                && e.type_.as_deref() == Some("Warning")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("found version 6"))
        })
    })
    .await;
}

#[tokio::test]
async fn a_suspended_boxtable_without_a_table_plans_a_fresh_install() {
    let h = Harness::start().await;
    h.apply(boxtable("orders").suspended()).await;
    let bt = h.wait_for("orders", "a pending plan", has_pending).await;
    let pending = bt.status.unwrap().pending.unwrap();
    assert_eq!(pending.path, RunPath::Fresh);
    assert_eq!((pending.from_version, pending.to_version), (0, 8));
    assert_eq!(pending.versions, versions(&[(8, "fresh install at V8")]));
    assert!(!h.table_exists("public.outbox").await);
}
