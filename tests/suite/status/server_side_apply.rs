//! Controller behaviour that only a real kube-apiserver shows: server-side apply merging
//! `status.conditions` by type (so conditions of other field managers stay), counted in the
//! server's audit log.

use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::controller::*;

#[tokio::test]
async fn a_condition_from_another_field_manager_survives_and_no_op_resyncs_write_no_status() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders")).await;
    h.wait_for_passes(1).await;

    // Another controller (a policy checker, say) applies a condition of its own to the status.
    let writes_before = h.status_writes("orders");
    let theirs = json!({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "status": {"conditions": [{
            "type": "PolicyChecked",
            "status": "True",
            "reason": "Allowed",
            "message": "checked by the policy engine",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]},
    });
    h.boxtables()
        .patch_status(
            "orders",
            &PatchParams::apply("policy-checker"),
            &Patch::Apply(&theirs),
        )
        .await
        .unwrap();

    // The operator sees the change (a watch event) and then resyncs several times.
    h.wait_for_passes(4).await;

    let bt = h.get("orders").await;
    let status = bt.status.clone().unwrap();
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert!(
        types.contains(&"PolicyChecked"),
        "the other manager's condition was removed: {types:?}"
    );
    assert!(is_ready(&bt), "{status:?}");
    assert_eq!(
        h.status_writes("orders"),
        writes_before,
        "the operator rewrote an unchanged status after another manager's condition appeared"
    );
}
