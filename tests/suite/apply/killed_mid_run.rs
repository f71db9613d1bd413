//! The real `migrate` binary killed mid-run: SIGKILL at 20 points of a V1-to-V8 bootstrap, and
//! SIGTERM while waiting for the lock and while a step runs. Afterwards no advisory lock is held,
//! the table matches its recorded version exactly, and a rerun finishes at V8.

use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::reliability::*;

const ROWS: i64 = 50;

/// Where one SIGKILL landed and what it left.
#[derive(Debug, Default)]
struct KillResult {
    leaked_locks: i64,
    partial: bool,
    rerun_ok: bool,
}

/// A V1 outbox with data rows in a fresh database, with the DDL hook installed.
async fn v1_outbox_with_hook() -> (support::TestDb, tokio_postgres::Client) {
    let (db, client) = support::fresh_db_and_client().await;
    migrate_support_outbox_v1(&client).await;
    install_ddl_hook(&client).await;
    (db, client)
}

async fn migrate_support_outbox_v1(client: &tokio_postgres::Client) {
    client
        .batch(
            "CREATE TABLE public.outbox (Id BIGSERIAL PRIMARY KEY, MessageId UUID UNIQUE NOT NULL, \
             Topic VARCHAR(255), MessageType VARCHAR(32), Timestamp timestamptz, \
             HeaderBag TEXT, Body TEXT)",
        )
        .await;
    client
        .execute(
            "INSERT INTO public.outbox (MessageId, Topic, Body) \
             SELECT gen_random_uuid(), 'topic-' || i, 'body' FROM generate_series(1, $1::int8) i",
            &[&ROWS],
        )
        .await
        .unwrap();
}

