//! Existing tables: bootstrap from every older outbox and inbox shape, the normal path from history,
//! and interoperation with a database Brighter itself provisioned.

use boxtable_operator::migrate::{BoxKind, RunPath};

use crate::support;
use crate::support::Sql;
use crate::support::migrate::*;

/// The history rows Brighter writes for `table` in `public`, one per (version, description).
fn brighter_rows(table: &str, rows: &[(i32, &str)]) -> Vec<(i32, String, String, String)> {
    rows.iter()
        .map(|(v, d)| (*v, "public".to_owned(), table.to_owned(), (*d).to_owned()))
        .collect()
}

fn without_applied_at(rows: Vec<HistoryRow>) -> Vec<(i32, String, String, String)> {
    rows.into_iter()
        .map(|(v, s, t, d, _)| (v, s, t, d))
        .collect()
}

fn catalog_steps(kind: BoxKind, after: u32) -> Vec<(i32, &'static str)> {
    kind.versions()
        .iter()
        .filter(|v| v.number > after)
        .map(|v| (v.number as i32, v.description))
        .collect()
}

/// The history of an outbox stamped at version `n` and upgraded: the bootstrap row, then one
/// row per catalog step above `n`.
fn outbox_history_upgraded_from(n: u32) -> Vec<(i32, String)> {
    let mut want = vec![(n as i32, format!("bootstrap: detected at V{n}"))];
    want.extend(
        catalog_steps(BoxKind::Outbox, n)
            .into_iter()
            .map(|(v, d)| (v, d.to_owned())),
    );
    want
}

#[tokio::test]
async fn an_outbox_at_each_version_v1_to_v7_is_stamped_then_upgraded_and_keeps_its_rows() {
    for n in 1..=7u32 {
        let (db, client) = support::fresh_db_and_client().await;
        outbox_at(&client, "public.outbox", n, 3).await;

        let outcome = run(&db, &outbox("Outbox").build()).await.unwrap();

        assert_eq!(
            path_and_versions(&outcome),
            (RunPath::Bootstrap, n, 8),
            "table shaped at V{n}"
        );
        assert_eq!(
            history_versions(&client, "public").await,
            outbox_history_upgraded_from(n),
            "table shaped at V{n}"
        );
        let names = column_names_in_order(&client, "public", "outbox").await;
        for expected in BoxKind::Outbox.columns_at(8) {
            assert!(
                names.iter().any(|c| c == expected),
                "V{n}: {expected} missing from {names:?}"
            );
        }
        assert!(
            indexes(&client, "public", "outbox")
                .await
                .iter()
                .any(|(i, _)| i == "idx_outbox_causationid")
        );
        let topics: Vec<String> = client
            .column("SELECT topic FROM public.outbox ORDER BY topic", &[])
            .await;
        assert_eq!(
            topics,
            ["topic-0", "topic-1", "topic-2"],
            "V{n}: data rows survive"
        );
    }
}

#[tokio::test]
async fn a_2019_outbox_with_a_uuid_messageid_detects_as_v2() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 2, 1).await;

    let outcome = run(&db, &outbox("Outbox").build()).await.unwrap();

    assert_eq!(outcome.from_version, 2);
    let messageid = columns(&client, "public", "outbox")
        .await
        .into_iter()
        .find(|c| c.0 == "messageid");
    assert_eq!(
        messageid.unwrap().1,
        "uuid",
        "existing columns are never retyped"
    );
}

#[tokio::test]
async fn an_inbox_at_v1_is_stamped_then_gets_causationid_and_keeps_its_rows() {
    let (db, client) = support::fresh_db_and_client().await;
    client
        .batch(&INBOX_V1_HISTORICAL.replace("{t}", "public.inbox"))
        .await;
    client
        .batch(
            "INSERT INTO public.inbox (CommandId, CommandType, CommandBody, ContextKey) \
             VALUES (gen_random_uuid(), 'Greet', '{}', 'ctx')",
        )
        .await;

    let outcome = run(&db, &inbox("Inbox").build()).await.unwrap();

    assert_eq!(path_and_versions(&outcome), (RunPath::Bootstrap, 1, 2));
    assert_eq!(
        history_versions(&client, "public").await,
        [
            (1, "bootstrap: detected at V1".to_owned()),
            (2, "Add causationid column".to_owned())
        ]
    );
    let causation = columns(&client, "public", "inbox")
        .await
        .into_iter()
        .find(|c| c.0 == "causationid");
    assert_eq!(causation.unwrap().1, "character varying(256)");
    let count: i64 = client.value("SELECT count(*) FROM public.inbox", &[]).await;
    assert_eq!(count, 1);
}

