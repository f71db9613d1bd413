//! The session pool against a real PostgreSQL: one session reused across tables and renamed for
//! each pass, the bound per database, a terminated, failed or unclean session never lent again, a
//! changed connection string closing the sessions of the old one, and idle sessions closing on
//! time and past the cap.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use boxtable_operator::db::pool::{CheckoutError, Closed, Opened, PoolEvents};
use boxtable_operator::db::{Connection, PoolSettings, SessionKey, SessionPool};
use boxtable_operator::migrate::runner::Withdrawal;
use boxtable_operator::migrate::{Outcome, Plan, RunError, RunPath};
use boxtable_operator::pass::{self, PassError, Target};
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::Sql;
use crate::support::migrate::outbox;
use crate::support::reliability::{
    WAIT, install_ddl_hook, set_db_setting, wait_until_backend_gone,
};
use crate::support::wait::wait_until_within;
use crate::support::{advisory_locks, operator_sessions};

/// Counts what the pool reports.
#[derive(Default)]
pub(super) struct Counts {
    opened: Mutex<HashMap<&'static str, u64>>,
    closed: Mutex<HashMap<&'static str, u64>>,
}

impl PoolEvents for Counts {
    fn opened(&self, why: Opened) {
        *self.opened.lock().unwrap().entry(why.as_str()).or_default() += 1;
    }
    fn closed(&self, why: Closed) {
        *self.closed.lock().unwrap().entry(why.as_str()).or_default() += 1;
    }
    fn sizes(&self, _: usize, _: usize) {}
}

/// How many times `why` was counted in `counts`.
fn count_of(counts: &Mutex<HashMap<&'static str, u64>>, why: &str) -> u64 {
    counts.lock().unwrap().get(why).copied().unwrap_or(0)
}

impl Counts {
    fn opened(&self, why: Opened) -> u64 {
        count_of(&self.opened, why.as_str())
    }
    pub(super) fn opened_total(&self) -> u64 {
        self.opened.lock().unwrap().values().sum()
    }
    fn closed(&self, why: Closed) -> u64 {
        count_of(&self.closed, why.as_str())
    }
}

fn pool_with(settings: PoolSettings) -> (SessionPool, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    (SessionPool::with_events(settings, counts.clone()), counts)
}

pub(super) fn pool(per_target: usize) -> (SessionPool, Arc<Counts>) {
    pool_with(PoolSettings {
        per_target,
        ..PoolSettings::default()
    })
}

const SOURCE: &str = "test/shop-db/connectionString";

fn target<'a>(connection: &'a Connection, app: &'a str) -> Target<'a> {
    Target {
        connection,
        application_name: app,
        source: Some(SOURCE),
    }
}

/// One migration of `plan` through the pool, with a gate that lets it through.
pub(super) async fn migrate(
    pool: &SessionPool,
    url: &str,
    plan: &Plan,
) -> Result<Outcome, PassError> {
    migrate_from(pool, url, plan, Some(SOURCE)).await
}

/// As [`migrate`], with the connection string from `source`.
async fn migrate_from(
    pool: &SessionPool,
    url: &str,
    plan: &Plan,
    source: Option<&str>,
) -> Result<Outcome, PassError> {
    let app = format!("boxtable-operator/test/{}", plan.table().table.as_str());
    let connection = Connection::parse(url).unwrap();
    let target = Target {
        source,
        ..target(&connection, &app)
    };
    migrate_gated(pool, &target, plan, || async { Ok(()) }).await
}

/// One migration of `plan` through the pool to `target`, with `gate` run inside the lock.
async fn migrate_gated<G, F>(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    gate: G,
) -> Result<Outcome, PassError>
where
    G: FnOnce() -> F + Send,
    F: Future<Output = Result<(), Withdrawal>> + Send,
{
    let step = pass::Migrate {
        on_waiting: |_| (),
        gate,
    };
    pass::run(pool, target, plan, step, &CancellationToken::new()).await
}

