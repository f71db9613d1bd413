//! The fixed reads a kept session runs by name, against a real PostgreSQL: a session's first pass
//! sends them unnamed (a one-table `migrate` prepares nothing), the pool prepares them when it
//! lends the session again, and from then on they execute by name; a prepared read still sees a
//! table dropped and created again under it; lending a session never queues behind a lock on a
//! table its reads name.

use boxtable_operator::db::Connection;
use boxtable_operator::migrate::{RunError, RunPath};
use boxtable_operator::pass::{self, PassError, Target};
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::Sql;
use crate::support::migrate::outbox;
use crate::support::reliability::WAIT;
use crate::support::wait::wait_until;
use crate::support::wire::Sent;

use super::pool::{migrate, pool};

/// Executions of the statements whose text contains `needle`: (unnamed, by name).
fn executions(sent: &[Sent], needle: &str) -> (usize, usize) {
    let matching = sent.iter().filter(|s| s.sql.contains(needle));
    let (named, unnamed): (Vec<&Sent>, Vec<&Sent>) =
        matching.partition(|s| !s.statement.is_empty());
    (unnamed.len(), named.len())
}

#[tokio::test]
async fn a_kept_session_runs_its_reads_by_name_from_its_second_pass_on() {
    let db = support::fresh_db().await;
    let proxy = support::wire::start(support::wire::upstream(&db.config())).await;
    let url = support::wire::through(&db.config(), proxy.addr);
    let (pool, counts) = pool(1);
    for table in ["outbox_a", "outbox_b", "outbox_c", "outbox_d"] {
        let outcome = migrate(&pool, &url, &outbox(table).build()).await.unwrap();
        assert_eq!(outcome.path, RunPath::Fresh, "{table}");
    }
    assert_eq!(counts.opened_total(), 1, "one session for the four passes");
    let sent = proxy.sent();
    // Each pass of a fresh table: the lock-free read of catalog, history and comment once, the
    // index read twice (before the lock and after the commit), the count of blocked sessions
    // once, the lock check before COMMIT once, the index-name check and the history's highest
    // version under the lock once each. The first pass sends each unnamed; the pool
    // prepares them as it lends the session for the second, which runs them by name.
    for (needle, per_pass) in [
        ("pg_catalog.pg_description", 1),
        ("pg_catalog.pg_index x JOIN", 2),
        ("pg_locks l JOIN pg_stat_activity", 1),
        ("granted AND pid = pg_backend_pid()", 1),
        ("LEFT JOIN pg_catalog.pg_namespace tn", 1),
        ("SELECT MAX(\"MigrationVersion\") FROM \"public\"", 1),
    ] {
        assert_eq!(
            executions(&sent, needle),
            (per_pass, 3 * per_pass),
            "{needle}: (unnamed, by name) over four passes"
        );
    }
    // The lending check itself is prepared at the second lending and runs by name at the third
    // and fourth.
    assert_eq!(executions(&sent, "set_config('application_name'"), (1, 2));
}

#[tokio::test]
async fn a_single_pass_prepares_nothing_beyond_the_lock_statements() {
    let db = support::fresh_db().await;
    let proxy = support::wire::start(support::wire::upstream(&db.config())).await;
    let url = support::wire::through(&db.config(), proxy.addr);
    let (pool, _) = pool(1);
    migrate(&pool, &url, &outbox("outbox").build())
        .await
        .unwrap();
    let sent = proxy.sent();
    let named: Vec<&str> = sent
        .iter()
        .filter(|s| !s.statement.is_empty())
        .map(|s| s.sql.as_str())
        .collect();
    assert_eq!(
        named,
        [
            "SELECT pg_try_advisory_lock($1::int8)",
            "SELECT pg_advisory_unlock($1::int8)"
        ],
        "only the lock statements prepared when the session opened run by name"
    );
}

