//! The advisory lock around a run: concurrent runners, a lock held elsewhere, and cancellation.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use boxtable_operator::lock::{LockError, LockIdentity};
use boxtable_operator::migrate::{self, Plan, RunError, RunPath};
use boxtable_operator::reason::Reason;
use boxtable_operator::report::chain;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::migrate::*;

/// How long a wait on a server-side condition may take: generous, for busy machines.
const WAIT: Duration = Duration::from_secs(60);

/// Sessions of the run under test (in this test's database) whose statement waits on a table
/// (heavyweight) lock.
async fn blocked_on_a_table_lock(client: &tokio_postgres::Client) -> i64 {
    client
        .value(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'boxtable-operator-test' \
             AND datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'relation'",
            &[],
        ).await
}

/// A new session on `db` holding the advisory lock of `plan`'s table, and the lock's key.
async fn hold_lock_of(db: &support::TestDb, plan: &Plan) -> (tokio_postgres::Client, i64) {
    let holder = db.connect().await;
    let key = LockIdentity::for_table(plan.table()).key();
    holder
        .query_one("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    (holder, key)
}

/// A fresh database, an outbox plan that waits up to `lock_timeout` for Brighter's lock, and
/// another session holding that lock (with the lock's key).
async fn outbox_whose_lock_is_held(
    lock_timeout: Duration,
) -> (support::TestDb, Plan, tokio_postgres::Client, i64) {
    let db = support::fresh_db().await;
    let plan = outbox("Outbox").lock_timeout(lock_timeout).build();
    let (holder, key) = hold_lock_of(&db, &plan).await;
    (db, plan, holder, key)
}

#[tokio::test]
async fn eight_runners_at_once_create_the_table_once_and_leave_no_lock() {
    let db = Arc::new(support::fresh_db().await);
    let plan = outbox("Outbox").build();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (db, plan) = (db.clone(), plan.clone());
        tasks.push(tokio::spawn(async move { run(&db, &plan).await }));
    }
    let mut paths = Vec::new();
    for task in tasks {
        paths.push(task.await.unwrap().unwrap().path);
    }

    assert_eq!(
        paths.iter().filter(|p| **p == RunPath::Fresh).count(),
        1,
        "{paths:?}"
    );
    assert_eq!(
        paths.iter().filter(|p| **p == RunPath::UpToDate).count(),
        7,
        "{paths:?}"
    );
    let client = db.connect().await;
    assert_eq!(
        history_versions(&client, "public").await,
        [(8, "fresh install at V8".to_owned())]
    );
    assert_eq!(advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn eight_runners_on_eight_tables_in_eight_schemas_race_to_create_one_history_table() {
    let db = Arc::new(support::fresh_db().await);
    let client = db.connect().await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        client.batch(&format!("CREATE SCHEMA s{i}")).await;
        let plan = outbox("Outbox").in_schema(&format!("s{i}")).build();
        let db = db.clone();
        tasks.push(tokio::spawn(async move { run(&db, &plan).await }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap().path, RunPath::Fresh);
    }

    assert_eq!(history(&client, "public").await.len(), 8);
    assert_eq!(advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn a_lock_held_by_another_session_times_out_naming_the_holder_and_changes_nothing() {
    let (db, client) = support::fresh_db_and_client().await;
    let plan = outbox("Outbox")
        .lock_timeout(Duration::from_millis(300))
        .build();
    let (holder, _) = hold_lock_of(&db, &plan).await;
    let holder_pid: i32 = holder.value("SELECT pg_backend_pid()", &[]).await;
    let before = snapshot(&client).await;
    let seen = Arc::new(Mutex::new(None));

    let mut session = session(&db).await;
    let seen_by_callback = seen.clone();
    let err = migrate::run(&mut session, &plan, &CancellationToken::new(), move |h| {
        *seen_by_callback.lock().unwrap() = Some(h.map(|h| h.pid));
    })
    .await
    .unwrap_err();

    assert_eq!(err.reason(), Reason::LockTimeout);
    let RunError::Lock(lock) = &err else {
        panic!("expected a lock error, got {}", chain(&err))
    };
    let LockError::Timeout {
        holder: Some(h), ..
    } = lock.as_ref()
    else {
        panic!("expected a lock timeout with a holder, got {}", chain(&err))
    };
    assert_eq!(h.pid, holder_pid);
    assert!(
        err.to_string().contains(&format!("pid {holder_pid}")),
        "{err}"
    );
    assert!(
        err.to_string().contains("BrighterMigration_public.outbox"),
        "{err}"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        Some(Some(holder_pid)),
        "on_waiting saw the holder"
    );
    assert_eq!(snapshot(&client).await, before);
}

#[tokio::test]
async fn a_run_waits_for_the_holder_and_then_migrates() {
    let (db, plan, holder, key) = outbox_whose_lock_is_held(Duration::from_secs(20)).await;
    // The holder lets go once the run has found the lock taken, however long it took to get there.
    let (contended, first_contention) = tokio::sync::oneshot::channel();
    let release = async {
        if first_contention.await.is_ok() {
            holder
                .query_one("SELECT pg_advisory_unlock($1)", &[&key])
                .await
                .unwrap();
        }
    };

    let mut session = session(&db).await;
    let never = CancellationToken::new();
    let (outcome, ()) = tokio::join!(
        migrate::run(&mut session, &plan, &never, move |_| {
            let _ = contended.send(());
        }),
        release
    );

    let outcome = outcome.unwrap();
    assert_eq!(outcome.path, RunPath::Fresh);
    assert!(outcome.lock.unwrap().attempts > 1);
}

#[tokio::test]
async fn cancelling_a_run_mid_statement_rolls_back_and_releases_the_lock() {
    let (db, client) = support::fresh_db_and_client().await;
    outbox_at(&client, "public.outbox", 6, 1).await;
    let busy = hold_access_share(&db, "public.outbox").await;
    let before = snapshot(&client).await;
    let plan = outbox("Outbox").build();
    let cancel = CancellationToken::new();
    // Cancel once the run's statement is blocked on the table lock, not at a guessed moment.
    let trigger = async {
        let started = std::time::Instant::now();
        while blocked_on_a_table_lock(&client).await == 0 {
            assert!(
                started.elapsed() < WAIT,
                "the run never blocked on the table lock"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.cancel();
    };

    let mut session = session(&db).await;
    let (err, ()) = tokio::join!(
        tokio::time::timeout(WAIT, migrate::run(&mut session, &plan, &cancel, |_| ())),
        trigger
    );
    let err = err.expect("cancellation must end the run").unwrap_err();

    assert_eq!(err.reason(), Reason::Cancelled, "{}", chain(&err));
    assert_eq!(
        blocked_on_a_table_lock(&client).await,
        0,
        "the server cancelled the blocked statement"
    );
    assert_eq!(advisory_locks(&client).await, 0);
    busy.batch("ROLLBACK").await;
    assert_eq!(snapshot(&client).await, before);
    let alive: i32 = session.client().value("SELECT 1", &[]).await;
    assert_eq!(alive, 1, "the session is still usable");
    assert_eq!(
        run(&db, &plan).await.unwrap().path,
        RunPath::Bootstrap,
        "the next run succeeds"
    );
}

#[tokio::test]
async fn a_waiter_stops_waiting_once_the_holder_has_brought_the_table_up_to_date() {
    // A Brighter application holds the lock for a long time and provisions the table while the
    // operator waits: it keeps the lock after its migration has committed.
    let (db, plan, holder, key) = outbox_whose_lock_is_held(Duration::from_secs(30)).await;
    // The application provisions once the operator is waiting for its lock.
    let (contended, first_contention) = tokio::sync::oneshot::channel();
    let provision = async {
        // A run that fails before it ever waits drops the sender; its error is reported below.
        first_contention.await.ok()?;
        let provisioned = db.connect().await;
        outbox_at(&provisioned, "public.outbox", 8, 0).await;
        write_history(
            &provisioned,
            "public",
            "public",
            "outbox",
            8,
            "fresh install at V8",
        )
        .await;
        Some(std::time::Instant::now())
    };

    let mut session = session(&db).await;
    let run = async {
        let outcome = migrate::run(&mut session, &plan, &CancellationToken::new(), move |_| {
            let _ = contended.send(());
        })
        .await;
        (outcome, std::time::Instant::now())
    };
    let ((outcome, returned), provisioned) = tokio::join!(run, provision);

    let outcome = outcome.unwrap();
    let provisioned = provisioned.expect("the run waited for the holder's lock");
    assert_eq!(outcome.path, RunPath::UpToDate);
    assert!(outcome.lock.is_none(), "the lock was never needed");
    // Its lock timeout is 30 s and the holder never lets go while it runs: returning at all,
    // and well before the timeout, means it noticed the finished work.
    let after = returned.saturating_duration_since(provisioned);
    assert!(
        after < Duration::from_secs(15),
        "left soon after the table was up to date, not at the lock timeout: {after:?}"
    );
    let locked: bool = holder.value("SELECT pg_advisory_unlock($1)", &[&key]).await;
    assert!(locked, "the holder still had the lock all along");
}

#[tokio::test]
async fn runs_on_one_session_reuse_the_lock_statements_it_prepared_when_it_opened() {
    let db = support::fresh_db().await;
    let observer = db.connect().await;
    let mut session = session(&db).await;
    let at_open = support::prepared_statements(session.client()).await;
    assert_eq!(
        at_open.len(),
        2,
        "the try-lock and unlock statements: {at_open:?}"
    );

    for table in ["outbox_a", "outbox_b", "outbox_c"] {
        let outcome = migrate::run(
            &mut session,
            &outbox(table).build(),
            &CancellationToken::new(),
            |_| (),
        )
        .await
        .unwrap();
        assert_eq!(outcome.path, RunPath::Fresh, "{table}");
        assert!(outcome.lock.is_some(), "{table} ran under its lock");
    }

    assert_eq!(
        support::prepared_statements(session.client()).await,
        at_open,
        "the same two statements served every run"
    );
    assert_eq!(advisory_locks(&observer).await, 0);
}
