//! Failures: each is a clear error with the right reason, and leaves the database as it was.

use std::time::Duration;

use boxtable_operator::migrate::{BoxKind, InvalidPlan, Payload, Plan, RunError};
use boxtable_operator::reason::Reason;
use boxtable_operator::report::chain;
use tokio_postgres::Client;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::migrate::*;

/// Asserts that `err` is for `reason` and that its message contains each of `phrases`.
fn assert_says(err: &RunError, reason: Reason, phrases: &[&str]) {
    assert_eq!(err.reason(), reason);
    let text = err.to_string();
    for phrase in phrases {
        assert!(text.contains(phrase), "{phrase:?} is not in: {text}");
    }
}

/// The error a run of `plan` fails with, changing nothing, on a fresh database where `create`
/// made the table.
async fn refusal_of_a_table_made_by(create: &str, plan: &Plan) -> RunError {
    let (db, client) = support::fresh_db_and_client().await;
    client.batch(create).await;
    fails_without_change(&db, plan).await
}

#[tokio::test]
async fn a_history_version_no_brighter_writes_is_refused_naming_it() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 7, 0).await;
    write_history(&client, "public", "public", "outbox", 0, "not a version").await;

    let err = fails_without_change(&db, &outbox("Outbox").build()).await;

    assert_says(&err, Reason::UnknownSchemaVersion, &["V0"]);
}

#[tokio::test]
async fn a_table_without_headerbag_is_not_a_brighter_outbox() {
    let create = "CREATE TABLE public.outbox (id int, body text)";
    let err = refusal_of_a_table_made_by(create, &outbox("Outbox").build()).await;

    assert_eq!(err.reason(), Reason::NotABrighterTable);
    assert_eq!(
        err.to_string(),
        "table public.outbox is not a brighter outbox: it has no headerbag column"
    );
}

#[tokio::test]
async fn a_table_missing_v1_columns_matches_no_known_version() {
    let create = "CREATE TABLE public.inbox (commandbody text, commandid text)";
    let err = refusal_of_a_table_made_by(create, &inbox("Inbox").build()).await;

    assert_says(&err, Reason::UnknownSchemaVersion, &["commandtype"]);
}

#[tokio::test]
async fn a_text_outbox_asked_as_binary_is_a_payload_mismatch() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 3, 0).await;

    let err = fails_without_change(&db, &outbox("Outbox").binary().build()).await;

    assert_says(
        &err,
        Reason::PayloadMismatch,
        &["is text", "Binary", "bytea"],
    );
}

#[tokio::test]
async fn a_binary_outbox_asked_as_text_is_a_payload_mismatch_even_with_history() {
    let db = support::fresh_db().await;
    run(&db, &outbox("Outbox").binary().build()).await.unwrap();

    let err = fails_without_change(&db, &outbox("Outbox").build()).await;

    assert_says(&err, Reason::PayloadMismatch, &["is bytea"]);
}

#[tokio::test]
async fn a_json_inbox_asked_as_jsonb_is_a_payload_mismatch() {
    let db = support::fresh_db().await;
    run(&db, &inbox("Inbox").payload(Payload::Json).build())
        .await
        .unwrap();

    let err = fails_without_change(&db, &inbox("Inbox").payload(Payload::Jsonb).build()).await;

    assert_says(&err, Reason::PayloadMismatch, &["is json ", "Jsonb"]);
}

#[tokio::test]
async fn a_missing_schema_is_reported_and_not_created() {
    let db = support::fresh_db().await;

    let err = fails_without_change(&db, &outbox("Outbox").in_schema("nowhere").build()).await;

    assert_says(&err, Reason::SchemaNotFound, &["does not create schemas"]);
    let per_schema = fails_without_change(
        &db,
        &outbox("Outbox").in_schema("nowhere").per_schema().build(),
    )
    .await;
    assert_eq!(per_schema.reason(), Reason::SchemaNotFound);
}

#[tokio::test]
async fn a_table_dropped_while_its_history_remains_says_how_to_fix_it() {
    let (db, client) = support::fresh_db_and_client().await;
    run(&db, &outbox("Outbox").build()).await.unwrap();
    client.batch("DROP TABLE public.outbox").await;

    let err = fails_without_change(&db, &outbox("Outbox").build()).await;

    assert_says(
        &err,
        Reason::TableMissing,
        &["delete those history rows or recreate the table"],
    );
}

