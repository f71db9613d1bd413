//! The lock-free "already up to date" read sees the table and its history from one snapshot: a
//! winner that commits the table together with its history row while a reader is between its
//! reads never makes the reader report history without a table (`TableMissing`).
//!
//! The window is opened deterministically by holding the history table locked, so the reader's
//! read of it waits, and committing the winner's table and history row during that wait; and
//! statistically by racing `migrate` processes on fresh tables with every core kept busy.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use boxtable_operator::migrate::shape::fresh_statements;
use boxtable_operator::migrate::{self, BoxKind, Payload, RunPath};
use boxtable_operator::report::chain;
use tokio_postgres::Client;

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::migrate::*;

/// Generous: the machine running the suite may be busy.
const DEADLINE: Duration = Duration::from_secs(120);

const HISTORY: &str = "\"public\".\"__BrighterMigrationHistory\"";

/// Holds Brighter's lock for `table`, opens a transaction that locks the history table against
/// every reader, and returns the session ready for [`commit_table_at_v8`].
async fn winner_blocking_history_reads(db: &support::TestDb, table: &str) -> Client {
    let winner = db.connect().await;
    support::reliability::hold_brighter_lock(&winner, table).await;
    winner
        .batch(&format!(
            "BEGIN; LOCK TABLE {HISTORY} IN ACCESS EXCLUSIVE MODE"
        ))
        .await;
    winner
}

/// A database whose history table exists (table `Other` is at V8), a client on it, and a winner
/// ([`winner_blocking_history_reads`]) of `outbox`'s lock holding the history table against
/// every reader.
async fn history_held_by_a_winner_of_outbox() -> (Arc<support::TestDb>, Client, Client) {
    let db = Arc::new(support::fresh_db().await);
    run(&db, &outbox("Other").build()).await.unwrap();
    let client = db.connect().await;
    let winner = winner_blocking_history_reads(&db, "outbox").await;
    (db, client, winner)
}

/// Lets the winner commit `outbox` at V8 once a reader is queued on the history table, and
/// returns what `task` (the `what` under test) came to, failing the test unless it succeeded
/// within [`DEADLINE`].
async fn finished_once_the_winner_commits<T>(
    what: &str,
    client: &Client,
    winner: &Client,
    task: tokio::task::JoinHandle<Result<T, migrate::RunError>>,
) -> T {
    wait_for_a_reader_blocked_on_history(client).await;
    commit_table_at_v8(winner, "outbox").await;
    tokio::time::timeout(DEADLINE, task)
        .await
        .unwrap_or_else(|_| panic!("the {what} did not finish within {DEADLINE:?}"))
        .unwrap()
        .unwrap_or_else(|e| panic!("the {what} failed: {}", chain(&e)))
}

/// In the winner's open transaction: creates `table` at V8 with its history row, commits, and
/// releases Brighter's lock, as a Brighter runner does.
async fn commit_table_at_v8(winner: &Client, table: &str) {
    let name = QualifiedName::parse(None, table).unwrap();
    for sql in fresh_statements(BoxKind::Outbox, Payload::Text, &name, 8) {
        winner.batch(&sql).await;
    }
    winner
        .execute(
            &format!(
                "INSERT INTO {HISTORY} (\"MigrationVersion\", \"SchemaName\", \"BoxTableName\", \"Description\") \
                 VALUES (8, 'public', $1, 'fresh install at V8')"
            ),
            &[&table],
        )
        .await
        .unwrap();
    winner.batch("COMMIT").await;
    let key = LockIdentity::for_table(&name).key();
    winner
        .query_one("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
}

/// Waits until some session is queued for a lock on the history table.
async fn wait_for_a_reader_blocked_on_history(client: &Client) {
    let started = Instant::now();
    loop {
        let waiting: i64 = client
            .value(
                &format!(
                    "SELECT count(*) FROM pg_locks WHERE relation = '{HISTORY}'::regclass AND NOT granted"
                ),
                &[],
            ).await;
        if waiting > 0 {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no reader queued on the history table within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_winner_committing_between_the_readers_reads_leaves_the_reader_up_to_date_without_the_lock()
 {
    let (db, client, winner) = history_held_by_a_winner_of_outbox().await;

    let reader = {
        let db = db.clone();
        tokio::spawn(async move { run(&db, &outbox("Outbox").build()).await })
    };
    let outcome = finished_once_the_winner_commits("reader", &client, &winner, reader).await;

    assert_eq!(outcome.path, RunPath::UpToDate);
    assert_eq!(outcome.to_version, 8);
    assert!(
        outcome.lock.is_none(),
        "concluded up to date from one snapshot, without taking the lock: {outcome:?}"
    );
    assert_eq!(
        history_versions(&client, "public")
            .await
            .into_iter()
            .filter(|(v, _)| *v == 8)
            .count(),
        2,
        "one V8 row for each table, none added by the reader"
    );
    assert_eq!(advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn an_observation_between_the_catalog_and_the_history_sees_one_snapshot() {
    let (db, client, winner) = history_held_by_a_winner_of_outbox().await;

    let observer = {
        let db = db.clone();
        tokio::spawn(async move {
            let session = session(&db).await;
            migrate::observe(&session, &outbox("Outbox").build()).await
        })
    };
    let seen = finished_once_the_winner_commits("observation", &client, &winner, observer).await;

    // The snapshot was taken before the winner committed: no table and no history, consistently.
    assert_eq!(seen.would, RunPath::Fresh, "{seen:?}");
    assert_eq!(seen.current_version, 0, "{seen:?}");
}

/// Keeps every core busy until dropped.
struct BusyCores {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyCores {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for BusyCores {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Rounds of the process race; `BOXTABLE_RACE_ROUNDS` runs more (or fewer).
fn race_rounds() -> usize {
    std::env::var("BOXTABLE_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

#[tokio::test]
async fn eight_migrate_processes_racing_on_fresh_tables_with_busy_cores_all_succeed() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let rounds = race_rounds();
    let busy = BusyCores::start();
    let mut failures = Vec::new();
    for round in 0..rounds {
        let manifest = dir.path().join(format!("round-{round}.yaml"));
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: race-{round}\n\
                 spec:\n  box: Outbox\n  table: race_{round}\n  database:\n    secretRef:\n      name: db\n"
            ),
        )
        .unwrap();
        let children: Vec<_> = (0..8)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_boxtable-operator"))
                    .arg("migrate")
                    .arg("-f")
                    .arg(&manifest)
                    .arg("--database-url")
                    .arg(&db.url)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            if !out.status.success() {
                failures.push(format!(
                    "round {round}: {}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    drop(busy);

    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        rounds * 8,
        failures.join("\n")
    );
    let client = db.connect().await;
    assert_eq!(history(&client, "public").await.len(), rounds);
    assert_eq!(advisory_locks(&client).await, 0);
}