/// A fresh database, a connection to it to observe with, and a pool of `per_target` sessions
/// per database.
async fn db_and_pool(per_target: usize) -> (support::TestDb, Client, SessionPool, Arc<Counts>) {
    let db = support::fresh_db().await;
    let observer = db.connect().await;
    let (pool, counts) = pool(per_target);
    (db, observer, pool, counts)
}

#[tokio::test]
async fn tables_on_one_database_share_one_session_named_for_each_pass() {
    let (db, observer, pool, counts) = db_and_pool(2).await;
    for i in 0..10 {
        let plan = outbox(&format!("outbox_{i}")).build();
        let outcome = migrate(&pool, &db.url, &plan).await.unwrap();
        assert_eq!(outcome.to_version, 8);
    }
    assert_eq!(counts.opened_total(), 1, "one session for ten passes");
    let sessions = operator_sessions(&observer).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(
        sessions[0].1, "boxtable-operator/test/outbox_9",
        "the kept session carries the name of the pass that used it last"
    );
    assert_eq!(pool.sizes(), (1, 1));
    assert_eq!(advisory_locks(&observer).await, 0);
}

#[tokio::test]
async fn passes_wait_for_a_free_session_and_never_open_more_than_the_bound() {
    let db = support::fresh_db().await;
    let observer = Arc::new(db.connect().await);
    let (pool, counts) = pool(2);
    // Each gate (inside the lock, in the transaction) waits for a second pass to be inside its
    // own: with the bound at 2 they go through in pairs, and each records how many operator
    // sessions the server sees at that moment.
    let pair = Arc::new(tokio::sync::Barrier::new(2));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let runs = (0..8).map(|i| {
        let (pool, url, pair, seen, observer) =
            (&pool, &db.url, pair.clone(), seen.clone(), observer.clone());
        async move {
            let plan = outbox(&format!("outbox_{i}")).build();
            let app = format!("boxtable-operator/test/outbox_{i}");
            let gate = move || async move {
                pair.wait().await;
                let n = operator_sessions(&observer).await.len();
                seen.lock().unwrap().push(n);
                Ok::<(), Withdrawal>(())
            };
            let connection = Connection::parse(url).unwrap();
            migrate_gated(pool, &target(&connection, &app), &plan, gate)
                .await
                .unwrap()
        }
    });
    let outcomes = tokio::time::timeout(WAIT, futures::future::join_all(runs))
        .await
        .expect("every pass finished");
    assert!(outcomes.iter().all(|o| o.to_version == 8));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8);
    assert!(
        seen.iter().all(|&n| n <= 2),
        "sessions seen inside the lock: {seen:?}"
    );
    assert_eq!(counts.opened_total(), 2, "two sessions for eight passes");
    assert_eq!(pool.sizes(), (2, 2));
}

#[tokio::test]
async fn a_terminated_idle_session_is_replaced_and_the_next_pass_succeeds() {
    let (db, observer, pool, counts) = db_and_pool(2).await;
    migrate(&pool, &db.url, &outbox("outbox_a").build())
        .await
        .unwrap();
    let before = operator_sessions(&observer).await;
    assert_eq!(before.len(), 1, "{before:?}");
    let pid = before[0].0;
    let terminated: bool = observer
        .value("SELECT pg_terminate_backend($1)", &[&pid])
        .await;
    assert!(terminated);
    wait_until_backend_gone(&observer, pid).await;

    let outcome = migrate(&pool, &db.url, &outbox("outbox_b").build())
        .await
        .unwrap_or_else(|e| panic!("the pass after the kill: {}", e.message()));

    assert_eq!(outcome.to_version, 8);
    let after = operator_sessions(&observer).await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after[0].0, pid, "a new backend");
    assert_eq!(counts.opened(Opened::NoneIdle), 1);
    assert_eq!(counts.opened(Opened::ReplacedBroken), 1);
    assert_eq!(counts.closed(Closed::Broken), 1);
}