#[test]
fn a_target_beyond_the_catalog_or_a_json_outbox_cannot_even_be_planned() {
    // A run never sees such a plan: it cannot be built, so no run re-checks it.
    assert_eq!(
        outbox("Outbox").target(9).try_build().unwrap_err(),
        InvalidPlan::TargetVersionOutOfRange {
            kind: BoxKind::Outbox,
            requested: 9,
            latest: 8
        }
    );
    assert!(outbox("Outbox").target(0).try_build().is_err());
    assert!(inbox("Inbox").target(3).try_build().is_err());
    assert_eq!(
        outbox("Outbox")
            .payload(Payload::Jsonb)
            .try_build()
            .unwrap_err(),
        InvalidPlan::PayloadNotForOutbox {
            payload: Payload::Jsonb
        }
    );
    assert!(inbox("Inbox").payload(Payload::Jsonb).try_build().is_ok());
}

/// Makes every `CREATE INDEX` fail, so the V8 step fails after V3..V7 have run.
const BLOCK_CREATE_INDEX: &str = "
  CREATE FUNCTION block_create_index() RETURNS event_trigger LANGUAGE plpgsql AS $$
  BEGIN RAISE EXCEPTION 'index creation blocked by the test'; END $$;
  CREATE EVENT TRIGGER block_create_index ON ddl_command_start WHEN TAG IN ('CREATE INDEX')
    EXECUTE FUNCTION block_create_index();";

#[tokio::test]
async fn a_step_failing_midway_rolls_back_everything_including_the_history_table() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 2, 2).await;
    client.batch(BLOCK_CREATE_INDEX).await;

    let err = fails_without_change(&db, &outbox("Outbox").build()).await;

    match &err {
        RunError::MigrationFailed {
            version,
            description,
            ..
        } => {
            assert_eq!(
                (*version, description.as_str()),
                (8, "Add causationid column and replay index")
            );
        }
        other => panic!("expected MigrationFailed, got {}", chain(other)),
    }
    assert_eq!(err.reason(), Reason::MigrationFailed);
    assert!(
        chain(&err).contains("index creation blocked by the test"),
        "{}",
        chain(&err)
    );
    assert!(!history_exists(&client, "public").await);
    let names = column_names_in_order(&client, "public", "outbox").await;
    assert!(
        !names.contains(&"correlationid".to_owned()),
        "V3 rolled back: {names:?}"
    );

    client.batch("DROP EVENT TRIGGER block_create_index").await;
    let outcome = run(&db, &outbox("Outbox").build()).await.unwrap();
    assert_eq!((outcome.from_version, outcome.to_version), (2, 8));
}

/// Runs `plan` on a V6 `public.outbox` that another session holds in ACCESS SHARE mode (its
/// transaction left open), failing the test unless the run ends in an error within 60 s. Returns
/// a session of the test, the busy session, and the error.
async fn run_on_a_busy_v6_outbox(plan: &Plan) -> (Client, Client, RunError) {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 6, 1).await;
    let busy = hold_access_share(&db, "public.outbox").await;
    let err = tokio::time::timeout(Duration::from_secs(60), run(&db, plan))
        .await
        .expect("the step must end instead of waiting for the table lock")
        .unwrap_err();
    (client, busy, err)
}

#[tokio::test]
async fn a_ddl_lock_timeout_makes_a_step_on_a_busy_table_fail_quickly() {
    let plan = outbox("Outbox")
        .ddl_lock_timeout(Duration::from_millis(200))
        .build();
    let (client, busy, err) = run_on_a_busy_v6_outbox(&plan).await;

    assert!(
        matches!(&err, RunError::TableLockTimeout { operation, .. } if operation.starts_with("migration V7 ")),
        "{}",
        chain(&err)
    );
    assert!(chain(&err).contains("55P03"), "{}", chain(&err));
    assert!(
        err.to_string().contains(
            "for public.outbox waited 200ms for a lock on the table that another transaction holds"
        ),
        "{err}"
    );
    busy.batch("ROLLBACK").await;
    assert_eq!(advisory_locks(&client).await, 0);
    assert!(!history_exists(&client, "public").await);
}

