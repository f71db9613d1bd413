//! Who owns a table when BoxTables come and go: a BoxTable re-created, restored or re-installed
//! (a new uid, the same cluster, namespace and name) takes its table back by itself; one that
//! replaces a gone owner of its own namespace takes it over; a gone owner of another namespace
//! or an owner recorded under another cluster name needs the adoption annotation naming the
//! table; a live owner keeps its table whatever is asked.
//!
//! Real parts: the control plane (the controller runs as the operator's ServiceAccount, and the
//! liveness of a recorded owner is asked of the API server) and PostgreSQL (the record is the
//! table's comment).

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};

use boxtable_operator::crd::BoxTable;

use crate::support::Sql;
use crate::support::controller::*;

const USER_COMMENT: &str = "messages of the shop; see the runbook";

/// The table's comment, as PostgreSQL has it.
async fn comment(h: &Harness, qualified: &str) -> Option<String> {
    h.sql()
        .await
        .value(
            "SELECT pg_catalog.obj_description(to_regclass($1), 'pg_class')",
            &[&qualified],
        )
        .await
}

/// Replaces the table's comment with `text`.
async fn set_comment(h: &Harness, qualified: &str, text: &str) {
    let literal = text.replace('\'', "''");
    h.sql()
        .await
        .batch(&format!("COMMENT ON TABLE {qualified} IS '{literal}'"))
        .await;
}

/// The ownership line of the table's comment.
async fn record(h: &Harness, qualified: &str) -> String {
    let comment = comment(h, qualified).await.unwrap_or_default();
    let lines: Vec<&str> = comment
        .lines()
        .filter(|l| l.starts_with("brighter.dev/owner:"))
        .collect();
    assert_eq!(lines.len(), 1, "one ownership record: {comment:?}");
    lines[0].to_owned()
}

/// The Ready message of a new BoxTable `orders` for `public.<table>`, a table a deleted BoxTable
/// left whose comment is then replaced with `comment`, once it is Stalled with TableConflict.
async fn conflict_over_a_left_table_commented(h: &Harness, table: &str, comment: &str) -> String {
    table_left_by_a_deleted_boxtable(h, "seed", table).await;
    set_comment(h, &format!("public.{table}"), comment).await;
    let stalled = h
        .apply_stalled(boxtable("orders").table(table), "TableConflict")
        .await;
    ready_message(&stalled)
}

/// The ownership line of the table's comment, once the user's own comment is seen still to be its
/// first line.
async fn record_below_the_user_comment(h: &Harness, qualified: &str) -> String {
    let comment = comment(h, qualified).await.unwrap();
    assert!(
        comment.starts_with(&format!("{USER_COMMENT}\n")),
        "{comment}"
    );
    record(h, qualified).await
}

/// Makes `table` (in `public`) through a BoxTable that is then deleted with Retain, and leaves
/// the user's comment above the record it wrote.
async fn table_left_by_a_deleted_boxtable(h: &Harness, name: &str, table: &str) -> String {
    h.apply(boxtable(name).table(table)).await;
    let bt = h.wait_ready(name).await;
    let qualified = format!("public.{table}");
    let written = comment(h, &qualified).await.unwrap();
    set_comment(h, &qualified, &format!("{USER_COMMENT}\n{written}")).await;
    h.delete(name).await;
    h.wait_gone(name).await;
    bt.uid().unwrap()
}

/// `boxtable_migrations_applied_total`, summed.
fn migrations_applied(h: &Harness) -> u64 {
    h.counter_total("boxtable_migrations_applied_total")
}