#[tokio::test]
async fn a_step_failing_under_the_lock_closes_the_session_and_leaves_no_advisory_lock() {
    let db = support::fresh_db().await;
    let observer = Arc::new(db.connect().await);
    install_ddl_hook(&observer).await;
    // The first DDL statement of the transaction fails (the history table's CREATE), after the
    // lock was taken and before it is released.
    set_db_setting(&observer, &db.name, "fail_at", Some(1)).await;
    let (pool, counts) = pool(2);
    let plan = outbox("outbox").build();
    let pid = Arc::new(Mutex::new(None));
    let gate = {
        let (observer, pid) = (observer.clone(), pid.clone());
        move || async move {
            let seen = operator_sessions(&observer).await.first().map(|s| s.0);
            *pid.lock().unwrap() = seen;
            Ok::<(), Withdrawal>(())
        }
    };
    let connection = Connection::parse(&db.url).unwrap();
    let target = target(&connection, "boxtable-operator/test/outbox");
    let error = migrate_gated(&pool, &target, &plan, gate)
        .await
        .unwrap_err();
    assert!(
        matches!(error, PassError::Run { .. }) && error.message().contains("step failure injected"),
        "{}",
        error.message()
    );
    assert_eq!(pool.sizes(), (0, 0), "the session was not kept");
    assert_eq!(counts.closed(Closed::NotClean), 1);
    let pid = pid.lock().unwrap().expect("the gate saw the session");
    wait_until_backend_gone(&observer, pid).await;
    assert_eq!(advisory_locks(&observer).await, 0);

    set_db_setting(&observer, &db.name, "fail_at", None).await;
    migrate(&pool, &db.url, &plan).await.unwrap();
    assert_eq!(
        counts.opened(Opened::NoneIdle),
        2,
        "the next pass opened a new session"
    );
}

#[tokio::test]
async fn a_withdrawn_run_closes_its_session_and_leaves_no_advisory_lock() {
    let (db, observer, pool, counts) = db_and_pool(2).await;
    let connection = Connection::parse(&db.url).unwrap();
    let target = target(&connection, "boxtable-operator/test/outbox");
    let withdrawn = || async {
        Err(Withdrawal {
            why: "the BoxTable is gone".to_owned(),
            transient: false,
        })
    };
    let error = migrate_gated(&pool, &target, &outbox("outbox").build(), withdrawn)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            PassError::Run {
                source: RunError::Withdrawn { .. },
                ..
            }
        ),
        "{}",
        error.message()
    );
    assert_eq!(pool.sizes(), (0, 0));
    assert_eq!(counts.closed(Closed::NotClean), 1);
    all_sessions_end(&observer, "the withdrawn run's session to end").await;
}

#[tokio::test]
async fn a_session_handed_back_inside_a_transaction_or_holding_an_advisory_lock_is_closed() {
    let (db, observer, pool, counts) = db_and_pool(2).await;
    let key = SessionKey::of(&Connection::parse(&db.url).unwrap());
    let cancel = CancellationToken::new();
    for left_behind in ["BEGIN", "SELECT pg_advisory_lock(74726, 1)"] {
        let mut lent = pool
            .checkout(&key, None, "boxtable-operator/test/unclean", &cancel)
            .await
            .unwrap();
        lent.session()
            .client()
            .batch_execute(left_behind)
            .await
            .unwrap();
        lent.give_back().await;
        assert_eq!(pool.sizes(), (0, 0), "not kept after {left_behind}");
    }
    assert_eq!(counts.closed(Closed::Broken), 2);
    all_sessions_end(&observer, "the unclean sessions to end").await;
}

