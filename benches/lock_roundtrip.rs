//! Benchmark item 2: one uncontended lock round trip (acquire + release) on an open session, per
//! iteration, against the PostgreSQL in `DATABASE_URL`.
//!
//! - `crate_api`: `lock::acquire` (timeout 0, one try) then `lock::release`: what the runner does.
//! - `query_typed`: the same two SQL texts sent with `query_typed_one` (Parse/Bind/Execute/Sync in
//!   one message batch, one network round trip per statement): the change suggested in
//!   BENCHMARKS.md, measured here without touching `src/`.
//! - `prepared`: the two statements prepared once and re-executed, like `pgbench -M prepared`.
//!
//! - `*_current_thread`: `crate_api` and `prepared` again on a current-thread runtime, where the
//!   connection task and the caller share one thread (no cross-thread wake-up per message).
//!
//! The main runtime is multi-threaded like the `boxtable-operator` binary's. Needs `DATABASE_URL`
//! (`. scripts/pg.sh && pg_start`); without it the bench fails with that hint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use boxtable_operator::db::{ConnectionSettings, Session};
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let settings = ConnectionSettings::parse(&database_url()).unwrap();
    let session = runtime
        .block_on(Session::connect(&settings, None, "boxtable-bench"))
        .unwrap();
    let client = session.client();
    let identity = LockIdentity::from_lock_key("BrighterMigration_bench.roundtrip");
    let key = identity.key();
    let cancel = CancellationToken::new();

    let mut group = c.benchmark_group("lock_roundtrip");
    group.bench_function("crate_api", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    lock::acquire(client, &identity, Duration::ZERO, &cancel, |_| {})
                        .await
                        .unwrap();
                    lock::release(client, &identity).await.unwrap();
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("query_typed", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
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
    let (try_lock, unlock) = runtime.block_on(async {
        (
            client.prepare(TRY_LOCK_SQL).await.unwrap(),
            client.prepare(UNLOCK_SQL).await.unwrap(),
        )
    });
    group.bench_function("prepared", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
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
    drop(session);

    let local = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let session = local
        .block_on(Session::connect(&settings, None, "boxtable-bench"))
        .unwrap();
    let client = session.client();
    group.bench_function("crate_api_current_thread", |b| {
        b.iter_custom(|iters| {
            local.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    lock::acquire(client, &identity, Duration::ZERO, &cancel, |_| {})
                        .await
                        .unwrap();
                    lock::release(client, &identity).await.unwrap();
                }
                start.elapsed()
            })
        })
    });
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
    group.finish();
    drop(session);
}

criterion_group!(benches, lock_roundtrip);
criterion_main!(benches);
