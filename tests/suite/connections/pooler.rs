//! Through PgBouncer: in transaction pooling mode the operator sees that its statements move between
//! backends and refuses before taking the lock (LockLost), leaving no lock behind; in session
//! pooling mode it migrates normally.

use crate::support;
use crate::support::Sql;
use crate::support::advisory_locks;
use crate::support::reliability::pooler::Pgbouncer;
use crate::support::reliability::*;

const V1_OUTBOX: &str = "CREATE TABLE public.outbox (Id BIGSERIAL PRIMARY KEY, \
    MessageId UUID UNIQUE NOT NULL, Topic VARCHAR(255), MessageType VARCHAR(32), \
    Timestamp timestamptz, HeaderBag TEXT, Body TEXT)";

/// Makes the pooler open three server connections, so that later transactions are spread over
/// several backends: three clients each hold a transaction open (which pins a server connection)
/// until all three are open, whatever the timing.
async fn warm_up(url: &str) {
    let clients = futures::future::join_all((0..3).map(|_| support::connect(url))).await;
    let mut pids = Vec::new();
    for client in &clients {
        client.batch("BEGIN").await;
        // Simple protocol: no prepared statement is left on the pooled server connection.
        let rows = client
            .simple_query("SELECT pg_backend_pid()")
            .await
            .unwrap();
        let pid = rows
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .unwrap();
        pids.push(pid);
    }
    for client in &clients {
        client.batch("COMMIT").await;
    }
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 3, "three open transactions on three backends");
}

/// A V1 outbox behind a PgBouncer pooling in `mode`, and `boxtable-operator migrate` of it run
/// through the pooler.
async fn migrate_behind(mode: &str) -> (support::TestDb, Pgbouncer, MigrateRun) {
    let (db, bouncer, url) = outbox_behind(mode).await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    let run = migrate(&manifest, &url).await;
    (db, bouncer, run)
}

async fn outbox_behind(mode: &str) -> (support::TestDb, Pgbouncer, String) {
    let db = support::fresh_db().await;
    db.connect().await.batch(V1_OUTBOX).await;
    let upstream = db.config();
    let bouncer = tokio::task::spawn_blocking({
        let upstream = upstream.clone();
        let mode = mode.to_owned();
        move || Pgbouncer::start(&mode, &upstream)
    })
    .await
    .unwrap();
    let url = bouncer.url(&upstream, &db.name);
    warm_up(&url).await;
    (db, bouncer, url)
}

#[tokio::test]
async fn transaction_pooling_is_detected_and_refused_as_lock_lost_leaving_no_lock() {
    let (db, bouncer, run) = migrate_behind("transaction").await;

    run.assert_failed_with(
        "LockLost",
        &[
            "connection pooler detected",
            "BrighterMigration_public.outbox",
        ],
    );
    let direct = db.connect().await;
    assert_eq!(
        advisory_locks(&direct).await,
        0,
        "no lock left on any backend"
    );
    assert_eq!(recorded_version(&direct, "outbox").await, None);
    assert_eq!(column_names(&direct, "outbox").await, outbox_columns_at(1));
    drop(bouncer);
}

#[tokio::test]
async fn session_pooling_migrates_normally() {
    let (db, bouncer, run) = migrate_behind("session").await;

    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.reason(), "Migrated", "{run:?}");
    let direct = db.connect().await;
    assert_eq!(recorded_version(&direct, "outbox").await, Some(8));
    assert_eq!(column_names(&direct, "outbox").await, outbox_columns_at(8));
    assert_eq!(advisory_locks(&direct).await, 0);
    drop(bouncer);
}