#[tokio::test]
async fn a_session_that_only_read_is_kept_without_the_clean_check_and_any_other_is_checked() {
    let db = support::fresh_db().await;
    let observer = db.connect().await;
    let proxy = support::wire::start(support::wire::upstream(&db.config())).await;
    let url = support::wire::through(&db.config(), proxy.addr);
    let (pool, counts) = pool(1);
    let plan = outbox("outbox").build();
    let first = migrate(&pool, &url, &plan).await.unwrap();
    assert_eq!(first.path, RunPath::Fresh);
    assert_eq!(
        clean_checks(&proxy),
        1,
        "a pass that took the lock is checked"
    );
    // Up to date: the lending check and the lock-free read, fixed reads only.
    for _ in 0..3 {
        let again = migrate(&pool, &url, &plan).await.unwrap();
        assert_eq!(again.path, RunPath::UpToDate);
    }
    assert_eq!(
        clean_checks(&proxy),
        1,
        "passes that only read are kept unchecked"
    );
    let other = migrate(&pool, &url, &outbox("outbox_b").build())
        .await
        .unwrap();
    assert_eq!(other.path, RunPath::Fresh);
    assert_eq!(
        clean_checks(&proxy),
        2,
        "the next pass that took a lock is checked"
    );
    // Anything run outside the fixed reads is checked too, and found unclean.
    let key = SessionKey::of(&Connection::parse(&url).unwrap());
    let mut lent = pool
        .checkout(
            &key,
            None,
            "boxtable-operator/test/unclean",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    lent.session()
        .client()
        .batch_execute("SELECT pg_advisory_lock(74726, 2)")
        .await
        .unwrap();
    lent.give_back().await;
    assert_eq!(clean_checks(&proxy), 3);
    assert_eq!(pool.sizes(), (0, 0), "not kept with the lock");
    assert_eq!(counts.opened_total(), 1, "one session for every pass");
    assert_eq!(counts.closed(Closed::Broken), 1);
    all_sessions_end(&observer, "the session to end").await;
}

#[tokio::test]
async fn a_pass_waiting_for_a_free_session_returns_when_cancelled() {
    let db = support::fresh_db().await;
    let (pool, counts) = pool(1);
    let key = SessionKey::of(&Connection::parse(&db.url).unwrap());
    let never = CancellationToken::new();
    let held = pool
        .checkout(&key, None, "boxtable-operator/test/held", &never)
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let waiting = pool.checkout(&key, None, "boxtable-operator/test/waiting", &cancel);
    let cancelling = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    };
    let (result, ()) = tokio::time::timeout(WAIT, async { tokio::join!(waiting, cancelling) })
        .await
        .expect("the wait ended");
    assert!(
        matches!(
            result,
            Err(boxtable_operator::db::pool::CheckoutError::Cancelled)
        ),
        "{:?}",
        result.map(|_| ())
    );
    assert_eq!(
        counts.opened_total(),
        1,
        "the waiting pass opened no session"
    );
    held.give_back().await;
}

/// A role of its own with `password`, allowed to create tables in the test database.
async fn role_with_password(db: &support::TestDb, client: &Client, password: &str) -> String {
    let role = format!("pool_{}", db.name);
    client
        .batch(&format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'; \
             GRANT ALL ON DATABASE \"{}\" TO \"{role}\"; \
             GRANT ALL ON SCHEMA public TO \"{role}\";",
            db.name
        ))
        .await;
    role
}

#[tokio::test]
async fn a_changed_connection_string_from_the_same_source_closes_the_old_sessions_at_once() {
    let db = support::fresh_db().await;
    let observer = db.connect().await;
    let role = role_with_password(&db, &observer, "first-password").await;
    let (pool, counts) = pool(2);
    let old_url = db.url_as(&role, "first-password");
    migrate(&pool, &old_url, &outbox("outbox_a").build())
        .await
        .unwrap();
    let old = operator_sessions(&observer).await;
    assert_eq!(old.len(), 1, "{old:?}");

    // The password is rotated: the old session would still work, but the Secret says otherwise.
    observer
        .batch(&format!("ALTER ROLE \"{role}\" PASSWORD 'second-password'"))
        .await;
    let new_url = db.url_as(&role, "second-password");
    migrate(&pool, &new_url, &outbox("outbox_b").build())
        .await
        .unwrap();

    assert_eq!(counts.closed(Closed::Superseded), 1);
    assert_eq!(counts.opened(Opened::NoneIdle), 2);
    wait_until_backend_gone(&observer, old[0].0).await;
    let now = operator_sessions(&observer).await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(pool.sizes(), (1, 1));
}