async fn wait_for_event(h: &Harness, name: &str, reason: &str) -> String {
    let mut notes = Vec::new();
    for _ in 0..(DEADLINE.as_millis() / 100) {
        notes = h
            .events(name)
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect();
        if let Some(note) = notes.first() {
            return note.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {reason} event for {name}: {notes:?}");
}

#[tokio::test]
async fn a_boxtable_deleted_with_retain_and_applied_again_takes_its_table_back_without_migrating() {
    let h = Harness::start().await;
    let old_uid = table_left_by_a_deleted_boxtable(&h, "orders-outbox", "recreated_outbox").await;
    let applied = migrations_applied(&h);

    let bt = h
        .apply_ready(boxtable("orders-outbox").table("recreated_outbox"))
        .await;

    assert_eq!(reason(bt.status.as_ref().unwrap()), "UpToDate");
    assert_eq!(
        h.history_versions("public", "recreated_outbox").await,
        vec![8]
    );
    assert_eq!(migrations_applied(&h), applied, "nothing migrated again");
    let record = record_below_the_user_comment(&h, "public.recreated_outbox").await;
    assert!(
        record.contains(&format!("uid={}", bt.uid().unwrap())) && !record.contains(&old_uid),
        "the record names the new object: {record}"
    );
    assert!(
        record.contains("origin=created") && record.contains("cluster=test"),
        "{record}"
    );
}

#[tokio::test]
async fn a_retain_boxtable_replaced_under_another_name_in_its_namespace_hands_the_table_over() {
    let h = Harness::start().await;
    let old_uid = table_left_by_a_deleted_boxtable(&h, "orders", "handover_outbox").await;

    let bt = h
        .apply_ready(boxtable("orders-v2").table("handover_outbox"))
        .await;

    assert_eq!(
        h.history_versions("public", "handover_outbox").await,
        vec![8]
    );
    let record = record(&h, "public.handover_outbox").await;
    assert!(
        record.contains(&format!("boxtable={}/orders-v2", h.namespace))
            && record.contains(&format!("uid={}", bt.uid().unwrap()))
            && record.contains("origin=adopted"),
        "taken over as adopted, so a later Drop asks for consent: {record}"
    );
    let note = wait_for_event(&h, "orders-v2", "TakenOver").await;
    assert!(
        note.contains(&format!("{}/orders", h.namespace)) && note.contains(&old_uid),
        "{note}"
    );
}

#[tokio::test]
async fn a_live_owner_in_another_namespace_keeps_its_table_even_against_the_annotation() {
    let h = Harness::start().await;
    table_left_by_a_deleted_boxtable(&h, "seed", "kept_outbox").await;
    // A BoxTable of another namespace (which this controller does not reconcile), recorded as
    // the table's owner.
    let other = h.plane.create_namespace("ownership-other");
    let mut theirs = boxtable("orders").table("kept_outbox").build();
    theirs.metadata.namespace = Some(other.clone());
    let theirs = Api::<BoxTable>::namespaced(h.client.clone(), &other)
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let planted = format!(
        "{USER_COMMENT}\nbrighter.dev/owner: cluster=test boxtable={other}/orders uid={} origin=created",
        theirs.uid().unwrap()
    );
    set_comment(&h, "public.kept_outbox", &planted).await;

    let stalled = h
        .apply_stalled(boxtable("mine").table("kept_outbox"), "TableConflict")
        .await;
    let message = ready_message(&stalled);
    assert!(
        message.contains(&format!("{other}/orders"))
            && message.contains("still exists")
            && message.contains("delete that BoxTable"),
        "{message}"
    );

    h.annotate_and_wait_for_a_pass("mine", "brighter.dev/adopt", "public.kept_outbox")
        .await;
    assert!(is_stalled_with(&h.get("mine").await, "TableConflict"));
    assert_eq!(
        comment(&h, "public.kept_outbox").await.as_deref(),
        Some(planted.as_str())
    );
}

#[tokio::test]
async fn a_gone_owner_in_another_namespace_is_taken_over_only_with_the_annotation_naming_the_table()
{
    let h = Harness::start().await;
    let other = h.plane.create_namespace("ownership-gone");
    let gone_owner = format!(
        "{USER_COMMENT}\nbrighter.dev/owner: cluster=test boxtable={other}/orders uid=5d0c6c1e-gone origin=created"
    );

    let message = conflict_over_a_left_table_commented(&h, "moved_outbox", &gone_owner).await;
    assert!(
        message.contains("no longer exists")
            && message.contains(&format!(
                "kubectl -n {} annotate boxtable orders brighter.dev/adopt=public.moved_outbox",
                h.namespace
            )),
        "{message}"
    );

    h.annotate_and_wait_for_a_pass("orders", "brighter.dev/adopt", "public.Moved_Outbox")
        .await;
    assert!(
        is_stalled_with(&h.get("orders").await, "TableConflict"),
        "the annotation must name the table exactly"
    );

    h.annotate("orders", "brighter.dev/adopt", "public.moved_outbox")
        .await;
    let bt = h.wait_ready("orders").await;
    let record = record_below_the_user_comment(&h, "public.moved_outbox").await;
    assert!(
        record.contains(&format!("uid={}", bt.uid().unwrap())) && record.contains("origin=adopted"),
        "{record}"
    );
}

#[tokio::test]
async fn an_owner_recorded_under_another_cluster_name_needs_the_adoption_annotation() {
    let h = Harness::start().await;
    // The same namespace and name, but written by the operator of cluster "staging".
    let staging = format!(
        "brighter.dev/owner: cluster=staging boxtable={}/orders uid=0a1b2c origin=created",
        h.namespace
    );

    let message = conflict_over_a_left_table_commented(&h, "foreign_outbox", &staging).await;
    assert!(
        message.contains("cluster staging")
            && message.contains("brighter.dev/adopt=public.foreign_outbox"),
        "{message}"
    );

    h.annotate("orders", "brighter.dev/adopt", "public.foreign_outbox")
        .await;
    h.wait_ready("orders").await;
    let record = record(&h, "public.foreign_outbox").await;
    assert!(record.contains("cluster=test"), "{record}");
}

#[tokio::test]
async fn fifty_boxtables_restored_from_their_yaml_with_new_uids_are_ready_without_migrating_again()
{
    const COUNT: usize = 50;
    let mut h = Harness::start().await;
    let names: Vec<String> = (0..COUNT).map(|i| format!("tenant-{i:02}")).collect();
    let table = |i: usize| format!("restored_{i:02}");
    let inbox = |i: usize| i.is_multiple_of(5);
    let spec = |i: usize| {
        let builder = boxtable(&names[i]).table(&table(i));
        if inbox(i) { builder.inbox() } else { builder }
    };
    for i in 0..COUNT {
        h.apply(spec(i)).await;
    }
    let mut old_uids = Vec::new();
    for (i, name) in names.iter().enumerate() {
        old_uids.push(h.wait_ready(name).await.uid().unwrap());
        let qualified = format!("public.{}", table(i));
        let written = comment(&h, &qualified).await.unwrap();
        set_comment(&h, &qualified, &format!("{USER_COMMENT} {i}\n{written}")).await;
    }
    let applied = migrations_applied(&h);

    // The restore: the operator stops, every object goes and comes back from its YAML with a new
    // uid, and a fresh operator starts.
    h.stop().await;
    let api = h.boxtables();
    for name in &names {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in &names {
        h.wait_gone(name).await;
    }
    for i in 0..COUNT {
        h.apply(spec(i)).await;
    }
    h.restart();

    for (i, name) in names.iter().enumerate() {
        let bt = h.wait_ready(name).await;
        let qualified = format!("public.{}", table(i));
        assert_eq!(reason(bt.status.as_ref().unwrap()), "UpToDate", "{name}");
        let latest = if inbox(i) { 2 } else { 8 };
        assert_eq!(
            h.history_versions("public", &table(i)).await,
            vec![latest],
            "{name}"
        );
        let comment = comment(&h, &qualified).await.unwrap();
        assert!(
            comment.starts_with(&format!("{USER_COMMENT} {i}\n")),
            "{name}: {comment}"
        );
        let record = record(&h, &qualified).await;
        assert!(
            record.contains(&format!("uid={}", bt.uid().unwrap()))
                && !record.contains(&old_uids[i])
                && record.contains("origin=created"),
            "{name}: {record}"
        );
    }
    assert_eq!(migrations_applied(&h), applied, "nothing migrated twice");
}
