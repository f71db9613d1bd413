//! Fresh installs: the latest shape, exactly one history row, and a second run that changes nothing.

use crate::support;
use crate::support::Sql;

// Shared test helpers below are plain functions, which clippy.toml's in-test allowances do not cover.

use crate::support::advisory_locks;
use crate::support::migrate::*;
use boxtable_operator::migrate::{Payload, RunPath};

fn col(name: &str, ty: &str, nullable: bool) -> ColumnRow {
    (name.to_owned(), ty.to_owned(), nullable)
}

/// The outbox's latest shape as Brighter creates it, with `body` of type `payload`.
fn expected_outbox(payload: &str) -> Vec<ColumnRow> {
    let vc255 = "character varying(255)";
    vec![
        col("id", "bigint", false),
        col("messageid", vc255, false),
        col("topic", vc255, true),
        col("messagetype", "character varying(32)", true),
        col("timestamp", "timestamp with time zone", true),
        col("correlationid", vc255, true),
        col("replyto", vc255, true),
        col("contenttype", "character varying(128)", true),
        col("partitionkey", "character varying(128)", true),
        col("workflowid", vc255, true),
        col("jobid", vc255, true),
        col("dispatched", "timestamp with time zone", true),
        col("headerbag", "text", true),
        col("body", payload, true),
        col("source", vc255, true),
        col("type", vc255, true),
        col("dataschema", vc255, true),
        col("subject", vc255, true),
        col("traceparent", vc255, true),
        col("tracestate", vc255, true),
        col("baggage", "text", true),
        col("dataref", vc255, true),
        col("causationid", vc255, true),
        col("specversion", vc255, true),
    ]
}

/// The inbox's latest shape, with `commandbody` of type `payload`.
fn expected_inbox(payload: &str) -> Vec<ColumnRow> {
    let vc256 = "character varying(256)";
    vec![
        col("commandid", vc256, false),
        col("commandtype", vc256, true),
        col("commandbody", payload, true),
        col("timestamp", "timestamp with time zone", true),
        col("contextkey", vc256, false),
        col("causationid", vc256, true),
    ]
}

/// A fresh database with `schema` created in it (unless it is `public`), and a connection to it.
async fn db_with_schema(schema: &str) -> (support::TestDb, tokio_postgres::Client) {
    let (db, client) = support::fresh_db_and_client().await;
    if schema != "public" {
        client.batch(&format!("CREATE SCHEMA \"{schema}\"")).await;
    }
    (db, client)
}

/// Asserts that `public`'s history holds one row, the fresh install of `schema.table` at
/// `version`.
async fn assert_one_fresh_install_row(
    client: &tokio_postgres::Client,
    schema: &str,
    table: &str,
    version: i32,
) {
    let rows = history(client, "public").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].0,
            rows[0].1.as_str(),
            rows[0].2.as_str(),
            rows[0].3.as_str()
        ),
        (
            version,
            schema,
            table,
            format!("fresh install at V{version}").as_str()
        )
    );
}

async fn fresh_outbox_has_the_latest_shape_and_one_history_row(
    schema: &str,
    payload: Payload,
    sql_type: &str,
) {
    let (db, client) = db_with_schema(schema).await;
    let plan = outbox("Outbox").in_schema(schema).payload(payload).build();

    let outcome = run(&db, &plan).await.unwrap();

    assert_eq!(path_and_versions(&outcome), (RunPath::Fresh, 0, 8));
    assert_eq!(
        columns(&client, schema, "outbox").await,
        expected_outbox(sql_type)
    );
    assert_eq!(
        constraints(&client, schema, "outbox").await,
        ["PRIMARY KEY (id)", "UNIQUE (messageid)"]
    );
    let idx = indexes(&client, schema, "outbox").await;
    let causation = idx
        .iter()
        .find(|(name, _)| name == "idx_outbox_causationid")
        .unwrap();
    assert!(causation.1.ends_with("(causationid)"), "{}", causation.1);
    assert_one_fresh_install_row(&client, schema, "outbox", 8).await;
    assert_eq!(advisory_locks(&client).await, 0);

    assert_up_to_date_and_unchanged(&db, &client, &plan, 8).await;
}