#[tokio::test]
async fn idle_sessions_close_after_the_idle_timeout() {
    let db = support::fresh_db().await;
    let observer = db.connect().await;
    let (pool, counts) = pool_with(PoolSettings {
        per_target: 2,
        idle_timeout: Duration::from_millis(500),
        max_idle: 8,
    });
    let pool = Arc::new(pool);
    let stop = CancellationToken::new();
    let expiry = tokio::spawn({
        let (pool, stop) = (pool.clone(), stop.clone());
        async move { pool.expire_idle_until(&stop).await }
    });
    migrate(&pool, &db.url, &outbox("outbox").build())
        .await
        .unwrap();
    let pid = operator_sessions(&observer).await[0].0;
    wait_until_backend_gone(&observer, pid).await;
    assert_eq!(counts.closed(Closed::IdleTimeout), 1);
    assert_eq!(pool.sizes(), (0, 0));
    stop.cancel();
    expiry.await.unwrap();
}

#[tokio::test]
async fn past_the_idle_cap_the_oldest_idle_session_is_closed() {
    let first = support::fresh_db().await;
    let second = support::fresh_db().await;
    let observer = first.connect().await;
    let (pool, counts) = pool_with(PoolSettings {
        per_target: 2,
        max_idle: 1,
        ..PoolSettings::default()
    });
    migrate_from(&pool, &first.url, &outbox("outbox").build(), None)
        .await
        .unwrap();
    let pid = operator_sessions(&observer).await[0].0;
    migrate_from(&pool, &second.url, &outbox("outbox").build(), None)
        .await
        .unwrap();
    assert_eq!(counts.closed(Closed::IdleCap), 1);
    assert_eq!(pool.sizes(), (1, 1));
    wait_until_backend_gone(&observer, pid).await;
}

#[tokio::test]
async fn closing_the_pool_ends_its_idle_sessions_and_those_handed_back_later() {
    let (db, observer, pool, counts) = db_and_pool(2).await;
    let key = SessionKey::of(&Connection::parse(&db.url).unwrap());
    let cancel = CancellationToken::new();
    migrate(&pool, &db.url, &outbox("outbox").build())
        .await
        .unwrap();
    let lent = pool
        .checkout(&key, None, "boxtable-operator/test/lent", &cancel)
        .await
        .unwrap();
    let second = pool
        .checkout(&key, None, "boxtable-operator/test/second", &cancel)
        .await
        .unwrap();
    pool.close();
    lent.give_back().await;
    second.give_back().await;
    assert_eq!(pool.sizes(), (0, 0));
    assert_eq!(counts.closed(Closed::Shutdown), 2);
    all_sessions_end(&observer, "the pool's sessions to end").await;
}

#[tokio::test]
async fn each_pass_on_a_kept_session_takes_and_releases_its_own_lock_and_the_preflight_runs_once() {
    let db = support::fresh_db().await;
    let proxy = support::wire::start(support::wire::upstream(&db.config())).await;
    let url = support::wire::through(&db.config(), proxy.addr);
    let (pool, counts) = pool(1);
    for table in ["outbox_a", "outbox_b", "outbox_c"] {
        migrate(&pool, &url, &outbox(table).build()).await.unwrap();
    }
    assert_eq!(counts.opened_total(), 1);
    let sent = proxy.sent();
    let count = |needle: &str| sent.iter().filter(|s| s.sql.contains(needle)).count();
    assert_eq!(count("pg_try_advisory_lock"), 3, "one lock per table");
    assert_eq!(count("pg_advisory_unlock"), 3, "each released");
    assert_eq!(
        count("pg_is_in_recovery"),
        1,
        "the preflight runs once per session"
    );
    assert_eq!(
        count("set_config('application_name'"),
        2,
        "renamed each time it is lent again"
    );
}