#[tokio::test]
async fn the_normal_path_applies_only_the_steps_above_the_history() {
    for n in 2..=7u32 {
        let (db, client) = support::fresh_db_and_client().await;
        outbox_at(&client, "public.outbox", n, 1).await;
        write_history(
            &client,
            "public",
            "public",
            "outbox",
            n as i32,
            &format!("bootstrap: detected at V{n}"),
        )
        .await;

        let outcome = run(&db, &outbox("outbox").build()).await.unwrap();

        assert_eq!(path_and_versions(&outcome), (RunPath::Normal, n, 8));
        assert_eq!(
            history_versions(&client, "public").await,
            outbox_history_upgraded_from(n),
            "history at V{n}"
        );
    }
}

#[tokio::test]
async fn a_table_above_the_target_is_left_alone_and_reported() {
    let (db, client) = support::fresh_db_and_client().await;
    run(&db, &outbox("Outbox").build()).await.unwrap();
    let before = snapshot(&client).await;

    let outcome = run(&db, &outbox("Outbox").target(5).build()).await.unwrap();

    assert_eq!(
        (outcome.path, outcome.to_version, outcome.target_version),
        (RunPath::UpToDate, 8, 5)
    );
    assert_eq!(snapshot(&client).await, before);
}

/// Brighter's own fresh install: its V8 DDL (unqualified, as Brighter sends it with the default
/// schema) and its one history row.
const BRIGHTER_FRESH_OUTBOX: &str = "CREATE TABLE IF NOT EXISTS outbox (
    id bigserial PRIMARY KEY, messageid varchar(255) NOT NULL UNIQUE, topic varchar(255) NULL,
    messagetype varchar(32) NULL, timestamp timestamptz NULL, correlationid varchar(255) NULL,
    replyto varchar(255) NULL, contenttype varchar(128) NULL, partitionkey varchar(128) NULL,
    workflowid varchar(255) NULL, jobid varchar(255) NULL, dispatched timestamptz NULL,
    headerbag text NULL, body text NULL, source varchar(255) NULL, type varchar(255) NULL,
    dataschema varchar(255) NULL, subject varchar(255) NULL, traceparent varchar(255) NULL,
    tracestate varchar(255) NULL, baggage text NULL, dataref varchar(255) NULL,
    causationid varchar(255) NULL, specversion varchar(255) NULL);
  CREATE INDEX IF NOT EXISTS idx_outbox_causationid ON outbox (causationid);";

#[tokio::test]
async fn a_database_brighter_provisioned_is_up_to_date_and_left_unchanged() {
    let (db, client) = support::fresh_db_and_client().await;
    client.batch(BRIGHTER_FRESH_OUTBOX).await;
    write_history(
        &client,
        "public",
        "public",
        "outbox",
        8,
        "fresh install at V8",
    )
    .await;

    assert_up_to_date_and_unchanged(&db, &client, &outbox("Outbox").build(), 8).await;
}

#[tokio::test]
async fn the_operator_writes_the_history_table_and_rows_brighter_writes() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 4, 0).await;

    run(&db, &outbox("OUTBOX").build()).await.unwrap();

    let rows = history(&client, "public").await;
    assert_eq!(
        without_applied_at(rows.clone()),
        brighter_rows(
            "outbox",
            &[
                (4, "bootstrap: detected at V4"),
                (
                    5,
                    "Add CloudEvents columns (source, type, dataschema, subject, traceparent, tracestate, baggage)"
                ),
                (6, "Add workflowid, jobid columns"),
                (7, "Add dataref, specversion columns"),
                (8, "Add causationid column and replay index"),
            ]
        )
    );
    assert!(
        rows.iter().all(|r| r.4 == rows[0].4),
        "one transaction, one AppliedAt: {rows:?}"
    );
    assert_eq!(
        columns(&client, "public", "__BrighterMigrationHistory").await,
        [
            ("MigrationVersion".to_owned(), "integer".to_owned(), false),
            (
                "SchemaName".to_owned(),
                "character varying(256)".to_owned(),
                false
            ),
            (
                "BoxTableName".to_owned(),
                "character varying(256)".to_owned(),
                false
            ),
            (
                "Description".to_owned(),
                "character varying(512)".to_owned(),
                false
            ),
            (
                "AppliedAt".to_owned(),
                "timestamp with time zone".to_owned(),
                false
            ),
        ]
    );
    assert_eq!(
        constraints(&client, "public", "__BrighterMigrationHistory").await,
        ["PRIMARY KEY (\"SchemaName\", \"BoxTableName\", \"MigrationVersion\")"]
    );
    let defaults: Vec<Option<String>> = client
        .column(
            "SELECT column_default::text FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name = '__BrighterMigrationHistory' \
               AND column_name IN ('SchemaName', 'AppliedAt') ORDER BY column_name",
            &[],
        )
        .await;
    assert_eq!(
        defaults,
        [
            Some("now()".to_owned()),
            Some("'public'::character varying".to_owned())
        ]
    );
}