#[tokio::test]
async fn a_fresh_text_outbox_in_public_or_binary_one_in_another_schema_is_created_at_v8_with_its_body_type_and_a_second_run_changes_nothing()
 {
    for (schema, payload, body_type) in [
        ("public", Payload::Text, "text"),
        ("sales", Payload::Binary, "bytea"),
    ] {
        fresh_outbox_has_the_latest_shape_and_one_history_row(schema, payload, body_type).await;
    }
}

async fn fresh_inbox_has_the_latest_shape_and_one_history_row(
    schema: &str,
    payload: Payload,
    sql_type: &str,
) {
    let (db, client) = db_with_schema(schema).await;
    let plan = inbox("Inbox").in_schema(schema).payload(payload).build();

    let outcome = run(&db, &plan).await.unwrap();

    assert_eq!((outcome.path, outcome.to_version), (RunPath::Fresh, 2));
    assert_eq!(
        columns(&client, schema, "inbox").await,
        expected_inbox(sql_type)
    );
    assert_eq!(
        constraints(&client, schema, "inbox").await,
        ["PRIMARY KEY (commandid, contextkey)"]
    );
    assert_eq!(
        indexes(&client, schema, "inbox").await.len(),
        1,
        "only the primary key index"
    );
    assert_one_fresh_install_row(&client, schema, "inbox", 2).await;

    assert_up_to_date_and_unchanged(&db, &client, &plan, 2).await;
}

#[tokio::test]
async fn a_fresh_inbox_of_each_payload_is_created_at_v2_with_a_commandbody_of_that_type() {
    // Text in public, binary (bytea) in another schema, jsonb and json.
    for (schema, payload, body_type) in [
        ("public", Payload::Text, "text"),
        ("messaging", Payload::Binary, "bytea"),
        ("public", Payload::Jsonb, "jsonb"),
        ("public", Payload::Json, "json"),
    ] {
        fresh_inbox_has_the_latest_shape_and_one_history_row(schema, payload, body_type).await;
    }
}

#[tokio::test]
async fn reserved_word_table_order_is_created_and_mixed_case_names_are_one_table() {
    let (db, client) = support::fresh_db_and_client().await;
    client.batch("CREATE SCHEMA sales").await;

    let first = run(&db, &outbox("Order").in_schema("Sales").build())
        .await
        .unwrap();
    let second = run(&db, &outbox("ORDER").in_schema("sales").build())
        .await
        .unwrap();
    let third = run(&db, &outbox("order").in_schema("SALES").build())
        .await
        .unwrap();

    assert_eq!(first.path, RunPath::Fresh);
    assert_eq!(
        (second.path, third.path),
        (RunPath::UpToDate, RunPath::UpToDate)
    );
    assert_eq!(
        columns(&client, "sales", "order").await,
        expected_outbox("text")
    );
    assert!(
        indexes(&client, "sales", "order")
            .await
            .iter()
            .any(|(n, _)| n == "idx_order_causationid")
    );
    let rows = history(&client, "public").await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].1.as_str(), rows[0].2.as_str()), ("sales", "order"));
}

#[tokio::test]
async fn a_fresh_install_below_the_latest_target_stops_there_and_a_later_run_continues() {
    let (db, client) = support::fresh_db_and_client().await;

    let at5 = run(&db, &outbox("Outbox").target(5).build()).await.unwrap();
    assert_eq!(
        (at5.path, at5.to_version, at5.target_version),
        (RunPath::Fresh, 5, 5)
    );
    let names = column_names_in_order(&client, "public", "outbox").await;
    assert!(
        names.contains(&"baggage".to_owned()) && !names.contains(&"jobid".to_owned()),
        "{names:?}"
    );

    let latest = run(&db, &outbox("Outbox").build()).await.unwrap();
    assert_eq!(path_and_versions(&latest), (RunPath::Normal, 5, 8));
    assert_eq!(
        history_versions(&client, "public").await,
        [
            (5, "fresh install at V5".to_owned()),
            (6, "Add workflowid, jobid columns".to_owned()),
            (7, "Add dataref, specversion columns".to_owned()),
            (8, "Add causationid column and replay index".to_owned()),
        ]
    );
    let mut got = columns(&client, "public", "outbox").await;
    let mut want = expected_outbox("text");
    got.sort();
    want.sort();
    assert_eq!(got, want);
}
