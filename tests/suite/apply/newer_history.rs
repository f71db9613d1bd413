//! A history written by a newer Brighter (V9, beyond this operator's catalog) leaves the table up
//! to date at that version: nothing is changed, nothing is downgraded, and the run says the table
//! is ahead of the operator.

use boxtable_operator::migrate::RunPath;
use boxtable_operator::report::chain;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::migrate::*;

const V9: &str = "Add a column a newer Brighter knows";

#[tokio::test]
async fn a_v9_history_row_is_up_to_date_at_v9_and_changes_nothing() {
    let (db, client) = support::fresh_db_and_client().await;
    run(&db, &outbox("Outbox").build()).await.unwrap();
    write_history(&client, "public", "public", "outbox", 9, V9).await;
    let before = snapshot(&client).await;

    for plan in [outbox("Outbox").build(), outbox("Outbox").target(5).build()] {
        let outcome = run(&db, &plan)
            .await
            .unwrap_or_else(|e| panic!("a V9 history was refused: {}", chain(&e)));

        assert_eq!(outcome.path, RunPath::UpToDate);
        assert_eq!((outcome.from_version, outcome.to_version), (9, 9));
        assert_eq!(outcome.known_latest, 8);
        assert!(
            outcome.lock.is_none(),
            "decided without the lock: {outcome:?}"
        );
    }
    assert_eq!(snapshot(&client).await, before, "nothing was changed");
    assert_eq!(advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn a_v9_history_row_is_up_to_date_under_the_lock_too() {
    let (db, client) = support::fresh_db_and_client().await;
    client.batch("CREATE SCHEMA sales").await;
    let plan = outbox("Outbox").in_schema("sales").per_schema().build();
    run(&db, &plan).await.unwrap();
    write_history(&client, "sales", "sales", "outbox", 9, V9).await;
    let before = snapshot(&client).await;

    let outcome = run(&db, &plan)
        .await
        .unwrap_or_else(|e| panic!("a V9 history was refused: {}", chain(&e)));

    assert_eq!(outcome.path, RunPath::UpToDate);
    assert_eq!(outcome.to_version, 9);
    assert!(outcome.lock.is_some(), "PerSchema decides under the lock");
    assert_eq!(snapshot(&client).await, before, "nothing was changed");
}

#[tokio::test]
async fn a_v9_history_row_without_its_table_is_still_a_missing_table() {
    let (db, client) = support::fresh_db_and_client().await;
    write_history(&client, "public", "public", "outbox", 9, V9).await;

    let err = fails_without_change(&db, &outbox("Outbox").build()).await;

    assert_eq!(err.reason().as_str(), "TableMissing", "{}", chain(&err));
}

#[tokio::test]
async fn the_migrate_command_reports_a_v9_table_ready_ahead_of_the_operator_and_exits_0() {
    let (db, client) = support::fresh_db_and_client().await;
    run(&db, &outbox("Outbox").build()).await.unwrap();
    write_history(&client, "public", "public", "outbox", 9, V9).await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("outbox.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: orders\n\
         spec:\n  box: Outbox\n  database:\n    secretRef:\n      name: db\n",
    )
    .unwrap();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_boxtable-operator"))
        .arg("migrate")
        .arg("-f")
        .arg(&manifest)
        .args(["-o", "yaml", "--database-url"])
        .arg(&db.url)
        .output()
        .unwrap();

    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    let doc = &docs[0];
    let ready = support::reliability::ready_condition(doc).unwrap();
    assert_eq!(ready["status"], "True", "{stdout}");
    assert_eq!(ready["reason"], "AheadOfOperator", "{stdout}");
    assert!(
        ready["message"].as_str().unwrap().contains("version 9"),
        "{stdout}"
    );
    assert_eq!(doc["status"]["appliedVersion"], 9, "{stdout}");
}
