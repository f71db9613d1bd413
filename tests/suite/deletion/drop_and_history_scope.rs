//! History scope (Global vs PerSchema and its seed from `public`), read-only observation, and
//! dropping a box table.

use boxtable_operator::migrate::{self, DropVerdict, Plan, RunPath};
use boxtable_operator::reason::Reason;
use tokio_postgres::Client;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::migrate::*;

/// The plan of an outbox in schema `sales` with PerSchema history.
fn sales_per_schema_outbox() -> Plan {
    outbox("Outbox").in_schema("sales").per_schema().build()
}

/// Creates schema `sales` with an outbox at version `n` holding `rows` rows, recorded in
/// `public`'s history as a bootstrap would have recorded it.
async fn sales_outbox_recorded_in_public(client: &Client, n: u32, rows: i32) {
    client.batch("CREATE SCHEMA sales").await;
    outbox_at(client, "sales.outbox", n, rows).await;
    write_history(
        client,
        "public",
        "sales",
        "outbox",
        n as i32,
        &format!("bootstrap: detected at V{n}"),
    )
    .await;
}

/// Writes a history row in `public` for another table of schema `sales` (`sales.other` at V2).
async fn record_another_sales_table_in_public(client: &Client) {
    write_history(
        client,
        "public",
        "sales",
        "other",
        2,
        "belongs to another table",
    )
    .await;
}

#[tokio::test]
async fn per_schema_history_lives_in_the_box_schema_and_public_gets_nothing() {
    let (db, client) = support::fresh_db_and_client().await;
    client.batch("CREATE SCHEMA sales").await;

    let outcome = run(&db, &sales_per_schema_outbox()).await.unwrap();

    assert_eq!(outcome.path, RunPath::Fresh);
    assert_eq!(
        history_versions(&client, "sales").await,
        [(8, "fresh install at V8".to_owned())]
    );
    assert!(!history_exists(&client, "public").await);
}

#[tokio::test]
async fn per_schema_history_is_seeded_from_public_keeping_description_and_applied_at() {
    let (db, client) = support::fresh_db_and_client().await;
    sales_outbox_recorded_in_public(&client, 6, 1).await;
    client.batch("UPDATE public.\"__BrighterMigrationHistory\" SET \"AppliedAt\" = '2024-01-02 03:04:05+00'").await;
    record_another_sales_table_in_public(&client).await;
    let public_before = history(&client, "public").await;

    let outcome = run(&db, &sales_per_schema_outbox()).await.unwrap();

    assert_eq!(path_and_versions(&outcome), (RunPath::Normal, 6, 8));
    let rows = history(&client, "sales").await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0], public_before[1], "the seeded row is copied as is");
    assert_eq!(rows[0].3, "bootstrap: detected at V6");
    assert_eq!(rows[0].4, "2024-01-02 03:04:05+00");
    assert_eq!((rows[1].0, rows[2].0), (7, 8));
    assert_eq!(
        history(&client, "public").await,
        public_before,
        "public is only read"
    );

    let again = run(&db, &sales_per_schema_outbox()).await.unwrap();
    assert_eq!(again.path, RunPath::UpToDate);
    assert_eq!(
        history(&client, "sales").await,
        rows,
        "seeding twice copies nothing"
    );
}

#[tokio::test]
async fn observe_reports_what_a_run_would_do_without_writing() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 3, 0).await;
    let before = snapshot(&client).await;
    let session = session(&db).await;
    let plan = outbox("Outbox").build();

    let seen = migrate::observe(&session, &plan).await.unwrap();

    assert_eq!(
        (seen.current_version, seen.target_version, seen.would),
        (3, 8, RunPath::Bootstrap)
    );
    assert_eq!(snapshot(&client).await, before);
    run(&db, &plan).await.unwrap();
    let after = migrate::observe(&session, &plan).await.unwrap();
    assert_eq!((after.current_version, after.would), (8, RunPath::UpToDate));
}