#[tokio::test]
async fn a_statement_timeout_fails_the_step_and_rolls_back() {
    let plan = outbox("Outbox")
        .statement_timeout(Duration::from_millis(300))
        .build();
    let (client, busy, err) = run_on_a_busy_v6_outbox(&plan).await;

    assert_eq!(err.reason(), Reason::MigrationFailed);
    assert!(chain(&err).contains("57014"), "{}", chain(&err));
    busy.batch("ROLLBACK").await;
    assert!(!history_exists(&client, "public").await);
}

#[tokio::test]
async fn a_history_row_failing_after_its_ddl_in_the_same_batch_rolls_back_the_table_and_releases_the_lock()
 {
    let (db, client) = support::fresh_db_and_client().await;
    // The history table exists with Brighter's shape, and refuses every row: the fresh table's
    // DDL succeeds, then the last statement of the same batch fails.
    client
        .batch(&format!(
            "{}; CREATE FUNCTION refuse_history() RETURNS trigger LANGUAGE plpgsql AS \
             $$BEGIN RAISE EXCEPTION 'history row refused by the test'; END$$; \
             CREATE TRIGGER refuse_history BEFORE INSERT ON public.\"__BrighterMigrationHistory\" \
             FOR EACH ROW EXECUTE FUNCTION refuse_history()",
            boxtable_operator::migrate::history::HistoryTable::Public.create_sql()
        ))
        .await;

    let err = fails_without_change(&db, &outbox("Outbox").build()).await;

    assert!(
        chain(&err).contains("writing a history row")
            && chain(&err).contains("history row refused by the test"),
        "the history row's own error, not the aborted transaction's: {}",
        chain(&err)
    );
    assert!(columns(&client, "public", "outbox").await.is_empty());

    client
        .batch("DROP TRIGGER refuse_history ON public.\"__BrighterMigrationHistory\"")
        .await;
    let outcome = run(&db, &outbox("Outbox").build()).await.unwrap();
    assert_eq!(outcome.to_version, 8);
}

#[tokio::test]
async fn a_replay_index_name_another_table_holds_once_cut_to_63_bytes_is_refused_naming_both() {
    let (db, client) = support::fresh_db_and_client().await;
    // Both names are 61 bytes: Brighter's idx_<table>_causationid is cut to the same 63 bytes,
    // idx_<stem>.
    let stem = "order_events_of_the_shop_for_every_tenant_and_every_regions";
    let (first, second) = (format!("{stem}_a"), format!("{stem}_b"));
    let cut = format!("idx_{stem}");
    assert_eq!(cut.len(), 63);
    run(&db, &outbox(&first).build()).await.unwrap();
    assert_eq!(
        indexes(&client, "public", &first)
            .await
            .into_iter()
            .filter(|(name, _)| *name == cut)
            .count(),
        1,
        "the first table has its replay index under the cut name"
    );

    // A new table: nothing is created, not even the table.
    let err = fails_without_change(&db, &outbox(&second).build()).await;
    assert_eq!(err.reason(), Reason::IndexNameConflict);
    let text = err.to_string();
    for needed in [
        format!("replay index of public.{second}"),
        format!(
            "its name {cut} (Brighter's name idx_{second}_causationid, cut by PostgreSQL to 63 bytes)"
        ),
        format!("the index public.{cut} of table public.{first}"),
        format!("ALTER INDEX public.{cut} RENAME TO"),
    ] {
        assert!(text.contains(&needed), "{needed:?} missing from: {text}");
    }

    // A table that reaches V8 by an upgrade is refused the same way, before any step.
    outbox_at(&client, &format!("public.{second}"), 7, 0).await;
    let err = fails_without_change(&db, &outbox(&second).build()).await;
    assert_eq!(err.reason(), Reason::IndexNameConflict, "{err}");

    // Below V8 there is no replay index, and nothing to refuse.
    run(&db, &outbox(&second).target(7).build()).await.unwrap();
}
