//! The lock session under attack: terminated by another backend mid-run, a failing step, and role
//! settings (`statement_timeout`, `lock_timeout`, `idle_session_timeout`) that could break the wait.

use std::time::Duration;

use boxtable_operator::db::Session;
use boxtable_operator::migrate::{self, RunError};
use boxtable_operator::reason::Reason;
use boxtable_operator::report::chain;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::migrate::{outbox, outbox_at};
use crate::support::reliability::*;

#[tokio::test]
async fn terminating_the_lock_session_mid_run_stops_it_and_commits_nothing() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 1, 20).await;
    install_ddl_hook(&client).await;
    set_db_setting(&client, &db.name, "pause_at", Some(8)).await;
    let control = db.connect().await;
    hold_pause(&control).await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    let child = spawn_migrate(&manifest, &db.url);
    wait_until_paused(&client, MIGRATE_APP).await;

    let terminated: bool = client
        .value(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND datname = current_database()",
            &[&MIGRATE_APP],
        )
        .await;
    assert!(terminated);
    let run = finish(child).await;
    release_pause(&control).await;

    // The message says the session and its lock are gone.
    run.assert_failed_with("ConnectionFailed", &["session was lost", "advisory lock"]);
    wait_until_gone(&client, MIGRATE_APP).await;
    assert_eq!(brighter_lock_holders(&client, "outbox").await, 0);
    assert_eq!(recorded_version(&client, "outbox").await, None);
    assert_eq!(column_names(&client, "outbox").await, outbox_columns_at(1));
    let rerun = migrate(&manifest, &db.url).await;
    assert_eq!(rerun.code, Some(0), "{rerun:?}");
}

#[tokio::test]
async fn a_failing_step_rolls_back_then_unlocks_keeping_its_error_and_the_next_runner_locks_at_once()
 {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 1, 20).await;
    install_ddl_hook(&client).await;
    set_db_setting(&client, &db.name, "fail_at", Some(7)).await;
    let plan = outbox("outbox").build();
    let mut session = support::migrate::session(&db).await;

    let err = migrate::run(&mut session, &plan, &CancellationToken::new(), |_| ())
        .await
        .unwrap_err();

    assert!(
        matches!(err, RunError::MigrationFailed { version: 5, .. }),
        "{}",
        chain(&err)
    );
    assert!(
        chain(&err).contains("step failure injected by the reliability test"),
        "the original error is kept: {}",
        chain(&err)
    );
    // The same session is alive, no longer in the aborted transaction, and holds no lock: it rolled
    // back before unlocking (an unlock inside the aborted transaction fails and keeps the lock).
    let held: i64 = session
        .client()
        .value(
            "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'",
            &[],
        )
        .await;
    assert_eq!(held, 0);
    assert_eq!(recorded_version(&client, "outbox").await, None);
    assert_eq!(column_names(&client, "outbox").await, outbox_columns_at(1));

    set_db_setting(&client, &db.name, "fail_at", None).await;
    let outcome = support::migrate::run(&db, &plan).await.unwrap();
    assert_eq!(outcome.lock.unwrap().attempts, 1, "no wait after a failure");
    assert_eq!(outcome.to_version, 8);
}

/// A login role with hostile settings, owning the test database's public schema.
async fn hostile_role(db: &support::TestDb, client: &tokio_postgres::Client) -> String {
    let role = format!("rel_{}", db.name);
    let password = "reliability-role-password";
    // idle_session_timeout exists from PostgreSQL 14; 13 has no such setting to break the wait.
    let version: String = client.value("SHOW server_version_num", &[]).await;
    let idle = if version.parse::<i32>().unwrap() >= 140_000 {
        format!("ALTER ROLE \"{role}\" SET idle_session_timeout = '500ms';")
    } else {
        String::new()
    };
    client
        .batch(&format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'; \
             ALTER ROLE \"{role}\" SET statement_timeout = '500ms'; \
             ALTER ROLE \"{role}\" SET lock_timeout = '200ms'; \
             {idle} \
             GRANT ALL ON DATABASE \"{}\" TO \"{role}\"; \
             ALTER SCHEMA public OWNER TO \"{role}\"; \
             ALTER TABLE public.outbox OWNER TO \"{role}\";",
            db.name
        ))
        .await;
    db.url_as(&role, password)
}

#[tokio::test]
async fn role_timeouts_do_not_break_a_long_lock_wait() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 6, 5).await;
    let url = hostile_role(&db, &client).await;
    let holder = db.connect().await;
    hold_brighter_lock(&holder, "outbox").await;
    let connection = boxtable_operator::db::Connection::parse(&url).unwrap();
    let mut session = Session::connect(&connection, "boxtable-operator-test")
        .await
        .unwrap();
    let shown: String = session
        .client()
        .value("SELECT current_setting('statement_timeout')", &[])
        .await;
    assert_eq!(shown, "500ms", "the role's settings apply to the session");
    let plan = outbox("outbox")
        .lock_timeout(Duration::from_secs(10))
        .build();
    let cancel = CancellationToken::new();
    let (contended, first_contention) = tokio::sync::oneshot::channel();
    let run = migrate::run(&mut session, &plan, &cancel, move |_| {
        let _ = contended.send(());
    });
    // The holder lets go 3 s after the run first found the lock taken (however long the run took
    // to get there): 6 idle gaps of up to 1 s each, all longer than the role's
    // idle_session_timeout, and a wait far beyond its statement_timeout.
    let release = async {
        // A run that fails before it ever waits drops the sender; its error is reported below.
        if first_contention.await.is_ok() {
            tokio::time::sleep(Duration::from_secs(3)).await;
            release_brighter_lock(&holder, "outbox").await;
        }
    };
    let (result, ()) = tokio::join!(run, release);

    let outcome = result.unwrap_or_else(|e| panic!("{} ({:?})", chain(&e), e.reason()));
    let lock = outcome.lock.unwrap();
    assert!(lock.attempts > 4, "{lock:?}");
    assert!(lock.waited >= Duration::from_millis(2900), "{lock:?}");
    assert_eq!(outcome.to_version, 8);
    assert_eq!(advisory_locks(&client).await, 0);
    assert_ne!(
        outcome.path,
        migrate::RunPath::UpToDate,
        "{:?}",
        Reason::Migrated
    );
}
