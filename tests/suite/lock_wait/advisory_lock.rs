//! The advisory lock against a real PostgreSQL: identity in `pg_locks`, contention, timeouts,
//! release semantics, and what a waiter holds while it waits.

use std::time::Duration;

use boxtable_operator::db::Session;
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::{self, LockError, LockIdentity};
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::Sql;

struct Vector {
    lock_key: String,
    key: i64,
    hex: String,
    classid: u32,
    objid: u32,
}

fn vectors() -> Vec<Vector> {
    let text = include_str!("../../data/lock-keys.tsv");
    let rows: Vec<Vector> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Vector {
                lock_key: f[0].to_owned(),
                key: f[1].parse().unwrap(),
                hex: f[2].to_owned(),
                classid: f[3].parse().unwrap(),
                objid: f[4].parse().unwrap(),
            }
        })
        .collect();
    assert_eq!(rows.len(), 10, "every vector row is read");
    rows
}

async fn session(db: &support::TestDb, app: &str) -> Session {
    db.session(app).await
}

/// Advisory lock rows for `identity` in the test database: (pid, classid, objid, objsubid, granted).
async fn lock_rows(observer: &Client, identity: &LockIdentity) -> Vec<(i32, i64, i64, i16, bool)> {
    observer
        .query(
            "SELECT pid, classid::int8, objid::int8, objsubid::int2, granted FROM pg_locks \
             WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND classid = $1::int8::oid AND objid = $2::int8::oid",
            &[&i64::from(identity.classid()), &i64::from(identity.objid())],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

async fn backend_pid(client: &Client) -> i32 {
    client.value("SELECT pg_backend_pid()", &[]).await
}

async fn try_lock(client: &Client, identity: &LockIdentity) -> bool {
    client.value(lock::TRY_LOCK_SQL, &[&identity.key()]).await
}

/// How long a wait on a server-side condition may take: generous, for busy machines.
const WAIT: Duration = Duration::from_secs(60);

fn no_cancel() -> CancellationToken {
    CancellationToken::new()
}

/// The lock Brighter takes to migrate `public.outbox`.
fn public_outbox() -> LockIdentity {
    LockIdentity::from_lock_key("BrighterMigration_public.outbox")
}

/// A fresh database and a session of application `app` holding [`public_outbox`].
async fn outbox_lock_held_by(app: &str) -> (support::TestDb, Session, LockIdentity) {
    let db = support::fresh_db().await;
    let holder = session(&db, app).await;
    let id = public_outbox();
    acquire_at_once(&holder, &id).await;
    (db, holder, id)
}

/// A fresh database where a session of application `holder_app` holds [`public_outbox`]: that
/// session, a second one of application `other_app`, and a plain connection to watch both.
async fn outbox_lock_contest(
    holder_app: &str,
    other_app: &str,
) -> (Session, Session, Client, LockIdentity) {
    let (db, holder, id) = outbox_lock_held_by(holder_app).await;
    let other = session(&db, other_app).await;
    let observer = db.connect().await;
    (holder, other, observer, id)
}

/// Takes `identity` on `session`, which must get it without waiting.
async fn acquire_at_once(session: &Session, identity: &LockIdentity) -> lock::AcquireReport {
    lock::acquire(session, identity, Duration::ZERO, &no_cancel(), |_| {})
        .await
        .unwrap()
}

#[test]
fn every_vector_derives_the_published_key_hex_and_pg_locks_halves() {
    for v in vectors() {
        let id = LockIdentity::from_lock_key(&v.lock_key);
        assert_eq!(id.key(), v.key, "{}", v.lock_key);
        assert_eq!(id.key_hex(), v.hex, "{}", v.lock_key);
        assert_eq!(
            (id.classid(), id.objid()),
            (v.classid, v.objid),
            "{}",
            v.lock_key
        );
    }
}

#[test]
fn table_names_derive_the_lowercase_vectors() {
    for (schema, table, lock_key) in [
        ("public", "Outbox", "BrighterMigration_public.outbox"),
        ("PUBLIC", "Inbox", "BrighterMigration_public.inbox"),
        ("Billing", "outbox", "BrighterMigration_billing.outbox"),
        ("public", "Order", "BrighterMigration_public.order"),
        (
            "sales",
            "Brighter_Outbox",
            "BrighterMigration_sales.brighter_outbox",
        ),
    ] {
        let name = QualifiedName::parse(Some(schema), table).unwrap();
        let id = LockIdentity::for_table(&name);
        let expected = vectors()
            .into_iter()
            .find(|v| v.lock_key == lock_key)
            .unwrap();
        assert_eq!((id.lock_key(), id.key()), (lock_key, expected.key));
    }
}

#[tokio::test]
async fn acquiring_each_vector_shows_one_pg_locks_row_with_its_classid_objid_and_objsubid_1() {
    let db = support::fresh_db().await;
    let holder = session(&db, "lock-test").await;
    let observer = db.connect().await;
    let pid = backend_pid(holder.client()).await;
    for v in vectors() {
        let id = LockIdentity::from_lock_key(&v.lock_key);
        acquire_at_once(&holder, &id).await;
        let rows = lock_rows(&observer, &id).await;
        assert_eq!(
            rows,
            vec![(pid, i64::from(v.classid), i64::from(v.objid), 1, true)],
            "{}",
            v.lock_key
        );
        lock::release(&holder, &id).await.unwrap();
        assert!(
            lock_rows(&observer, &id).await.is_empty(),
            "{} released",
            v.lock_key
        );
    }
}

#[tokio::test]
async fn the_same_lock_key_is_one_lock_across_acquire_release_reacquire_and_sessions() {
    let (db, a, id) = outbox_lock_held_by("lock-a").await;
    let b = db.connect().await;
    assert!(!try_lock(&b, &id).await, "another session is excluded");
    lock::release(&a, &id).await.unwrap();
    assert!(
        try_lock(&b, &id).await,
        "released lock is free for another session"
    );
    b.query_one(lock::UNLOCK_SQL, &[&id.key()]).await.unwrap();
    acquire_at_once(&a, &id).await;
    assert!(!try_lock(&b, &id).await, "re-acquired lock excludes again");
    let recomputed = LockIdentity::for_table(&QualifiedName::parse(None, "Outbox").unwrap());
    assert!(
        !try_lock(&b, &recomputed).await,
        "the table-derived identity is the same lock"
    );
}

#[tokio::test]
async fn distinct_keys_do_not_block_each_other() {
    let db = support::fresh_db().await;
    let a = session(&db, "lock-a").await;
    let b = session(&db, "lock-b").await;
    let public = public_outbox();
    let billing = LockIdentity::from_lock_key("BrighterMigration_billing.outbox");
    acquire_at_once(&a, &public).await;
    let report = acquire_at_once(&b, &billing).await;
    assert_eq!(report.attempts, 1);
}

#[tokio::test]
async fn timeout_error_names_the_lock_key_the_timeout_and_the_holder_and_the_loser_holds_nothing() {
    let (holder, loser, observer, id) =
        outbox_lock_contest("orders-api", "boxtable-operator").await;
    let holder_pid = backend_pid(holder.client()).await;
    let loser_pid = backend_pid(loser.client()).await;

    let mut seen_holder = None;
    let started = std::time::Instant::now();
    let err = lock::acquire(
        &loser,
        &id,
        Duration::from_millis(1_000),
        &no_cancel(),
        |h| {
            seen_holder = h;
        },
    )
    .await
    .unwrap_err();
    let elapsed = started.elapsed();

    let message = err.to_string();
    assert!(
        message.contains("BrighterMigration_public.outbox"),
        "{message}"
    );
    assert!(message.contains("1s"), "{message}");
    assert!(message.contains(&format!("pid {holder_pid}")), "{message}");
    assert!(message.contains("orders-api"), "{message}");
    match err {
        LockError::Timeout {
            attempts,
            holder: Some(h),
            ..
        } => {
            assert_eq!(h.pid, holder_pid);
            // Tries at 0, 100, 300, 700 and 1000 ms on an idle machine; a slow try on a busy one
            // leaves fewer before the deadline. The exact schedule is pinned by the paused-clock
            // tests of the poll loop.
            assert!(
                (2..=5).contains(&attempts),
                "retried with backoff until the timeout: {attempts} tries"
            );
        }
        other => panic!("expected a timeout with a holder, got {other:?}"),
    }
    assert!(
        elapsed >= Duration::from_millis(1_000),
        "waited the full timeout: {elapsed:?}"
    );
    assert_eq!(
        seen_holder.map(|h| h.pid),
        Some(holder_pid),
        "contention reported the holder"
    );
    assert!(
        lock_rows(&observer, &id)
            .await
            .iter()
            .all(|r| r.0 != loser_pid),
        "the loser holds nothing"
    );
}

#[tokio::test]
async fn release_reports_lost_when_the_session_does_not_hold_the_lock() {
    let db = support::fresh_db().await;
    let s = session(&db, "lock-test").await;
    let id = LockIdentity::from_lock_key("BrighterMigration_public.inbox");
    let err = lock::release(&s, &id).await.unwrap_err();
    assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
    assert!(err.to_string().contains("BrighterMigration_public.inbox"));
    acquire_at_once(&s, &id).await;
    lock::release(&s, &id).await.unwrap();
}

#[tokio::test]
async fn locking_twice_needs_unlocking_twice() {
    let db = support::fresh_db().await;
    let s = session(&db, "lock-test").await;
    let other = db.connect().await;
    let id = LockIdentity::from_lock_key("BrighterMigration_a.b");
    acquire_at_once(&s, &id).await;
    acquire_at_once(&s, &id).await;
    lock::release(&s, &id).await.unwrap();
    assert!(
        !try_lock(&other, &id).await,
        "one unlock leaves the second level held"
    );
    lock::release(&s, &id).await.unwrap();
    assert!(try_lock(&other, &id).await, "the second unlock frees it");
}

#[tokio::test]
async fn terminating_the_holders_backend_frees_the_lock_for_the_next_session() {
    let (holder, next, admin, id) = outbox_lock_contest("doomed", "next").await;
    let pid = backend_pid(holder.client()).await;
    // The one-argument form exists on every supported major (the timeout argument only from 14);
    // the next session's wait below covers the time the backend takes to exit.
    let terminated: bool = admin
        .value("SELECT pg_terminate_backend($1)", &[&pid])
        .await;
    assert!(terminated);
    let report = lock::acquire(&next, &id, Duration::from_secs(60), &no_cancel(), |_| {})
        .await
        .unwrap();
    assert!(report.waited < Duration::from_secs(60));
    assert!(lock::ensure_still_held(&next, &id).await.is_ok());
}

#[tokio::test]
async fn a_waiter_holds_no_snapshot_and_no_transaction_between_polls() {
    let (_holder, waiter, observer, id) = outbox_lock_contest("holder", "waiter-under-test").await;
    let waiter_pid = backend_pid(waiter.client()).await;

    let cancel = CancellationToken::new();
    let wait = {
        let cancel = cancel.clone();
        let id = id.clone();
        async move { lock::acquire(&waiter, &id, 2 * WAIT, &cancel, |_| {}).await }
    };
    let probe = async {
        // Sample the waiter's backend while it polls until it has been seen idle 20 times: it
        // must always be idle, outside a transaction, with no snapshot (backend_xmin NULL).
        let mut samples = 0;
        let started = std::time::Instant::now();
        while samples < 20 {
            assert!(
                started.elapsed() < WAIT,
                "saw the idle waiter only {samples} times"
            );
            let row = observer
                .query_one(
                    "SELECT state, backend_xmin IS NULL, xact_start IS NULL FROM pg_stat_activity WHERE pid = $1",
                    &[&waiter_pid],
                )
                .await
                .unwrap();
            let state: Option<String> = row.get(0);
            if state.as_deref() == Some("idle") {
                assert!(
                    row.get::<_, bool>(1),
                    "waiter holds a snapshot between polls"
                );
                assert!(
                    row.get::<_, bool>(2),
                    "waiter has an open transaction between polls"
                );
                samples += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.cancel();
        samples
    };
    let (result, samples) = tokio::join!(wait, probe);
    assert_eq!(samples, 20);
    assert!(
        matches!(result, Err(LockError::Cancelled { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn cancellation_stops_a_real_wait_promptly() {
    let (_holder, waiter, _, id) = outbox_lock_contest("holder", "waiter").await;
    let cancel = CancellationToken::new();
    // Cancel once the waiter has found the lock taken and is backing off; measure from there.
    let (contended, first_contention) = tokio::sync::oneshot::channel();
    let trigger = async {
        first_contention.await.ok()?;
        cancel.cancel();
        Some(std::time::Instant::now())
    };
    let wait = async {
        let result = lock::acquire(&waiter, &id, Duration::from_secs(60), &cancel, move |_| {
            let _ = contended.send(());
        })
        .await;
        (result, std::time::Instant::now())
    };
    let ((result, returned), cancelled) = tokio::join!(wait, trigger);
    let err = result.unwrap_err();
    assert!(matches!(err, LockError::Cancelled { .. }), "{err:?}");
    let cancelled = cancelled.expect("the waiter found the lock taken");
    // Against a 60 s timeout: it left at the cancellation, not at the timeout. How promptly
    // within one backoff wait is pinned by the paused-clock tests of the poll loop.
    let after = returned.saturating_duration_since(cancelled);
    assert!(after < Duration::from_secs(10), "{after:?}");
}

#[tokio::test]
async fn the_lock_statements_are_prepared_once_when_the_session_opens_and_reused_by_every_round() {
    let db = support::fresh_db().await;
    let s = session(&db, "lock-test").await;
    let id = public_outbox();

    let at_open = support::prepared_statements(s.client()).await;
    let texts: Vec<&str> = at_open.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(texts, [lock::UNLOCK_SQL, lock::TRY_LOCK_SQL], "{at_open:?}");
    for _ in 0..25 {
        acquire_at_once(&s, &id).await;
        lock::release(&s, &id).await.unwrap();
    }
    assert_eq!(
        support::prepared_statements(s.client()).await,
        at_open,
        "the same two statements, none prepared per round"
    );
}

#[tokio::test]
async fn a_lock_statement_unknown_to_the_backend_is_reported_as_a_pooler_and_takes_no_lock() {
    let db = support::fresh_db().await;
    let s = session(&db, "lock-test").await;
    let observer = db.connect().await;
    let id = public_outbox();
    // What a transaction-mode pooler does to a session: the next statement reaches a backend
    // that never prepared the lock statements.
    s.client().batch_execute("DEALLOCATE ALL").await.unwrap();

    let err = lock::acquire(&s, &id, Duration::from_secs(5), &no_cancel(), |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::StatementsMissing { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("connection pooler detected") && text.contains(id.lock_key()),
        "{text}"
    );
    assert!(lock_rows(&observer, &id).await.is_empty(), "no lock taken");
    let err = lock::release(&s, &id).await.unwrap_err();
    assert!(
        matches!(err, LockError::StatementsMissing { .. }),
        "{err:?}"
    );
}