/// Kills `migrate` at `point` (0: while it polls for the lock; n: inside the n-th DDL statement of
/// the transaction), then checks what was left and reruns.
async fn kill_at(point: u32) -> KillResult {
    let (db, client) = v1_outbox_with_hook().await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    let control = db.connect().await;
    let control_pid = backend_pid(&control).await;
    if point == 0 {
        hold_brighter_lock(&control, "outbox").await;
    } else {
        set_db_setting(&client, &db.name, "pause_at", Some(point)).await;
        hold_pause(&control).await;
    }

    let mut child = spawn_migrate(&manifest, &db.url);
    if point == 0 {
        wait_until_polling(&client, MIGRATE_APP).await;
    } else {
        wait_until_paused(&client, MIGRATE_APP).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    // The competing holder lets go; the orphaned backend then notices its client is gone. Both
    // sessions held an advisory lock in this scenario (the holder Brighter's or the pause lock),
    // and a dropped client returns before its backend has exited and freed its locks: count only
    // once both backends have ended, so that any lock left is one the killed run leaked.
    drop(control);
    wait_until_backend_gone(&client, control_pid).await;
    wait_until_gone(&client, MIGRATE_APP).await;
    let leaked_locks = advisory_locks(&client).await;
    let version = recorded_version(&client, "outbox").await.unwrap_or(1);
    let partial = column_names(&client, "outbox").await != outbox_columns_at(version as u32);

    set_db_setting(&client, &db.name, "pause_at", None).await;
    let rerun = migrate(&manifest, &db.url).await;
    let rows: i64 = client
        .value("SELECT count(*) FROM public.outbox", &[])
        .await;
    wait_until_gone(&client, MIGRATE_APP).await;
    let rerun_ok = rerun.code == Some(0)
        && recorded_version(&client, "outbox").await == Some(8)
        && column_names(&client, "outbox").await == outbox_columns_at(8)
        && rows == ROWS
        && advisory_locks(&client).await == 0;
    assert!(rerun_ok, "rerun after a kill at point {point}: {rerun:?}");
    KillResult {
        leaked_locks,
        partial,
        rerun_ok,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_at_twenty_points_of_a_bootstrap_leaks_no_lock_and_leaves_no_partial_table() {
    let points: Vec<u32> = (0..=BOOTSTRAP_DDL_STATEMENTS).collect();
    assert_eq!(points.len(), 20);
    let results: Vec<(u32, KillResult)> = futures::stream::iter(points)
        .map(|p| async move { (p, kill_at(p).await) })
        .buffer_unordered(3)
        .collect()
        .await;

    let runs = results.len();
    let leaked: i64 = results.iter().map(|(_, r)| r.leaked_locks).sum();
    let partial = results.iter().filter(|(_, r)| r.partial).count();
    let reruns = results.iter().filter(|(_, r)| r.rerun_ok).count();
    println!(
        "sigkill: runs={runs} leaked_locks={leaked} partial_tables={partial} clean_reruns={reruns}"
    );
    assert_eq!(
        (leaked, partial, reruns),
        (0, 0, 20),
        "per point: {results:?}"
    );
}

#[tokio::test]
async fn the_bootstrap_has_exactly_the_counted_ddl_statements() {
    // Pausing at the last counted statement works, and one past it never pauses: the twenty kill
    // points above cover the whole transaction.
    let (db, client) = v1_outbox_with_hook().await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    set_db_setting(
        &client,
        &db.name,
        "fail_at",
        Some(BOOTSTRAP_DDL_STATEMENTS + 1),
    )
    .await;
    let run = migrate(&manifest, &db.url).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    set_db_setting(&client, &db.name, "fail_at", None).await;
    let client2 = support::connect(&db.url).await;
    client2
        .batch("DROP TABLE public.\"__BrighterMigrationHistory\"; DROP TABLE public.outbox")
        .await;
    migrate_support_outbox_v1(&client2).await;
    set_db_setting(&client, &db.name, "fail_at", Some(BOOTSTRAP_DDL_STATEMENTS)).await;
    let run = migrate(&manifest, &db.url).await;
    assert_eq!(run.reason(), "MigrationFailed", "{run:?}");
    assert!(run.message().contains("V8"), "{}", run.message());
}

/// Sends SIGTERM to a running `migrate` and returns the run and how long it took to exit.
async fn sigterm(child: tokio::process::Child) -> (MigrateRun, Duration) {
    signal(&child, SIGTERM);
    let start = Instant::now();
    let run = finish(child).await;
    (run, start.elapsed())
}

#[tokio::test]
async fn sigterm_while_waiting_for_the_lock_exits_promptly_and_takes_nothing() {
    let (db, client) = v1_outbox_with_hook().await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    let holder = db.connect().await;
    hold_brighter_lock(&holder, "outbox").await;
    let child = spawn_migrate(&manifest, &db.url);
    wait_until_polling(&client, MIGRATE_APP).await;

    let (run, took) = sigterm(child).await;

    assert!(took < PROMPT, "exit took {took:?}");
    assert_ne!(run.code, Some(0), "{run:?}");
    assert_eq!(run.reason(), "Cancelled", "{run:?}");
    wait_until_gone(&client, MIGRATE_APP).await;
    assert_eq!(
        brighter_lock_holders(&client, "outbox").await,
        1,
        "only the holder"
    );
    assert_eq!(recorded_version(&client, "outbox").await, None);
    assert_eq!(column_names(&client, "outbox").await, outbox_columns_at(1));
}

#[tokio::test]
async fn sigterm_while_a_step_runs_cancels_the_statement_rolls_back_and_frees_the_lock() {
    let (db, client) = v1_outbox_with_hook().await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    set_db_setting(&client, &db.name, "pause_at", Some(6)).await;
    let control = db.connect().await;
    hold_pause(&control).await;
    let child = spawn_migrate(&manifest, &db.url);
    wait_until_paused(&client, MIGRATE_APP).await;
    let pid: i32 = client
        .value(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 \
             AND datname = current_database()",
            &[&MIGRATE_APP],
        )
        .await;

    let (run, took) = sigterm(child).await;

    assert!(took < PROMPT, "exit took {took:?}");
    assert_eq!(run.reason(), "Cancelled", "{run:?}");
    assert!(
        run.stderr.contains("rolling back"),
        "the log says what happens: {}",
        run.stderr
    );
    // The statement is cancelled on the server even though the competing lock is still held.
    wait_until_backend_gone(&client, pid).await;
    assert_eq!(brighter_lock_holders(&client, "outbox").await, 0);
    release_pause(&control).await;
    assert_eq!(recorded_version(&client, "outbox").await, None);
    assert_eq!(column_names(&client, "outbox").await, outbox_columns_at(1));
}