#[tokio::test]
async fn a_session_opened_ahead_is_lent_to_the_first_pass_and_no_other_is_opened() {
    let (db, observer, pool, counts) = db_and_pool(1).await;
    let plan = outbox("outbox_ahead").build();
    let app = "boxtable-operator/test/outbox_ahead";
    let connection = Connection::parse(&db.url).unwrap();

    pool.open_ahead(&SessionKey::of(&connection), app).await;

    assert_eq!(pool.sizes(), (1, 1), "one session open, idle");
    let ahead = operator_sessions(&observer).await;
    assert_eq!(ahead.len(), 1, "{ahead:?}");
    let outcome = migrate(&pool, &db.url, &plan).await.unwrap();
    assert_eq!(outcome.to_version, 8);
    assert_eq!(
        counts.opened_total(),
        1,
        "the pass used the session opened ahead"
    );
    assert_eq!(
        operator_sessions(&observer).await,
        ahead,
        "the same backend, under the same name"
    );
    assert_eq!(pool.sizes(), (1, 1));
}

#[tokio::test]
async fn a_failed_open_ahead_is_the_first_checkouts_failure_without_connecting_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    // A server that accepts and hangs up at once, counting the connections made to it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counting = accepted.clone();
    let server = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counting.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    let connection = Connection::parse(&format!(
        "postgres://app:pw@127.0.0.1:{port}/shop?sslmode=disable"
    ))
    .unwrap();
    let key = SessionKey::of(&connection);
    let (pool, counts) = pool(1);
    let cancel = CancellationToken::new();

    pool.open_ahead(&key, "boxtable-operator-migrate").await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    let first = pool
        .checkout(&key, None, "boxtable-operator-migrate", &cancel)
        .await;

    assert!(
        matches!(first, Err(CheckoutError::Connect(_))),
        "{:?}",
        first.err()
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the first checkout returned the failure of the open ahead"
    );
    let second = pool
        .checkout(&key, None, "boxtable-operator-migrate", &cancel)
        .await;
    assert!(matches!(second, Err(CheckoutError::Connect(_))));
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a later checkout connects again"
    );
    assert_eq!(counts.opened_total(), 0);
    assert_eq!(pool.sizes(), (0, 0));
    server.abort();
}

/// How many times the pool asked the server, through `proxy`, whether a session was clean before
/// keeping it.
fn clean_checks(proxy: &support::wire::Capture) -> usize {
    proxy
        .sent()
        .iter()
        .filter(|s| {
            s.sql
                .contains("statement_timestamp() = transaction_timestamp()")
        })
        .count()
}

/// Waits until the operator's sessions in the test database have ended (`what` names them), then
/// requires that no advisory lock is left.
async fn all_sessions_end(observer: &Client, what: &str) {
    wait_until_within(what, WAIT, || async {
        operator_sessions(observer).await.is_empty()
    })
    .await;
    assert_eq!(advisory_locks(observer).await, 0);
}

#[tokio::test]
async fn a_pool_that_keeps_none_lends_its_session_opened_ahead_and_closes_it_unchecked_after() {
    let db = support::fresh_db().await;
    let observer = db.connect().await;
    let proxy = support::wire::start(support::wire::upstream(&db.config())).await;
    let url = support::wire::through(&db.config(), proxy.addr);
    let (keeping, _) = pool(1);
    migrate(&keeping, &url, &outbox("outbox_kept").build())
        .await
        .unwrap();
    assert_eq!(clean_checks(&proxy), 1, "a session kept is checked first");
    assert_eq!(keeping.sizes(), (1, 1));

    let (pool, counts) = pool(1);
    let connection = Connection::parse(&url).unwrap();
    pool.open_ahead(&SessionKey::of(&connection), "boxtable-operator/test/ahead")
        .await;
    pool.keep_none();
    assert_eq!(pool.sizes(), (1, 1), "the session opened ahead stays idle");
    let outcome = migrate(&pool, &url, &outbox("outbox_once").build())
        .await
        .unwrap();
    assert_eq!(outcome.to_version, 8);
    assert_eq!(
        counts.opened_total(),
        1,
        "the session opened ahead was lent"
    );
    assert_eq!(pool.sizes(), (0, 0), "and closed when given back");
    assert_eq!(counts.closed(Closed::Shutdown), 1);
    assert_eq!(clean_checks(&proxy), 1, "without the check");
    drop(keeping);
    all_sessions_end(&observer, "both pools' sessions to end").await;
}