#[tokio::test]
async fn a_prepared_read_sees_the_history_and_the_table_dropped_and_created_again() {
    let db = support::fresh_db().await;
    let observer = db.connect().await;
    let (pool, counts) = pool(1);
    let plan = outbox("outbox").build();
    let first = migrate(&pool, &db.url, &plan).await.unwrap();
    assert_eq!((first.path, first.to_version), (RunPath::Fresh, 8));
    // The second lending prepares the reads; this pass answers from them.
    let second = migrate(&pool, &db.url, &plan).await.unwrap();
    assert_eq!((second.path, second.to_version), (RunPath::UpToDate, 8));
    observer
        .batch_execute(
            "DROP TABLE public.outbox; DROP TABLE public.\"__BrighterMigrationHistory\"; \
             CREATE TABLE public.\"__BrighterMigrationHistory\" ( \
               \"MigrationVersion\" INT NOT NULL, \
               \"SchemaName\" VARCHAR(256) NOT NULL DEFAULT 'public', \
               \"BoxTableName\" VARCHAR(256) NOT NULL, \
               \"Description\" VARCHAR(512) NOT NULL, \
               \"AppliedAt\" TIMESTAMPTZ NOT NULL DEFAULT NOW(), \
               PRIMARY KEY (\"SchemaName\", \"BoxTableName\", \"MigrationVersion\"))",
        )
        .await
        .unwrap();
    // The kept reads name a table that is new now, with no rows: the table is missing and has no
    // history, so it is created again from nothing, not reported up to date from stale plans.
    let third = migrate(&pool, &db.url, &plan).await.unwrap();
    assert_eq!(
        (third.path, third.from_version, third.to_version),
        (RunPath::Fresh, 0, 8)
    );
    let recorded: Vec<i32> = observer
        .value(
            "SELECT array_agg(\"MigrationVersion\") FROM public.\"__BrighterMigrationHistory\" \
             WHERE \"BoxTableName\" = 'outbox'",
            &[],
        )
        .await;
    assert_eq!(recorded, [8], "the new history records the table again");
    // Dropping the history alone: the kept read of `public`'s history finds it gone, and the
    // locked path creates it again and records the table at its version.
    observer
        .batch_execute("DROP TABLE public.\"__BrighterMigrationHistory\"")
        .await
        .unwrap();
    let fourth = migrate(&pool, &db.url, &plan).await.unwrap();
    assert_eq!(
        (fourth.path, fourth.from_version, fourth.to_version),
        (RunPath::Bootstrap, 8, 8),
        "found without its history, its version detected and recorded again"
    );
    assert_eq!(
        counts.opened_total(),
        1,
        "all four passes on the kept session"
    );
}

#[tokio::test]
async fn lending_a_session_does_not_queue_behind_a_lock_on_a_table_its_reads_name() {
    let db = support::fresh_db().await;
    let observer = db.connect().await;
    let (pool, counts) = pool(1);
    let plan = outbox("outbox").build();
    migrate(&pool, &db.url, &plan).await.unwrap();
    // The session ran its reads unnamed; the next lending prepares them, and preparing the read of
    // `public`'s history needs a lock on it, which this transaction holds.
    let blocker = db.connect().await;
    blocker
        .batch_execute(
            "BEGIN; LOCK TABLE public.\"__BrighterMigrationHistory\" IN ACCESS EXCLUSIVE MODE",
        )
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let connection = Connection::parse(&db.url).unwrap();
    let target = Target {
        connection: &connection,
        application_name: "boxtable-operator/test/outbox",
        source: None,
    };
    let step = pass::Migrate {
        on_waiting: |_| (),
        gate: || async { Ok(()) },
    };
    let pass = pass::run(&pool, &target, &plan, step, &cancel);
    let stop = async {
        // The pass's own read before the lock now queues behind the table lock, where a pass can
        // be stopped.
        wait_until("the pass to queue behind the history's lock", || async {
            let waiting: i64 = observer
                .value(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE application_name LIKE 'boxtable-operator/%' AND wait_event_type = 'Lock'",
                    &[],
                )
                .await;
            waiting > 0
        })
        .await;
        cancel.cancel();
    };
    // Without a bound on the prepares, the lending itself would wait for the lock, where
    // cancelling does not reach: the pass would end only once the blocker does.
    let (stopped, ()) = tokio::time::timeout(WAIT, async { tokio::join!(pass, stop) })
        .await
        .expect("the pass ended once cancelled, with the table lock still held");
    match stopped {
        Err(PassError::Run {
            source: RunError::Lock(_) | RunError::Cancelled { .. },
            ..
        }) => {}
        other => panic!("expected the pass to stop as cancelled, got {other:?}"),
    }
    blocker.batch_execute("ROLLBACK").await.unwrap();
    let after = migrate(&pool, &db.url, &plan).await.unwrap();
    assert_eq!((after.path, after.to_version), (RunPath::UpToDate, 8));
    assert_eq!(
        counts.opened_total(),
        2,
        "the cancelled pass's session was closed and a new one opened"
    );
}