#[tokio::test]
async fn observe_sees_public_history_for_a_per_schema_table_not_yet_seeded() {
    let (db, client) = support::fresh_db_and_client().await;
    sales_outbox_recorded_in_public(&client, 7, 0).await;
    let session = session(&db).await;

    let seen = migrate::observe(&session, &sales_per_schema_outbox())
        .await
        .unwrap();

    assert_eq!((seen.current_version, seen.would), (7, RunPath::Normal));
}

#[tokio::test]
async fn drop_removes_the_table_and_only_its_own_history_rows_and_a_second_drop_succeeds() {
    let (db, client) = support::fresh_db_and_client().await;
    let plan = outbox("Outbox").owned_by("orders").build();
    run(&db, &plan).await.unwrap();
    run(&db, &inbox("Inbox").owned_by("inbox").build())
        .await
        .unwrap();

    let first = drop_as_owner(&db, &plan, false).await.unwrap();

    assert!(first.dropped(), "{first:?}");
    assert_eq!(first.history_rows_deleted, 1);
    assert!(columns(&client, "public", "outbox").await.is_empty());
    let left = history(&client, "public").await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].2, "inbox");
    assert_eq!(advisory_locks(&client).await, 0);

    let second = drop_as_owner(&db, &plan, false).await.unwrap();
    assert_eq!(second.verdict, DropVerdict::AlreadyGone);
    assert_eq!(second.history_rows_deleted, 0);
    assert_eq!(
        run(&db, &plan).await.unwrap().path,
        RunPath::Fresh,
        "a later run starts fresh"
    );
}

#[tokio::test]
async fn drop_refuses_a_table_it_owns_that_is_not_a_brighter_table() {
    let (db, client) = support::fresh_db_and_client().await;
    client.batch("CREATE TABLE public.outbox (id int); \
             COMMENT ON TABLE public.outbox IS 'brighter.dev/owner: uid=orders boxtable=shop/orders origin=created'").await;

    let err = drop_as_owner(&db, &outbox("Outbox").owned_by("orders").build(), true)
        .await
        .unwrap_err();

    assert_eq!(err.reason(), Reason::NotABrighterTable);
    assert_eq!(columns(&client, "public", "outbox").await.len(), 1);
    assert_eq!(advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn drop_in_a_missing_schema_is_already_done() {
    let db = support::fresh_db().await;

    let plan = outbox("Outbox")
        .in_schema("gone")
        .per_schema()
        .owned_by("orders")
        .build();
    let outcome = drop_as_owner(&db, &plan, false).await.unwrap();

    assert_eq!(outcome.verdict, DropVerdict::AlreadyGone);
}

#[tokio::test]
async fn dropping_a_per_schema_table_also_removes_its_seed_rows_from_public_so_it_can_start_fresh()
{
    let (db, client) = support::fresh_db_and_client().await;
    sales_outbox_recorded_in_public(&client, 6, 0).await;
    record_another_sales_table_in_public(&client).await;
    let plan = outbox("Outbox")
        .in_schema("sales")
        .per_schema()
        .owned_by("orders")
        .build();
    run(&db, &plan).await.unwrap();

    // Adopted, not created: the drop needs consent even for an empty table.
    let dropped = drop_as_owner(&db, &plan, true).await.unwrap();

    assert!(dropped.dropped(), "{dropped:?}");
    assert_eq!(
        dropped.history_rows_deleted, 4,
        "three per-schema rows and the public seed row"
    );
    let public_left = history(&client, "public").await;
    assert_eq!(public_left.len(), 1, "{public_left:?}");
    assert_eq!(public_left[0].2, "other", "rows of other tables stay");
    assert!(history(&client, "sales").await.is_empty());
    assert_eq!(
        run(&db, &plan).await.unwrap().path,
        RunPath::Fresh,
        "a re-created table starts fresh instead of TableMissing"
    );
}
