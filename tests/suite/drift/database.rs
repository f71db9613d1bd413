//! Drift on a real PostgreSQL: a table altered behind the operator's back (the replay index
//! dropped, `body` changed to text, NOT NULL dropped, a column added) is reported difference by
//! difference, from the catalog as the server shows it; tables Brighter and the operator made
//! report none.

use boxtable_operator::migrate::drift::{Difference, DriftReport};
use boxtable_operator::migrate::{self, Plan};

use crate::support;
use crate::support::Sql;
use crate::support::migrate::*;

async fn drift_of(db: &support::TestDb, plan: &Plan, version: u32) -> DriftReport {
    let session = session(db).await;
    migrate::inspect::drift(&session, plan, version)
        .await
        .unwrap()
        .expect("the table exists at a known version")
}

/// Runs `plan` and asserts that the table it leaves matches the version it reached.
async fn assert_no_drift_once_run(db: &support::TestDb, plan: &Plan) {
    let outcome = run(db, plan).await.unwrap();
    let report = drift_of(db, plan, outcome.to_version).await;
    assert_eq!(report.differences, [], "{}", plan.table());
}

#[tokio::test]
async fn a_table_the_operator_created_matches_its_version() {
    for plan in [
        outbox("outbox").build(),
        outbox("outbox_bin").binary().build(),
        outbox("outbox_v5").target(5).build(),
        inbox("inbox").build(),
        inbox("inbox_v1").target(1).build(),
    ] {
        let db = support::fresh_db().await;
        assert_no_drift_once_run(&db, &plan).await;
    }
}

#[tokio::test]
async fn tables_older_brighter_releases_made_and_the_operator_upgraded_match_their_version() {
    let (db, client) = support::fresh_db_and_client().await;
    // A 2019 outbox (MessageId uuid) and a V1 inbox (CommandId uuid), adopted and upgraded.
    outbox_at(&client, "public.outbox", 2, 1).await;
    client
        .batch(&INBOX_V1_HISTORICAL.replace("{t}", "public.inbox"))
        .await;
    for plan in [outbox("outbox").build(), inbox("inbox").build()] {
        assert_no_drift_once_run(&db, &plan).await;
    }
}

#[tokio::test]
async fn each_change_made_behind_the_operators_back_is_named() {
    let (db, client) = support::fresh_db_and_client().await;
    let plan = outbox("outbox").binary().build();
    run(&db, &plan).await.unwrap();

    client
        .batch(
            "DROP INDEX public.idx_outbox_causationid;
             ALTER TABLE public.outbox ALTER COLUMN body TYPE text;
             ALTER TABLE public.outbox ALTER COLUMN messageid DROP NOT NULL;
             ALTER TABLE public.outbox ADD COLUMN tenant text;",
        )
        .await;
    let report = drift_of(&db, &plan, 8).await;

    assert!(report.drifted());
    assert_eq!(
        report.differences,
        [
            Difference::AllowsNull {
                column: "messageid"
            },
            Difference::ColumnType {
                column: "body",
                found: "text".into(),
                expected: "bytea".into()
            },
            Difference::MissingIndex {
                name: "idx_outbox_causationid".into(),
                columns: "causationid"
            },
            Difference::ExtraColumn {
                column: "tenant".into(),
                later_version: None
            },
        ]
    );
    assert_eq!(
        report.message(),
        "public.outbox differs from the shape of version 8: column messageid allows NULL, expected \
         NOT NULL; column body is text, expected bytea; index idx_outbox_causationid on \
         (causationid) is missing; extra columns, not drift (Brighter does not use them): tenant"
    );
}

#[tokio::test]
async fn a_column_an_application_added_is_reported_but_is_not_drift() {
    let (db, client) = support::fresh_db_and_client().await;
    let plan = outbox("outbox").build();
    run(&db, &plan).await.unwrap();
    client
        .batch(
            "ALTER TABLE public.outbox ADD COLUMN tenant text;
             ALTER TABLE public.outbox ADD COLUMN region text NOT NULL DEFAULT 'eu';",
        )
        .await;

    let report = drift_of(&db, &plan, 8).await;
    assert!(!report.drifted(), "{}", report.message());
    assert!(
        report.message().contains("tenant, region"),
        "{}",
        report.message()
    );

    // NOT NULL without a default breaks every insert Brighter makes: that is drift.
    client
        .batch("ALTER TABLE public.outbox ADD COLUMN shard int NOT NULL")
        .await;
    let report = drift_of(&db, &plan, 8).await;
    assert!(report.drifted());
    assert_eq!(
        report.differences[0],
        Difference::BlockingExtraColumn {
            column: "shard".into()
        }
    );
}

#[tokio::test]
async fn the_plan_reports_drift_against_the_recorded_version_without_changing_anything() {
    let (db, client) = support::fresh_db_and_client().await;
    let plan = outbox("outbox").target(8).build();
    run(&db, &plan).await.unwrap();
    client
        .batch("DROP INDEX public.idx_outbox_causationid")
        .await;
    let before = snapshot(&client).await;

    let session = session(&db).await;
    let preview = migrate::preview(&session, &plan).await.unwrap();

    let drift = preview.drift.expect("a table with history is checked");
    assert!(drift.drifted());
    assert!(
        drift.message().contains("index idx_outbox_causationid"),
        "{}",
        drift.message()
    );
    assert!(preview.statements.is_empty(), "drift is never repaired");
    assert_eq!(snapshot(&client).await, before);
}
