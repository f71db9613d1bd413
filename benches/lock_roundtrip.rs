//! Benchmark item 2: one uncontended lock round trip (acquire + release) on an open session, per
//! iteration, against the PostgreSQL in `DATABASE_URL`.
//!
//! - `crate_api_current_thread`: `lock::acquire` (timeout 0, one try) then `lock::release` on a
//!   current-thread runtime, as `boxtable-operator migrate` runs them: the statements the session
//!   prepared when it opened, one Bind/Execute/Sync round trip each. This is the row compared
//!   with `pgbench -M prepared`.
//! - `prepared_current_thread`: the driver alone, the same two statements prepared by the bench
//!   and executed with `query_one`, to show what the crate's own code adds.
//! - `query_typed_current_thread`: the same SQL sent with `query_typed_one` (Parse/Bind/Execute/Sync
//!   on an unnamed statement every time), how the lock statements were sent before.
//! - `crate_api`: `lock::acquire` + `lock::release` on a multi-threaded runtime, as the controller
//!   (`boxtable-operator run`) runs them; the connection task and the caller can sit on different
//!   workers, so each message may need a cross-thread wake-up.
//!
//! Needs `DATABASE_URL` (`. scripts/pg.sh && pg_start`); without it the bench fails with that hint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use boxtable_operator::db::{Connection, Session};
use boxtable_operator::lock::{self, LockIdentity, TRY_LOCK_SQL, UNLOCK_SQL};
use criterion::{Criterion, criterion_group, criterion_main};
use tokio_postgres::types::Type;
use tokio_util::sync::CancellationToken;

fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "lock_roundtrip needs DATABASE_URL: run `. scripts/pg.sh && pg_start` first (scripts/bench.sh does)"
        )
    })
}

fn lock_roundtrip(c: &mut Criterion) {
    let connection = Connection::parse(&database_url()).unwrap();
    let identity = LockIdentity::from_lock_key("BrighterMigration_bench.roundtrip");
    let key = identity.key();
    let cancel = CancellationToken::new();
    let mut group = c.benchmark_group("lock_roundtrip");

    let local = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let session = local
        .block_on(Session::connect(&connection, "boxtable-bench"))
        .unwrap();
    group.bench_function("crate_api_current_thread", |b| {
        b.iter_custom(|iters| {
            local.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    lock::acquire(&session, &identity, Duration::ZERO, &cancel, |_| {})
                        .await
                        .unwrap();
                    lock::release(&session, &identity).await.unwrap();
                }
                start.elapsed()
            })
        })
    });
    let client = session.client();
    let (try_lock, unlock) = local.block_on(async {
        (
            client.prepare(TRY_LOCK_SQL).await.unwrap(),
            client.prepare(UNLOCK_SQL).await.unwrap(),
        )
    });
    group.bench_function("prepared_current_thread", |b| {
        b.iter_custom(|iters| {
            local.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let row = client.query_one(&try_lock, &[&key]).await.unwrap();
                    assert_eq!(row.get::<_, Option<bool>>(0), Some(true));
                    let row = client.query_one(&unlock, &[&key]).await.unwrap();
                    assert_eq!(row.get::<_, Option<bool>>(0), Some(true));
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("query_typed_current_thread", |b| {
        b.iter_custom(|iters| {
            local.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let row = client
                        .query_typed_one(TRY_LOCK_SQL, &[(&key, Type::INT8)])
                        .await
                        .unwrap();
                    assert_eq!(row.get::<_, Option<bool>>(0), Some(true));
                    let row = client
                        .query_typed_one(UNLOCK_SQL, &[(&key, Type::INT8)])
                        .await
                        .unwrap();
                    assert_eq!(row.get::<_, Option<bool>>(0), Some(true));
                }
                start.elapsed()
            })
        })
    });
    drop((try_lock, unlock));
    drop(session);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let session = runtime
        .block_on(Session::connect(&connection, "boxtable-bench"))
        .unwrap();
    group.bench_function("crate_api", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    lock::acquire(&session, &identity, Duration::ZERO, &cancel, |_| {})
                        .await
                        .unwrap();
                    lock::release(&session, &identity).await.unwrap();
                }
                start.elapsed()
            })
        })
    });
    group.finish();
    drop(session);
}

criterion_group!(benches, lock_roundtrip);
criterion_main!(benches);
