//! The finalizer a `deletionPolicy: Drop` BoxTable keeps on its Secret (`drop.brighter.dev/<uid>`),
//! on the real kube-apiserver: it is only ever on the Secret the BoxTable references now. It moves
//! with `spec.database.secretRef`, goes when the BoxTable becomes Retain, and goes from every
//! Secret once the BoxTable is deleted, also one left behind while no operator ran.

use boxtable_operator::crd::SECRET_FINALIZER_PREFIX;
use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::json;

use crate::support::controller::*;

const OTHER: &str = "other-db";

/// The finalizers of Secret `name`, or `None` once it is gone.
async fn finalizers(h: &Harness, name: &str) -> Option<Vec<String>> {
    h.secrets()
        .get_opt(name)
        .await
        .unwrap()
        .map(|s| s.finalizers().to_vec())
}

/// A Harness with a second Secret ([`OTHER`]) beside the test Secret, a Ready Drop BoxTable
/// `orders` reading the test Secret, and the finalizer `orders` keeps on it.
async fn ready_drop_boxtable_beside_another_secret() -> (Harness, String) {
    let h = Harness::start().await;
    h.create_secret_named(OTHER).await;
    h.apply_ready(boxtable("orders").drop_policy()).await;
    let guard = guard_of(&h, "orders").await;
    (h, guard)
}

/// The finalizer the BoxTable `name` keeps on its Secret.
async fn guard_of(h: &Harness, name: &str) -> String {
    format!(
        "{SECRET_FINALIZER_PREFIX}{}",
        h.get(name).await.uid().unwrap()
    )
}

/// Waits until Secret `name` carries `finalizer` (`held`) or does not.
async fn wait_held(h: &Harness, name: &str, finalizer: &str, held: bool) {
    let what = format!(
        "secret {name} {} {finalizer}",
        if held { "to carry" } else { "to let go of" }
    );
    wait_until(&what, || async {
        finalizers(h, name)
            .await
            .is_some_and(|f| f.iter().any(|x| x == finalizer) == held)
    })
    .await;
}

#[tokio::test]
async fn moving_a_drop_boxtables_secret_ref_moves_its_finalizer_to_the_new_secret() {
    let (h, guard) = ready_drop_boxtable_beside_another_secret().await;
    wait_held(&h, SECRET, &guard, true).await;

    h.patch_spec(
        "orders",
        json!({"database": {"secretRef": {"name": OTHER}}}),
    )
    .await;
    wait_held(&h, OTHER, &guard, true).await;
    wait_held(&h, SECRET, &guard, false).await;
    h.wait_ready("orders").await;

    // Nothing holds the old Secret any more: deleting it completes.
    h.secrets()
        .delete(SECRET, &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the old secret to be gone", || async {
        finalizers(&h, SECRET).await.is_none()
    })
    .await;

    // The drop reads the new Secret, and lets go of it once the table is dropped.
    h.delete("orders").await;
    h.wait_gone("orders").await;
    assert!(!h.table_exists("public.outbox").await);
    assert_eq!(finalizers(&h, OTHER).await, Some(Vec::new()));
}

#[tokio::test]
async fn a_drop_boxtable_turned_retain_lets_go_of_its_secret() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").drop_policy()).await;
    let guard = guard_of(&h, "orders").await;
    wait_held(&h, SECRET, &guard, true).await;

    h.patch_spec("orders", json!({"deletionPolicy": "Retain"}))
        .await;
    wait_held(&h, SECRET, &guard, false).await;

    h.delete("orders").await;
    h.wait_gone("orders").await;
    assert!(
        h.table_exists("public.outbox").await,
        "Retain keeps the table"
    );
    assert_eq!(finalizers(&h, SECRET).await, Some(Vec::new()));
}

/// Adds `finalizer` to Secret `name`, as an operator that left it behind would have.
async fn leave_finalizer(h: &Harness, name: &str, finalizer: &str) {
    h.patch_secret(name, json!({"metadata": {"finalizers": [finalizer]}}))
        .await;
}

#[tokio::test]
async fn a_finalizer_left_on_a_secret_the_boxtable_no_longer_references_is_removed() {
    // An earlier release left the finalizer on the Secret a BoxTable referenced before.
    let (h, guard) = ready_drop_boxtable_beside_another_secret().await;
    leave_finalizer(&h, OTHER, &guard).await;

    wait_held(&h, OTHER, &guard, false).await;
    wait_held(&h, SECRET, &guard, true).await;
}

#[tokio::test]
async fn deleting_a_drop_boxtable_lets_go_of_every_secret_carrying_its_finalizer() {
    let (mut h, guard) = ready_drop_boxtable_beside_another_secret().await;
    wait_held(&h, SECRET, &guard, true).await;

    // While no operator runs, another Secret is left carrying the finalizer and the BoxTable is
    // deleted; the next operator finds both when it starts.
    h.stop().await;
    leave_finalizer(&h, OTHER, &guard).await;
    h.delete("orders").await;
    h.restart();

    h.wait_gone("orders").await;
    assert!(!h.table_exists("public.outbox").await);
    assert_eq!(finalizers(&h, SECRET).await, Some(Vec::new()));
    assert_eq!(finalizers(&h, OTHER).await, Some(Vec::new()));
}
