//! Server-level events on private clusters: PostgreSQL restarted mid-run, and a hot standby (a
//! streaming replica made with `pg_basebackup -R`) or a read-only database as the target.

use std::path::Path;

use tokio::process::Child;
use tokio_postgres::Client;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::reliability::cluster::Cluster;
use crate::support::reliability::*;

const V1_OUTBOX: &str = "CREATE TABLE public.outbox (Id BIGSERIAL PRIMARY KEY, \
    MessageId UUID UNIQUE NOT NULL, Topic VARCHAR(255), MessageType VARCHAR(32), \
    Timestamp timestamptz, HeaderBag TEXT, Body TEXT)";

/// Restarts `primary` at once while the migrate run `child` is under way; returns the cluster and
/// how the run ended.
async fn restart_while_running(primary: Cluster, child: Child) -> (Cluster, MigrateRun) {
    let primary = tokio::task::spawn_blocking(move || {
        primary.restart_fast();
        primary
    })
    .await
    .unwrap();
    (primary, finish(child).await)
}

/// Asserts that migrating `manifest` again on `url` succeeds and records version 8.
async fn assert_retry_migrates_to_8(client: &Client, manifest: &Path, url: &str) {
    let retry = migrate(manifest, url).await;
    assert_eq!(retry.code, Some(0), "{retry:?}");
    assert_eq!(recorded_version(client, "outbox").await, Some(8));
}

#[tokio::test]
async fn a_restart_while_waiting_for_the_lock_is_a_clear_connection_failure_and_the_retry_succeeds()
{
    let primary = tokio::task::spawn_blocking(Cluster::primary).await.unwrap();
    let url = primary.url("postgres");
    let client = support::connect(&url).await;
    client.batch(V1_OUTBOX).await;
    let holder = support::connect(&url).await;
    hold_brighter_lock(&holder, "outbox").await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    let child = spawn_migrate(&manifest, &url);
    wait_until_polling(&client, MIGRATE_APP).await;

    let (primary, run) = restart_while_running(primary, child).await;

    run.assert_failed_with(
        "ConnectionFailed",
        &["advisory lock query for BrighterMigration_public.outbox failed"],
    );
    let client = support::connect(&url).await;
    assert_eq!(
        advisory_locks(&client).await,
        0,
        "the restart freed every lock"
    );
    assert_retry_migrates_to_8(&client, &manifest, &url).await;
    drop(primary);
}

#[tokio::test]
async fn a_restart_while_a_step_runs_loses_the_session_commits_nothing_and_the_retry_succeeds() {
    let primary = tokio::task::spawn_blocking(Cluster::primary).await.unwrap();
    let url = primary.url("postgres");
    let client = support::connect(&url).await;
    client.batch(V1_OUTBOX).await;
    install_ddl_hook(&client).await;
    set_db_setting(&client, "postgres", "pause_at", Some(4)).await;
    let control = support::connect(&url).await;
    hold_pause(&control).await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    let child = spawn_migrate(&manifest, &url);
    wait_until_paused(&client, MIGRATE_APP).await;

    let (primary, run) = restart_while_running(primary, child).await;

    assert_eq!(run.reason(), "ConnectionFailed", "{run:?}");
    assert!(
        run.message().contains("session was lost"),
        "{}",
        run.message()
    );
    let client = support::connect(&url).await;
    assert_eq!(recorded_version(&client, "outbox").await, None);
    assert_eq!(column_names(&client, "outbox").await, outbox_columns_at(1));
    set_db_setting(&client, "postgres", "pause_at", None).await;
    assert_retry_migrates_to_8(&client, &manifest, &url).await;
    drop(primary);
}

#[tokio::test]
async fn a_streaming_hot_standby_is_refused_as_read_only_before_any_lock_is_taken() {
    let (primary, standby) = tokio::task::spawn_blocking(|| {
        let primary = Cluster::primary();
        let standby = Cluster::standby_of(&primary);
        (primary, standby)
    })
    .await
    .unwrap();
    let on_standby = support::connect(&standby.url("postgres")).await;
    let in_recovery: bool = on_standby.value("SELECT pg_is_in_recovery()", &[]).await;
    assert!(in_recovery, "the replica is a hot standby");
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");

    let run = migrate(&manifest, &standby.url("postgres")).await;

    run.assert_failed_with("ReadOnlyDatabase", &["hot standby", "primary"]);
    // Every session prepares the lock statements when it opens; refused before locking means
    // the try-lock statement was never executed (tokio-postgres logs both at debug level).
    let try_lock: Vec<&str> = run
        .stderr
        .lines()
        .filter(|line| line.contains("pg_try_advisory_lock"))
        .filter_map(|line| line.split("preparing query ").nth(1)?.split(' ').next())
        .collect();
    assert!(
        !try_lock.is_empty(),
        "the log shows the lock statements being prepared: {}",
        run.stderr
    );
    for name in try_lock {
        assert!(
            !run.stderr
                .contains(&format!("executing statement {name} with parameters")),
            "refused before locking, yet the try-lock statement {name} ran: {}",
            run.stderr
        );
    }
    drop((standby, primary));
}

#[tokio::test]
async fn a_database_that_defaults_to_read_only_transactions_is_refused_and_left_unchanged() {
    let db = support::fresh_db().await;
    let admin = db.connect().await;
    admin.batch(V1_OUTBOX).await;
    admin
        .batch(&format!(
            "ALTER DATABASE \"{}\" SET default_transaction_read_only = on",
            db.name
        ))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");

    let run = migrate(&manifest, &db.url).await;

    assert_eq!(run.reason(), "ReadOnlyDatabase", "{run:?}");
    assert_eq!(recorded_version(&admin, "outbox").await, None);
    assert_eq!(column_names(&admin, "outbox").await, outbox_columns_at(1));
    assert_eq!(advisory_locks(&admin).await, 0);
}
