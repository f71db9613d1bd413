//! What a resync costs with and without kept sessions: `TABLES` up-to-date outboxes on one
//! database, each converged once per wave (a no-op pass, as in a resync), `CONCURRENCY` at a
//! time like the controller's default `--concurrency`.
//!
//! - `kept`: the pool as the controller runs it (2 sessions per database, kept between passes).
//! - `new_per_pass`: a pool that keeps no idle session (`max_idle: 0`), so every pass opens and
//!   closes its own, as every pass did before the pool.
//!
//! Prints, per variant, the sessions opened per wave (from the pool's events, the numbers
//! `boxtable_db_sessions_opened_total` counts) and the wave's wall time. Needs `DATABASE_URL`
//! (`. scripts/pg.sh && pg_start`); without it the bench fails with that hint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use boxtable_operator::db::pool::{Closed, Opened, PoolEvents};
use boxtable_operator::db::{Connection, PoolSettings, SessionPool};
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::migrate::{BoxKind, Plan};
use boxtable_operator::pass::{self, Target};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

const TABLES: usize = 50;
const CONCURRENCY: usize = 4;
const WAVES: usize = 5;

#[derive(Default)]
struct Opens(AtomicU64);

impl PoolEvents for Opens {
    fn opened(&self, _: Opened) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn closed(&self, _: Closed) {}
    fn sizes(&self, _: usize, _: usize) {}
}

fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "resync_sessions needs DATABASE_URL: run `. scripts/pg.sh && pg_start` first (scripts/bench.sh does)"
        )
    })
}

fn plan(i: usize) -> Plan {
    let table = QualifiedName::parse(Some("resync_bench"), &format!("outbox_{i:03}")).unwrap();
    Plan::new(BoxKind::Outbox, table).with_lock_timeout(Duration::from_secs(30))
}

async fn wave(pool: &SessionPool, url: &str, plans: &[Plan]) {
    let cancel = CancellationToken::new();
    let connection = Connection::parse(url).unwrap();
    futures::stream::iter(plans.iter().enumerate())
        .map(|(i, plan)| {
            let (cancel, connection) = (&cancel, &connection);
            async move {
                let app = format!("boxtable-bench/resync/{i}");
                let target = Target {
                    connection,
                    application_name: &app,
                    source: Some("bench/db/connectionString"),
                };
                let step = pass::Migrate {
                    on_waiting: |_| (),
                    gate: || async { Ok(()) },
                };
                pass::run(pool, &target, plan, step, cancel).await.unwrap()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = database_url();
    let plans: Vec<Plan> = (0..TABLES).map(plan).collect();
    runtime.block_on(async {
        let (client, connection) = url
            .parse::<tokio_postgres::Config>()
            .unwrap()
            .connect(tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute("DROP SCHEMA IF EXISTS resync_bench CASCADE; CREATE SCHEMA resync_bench")
            .await
            .unwrap();
        // Create every table once, so each wave is a resync of up-to-date tables.
        wave(&SessionPool::new(PoolSettings::default()), &url, &plans).await;
        for (name, settings) in [
            ("kept", PoolSettings::default()),
            (
                "new_per_pass",
                PoolSettings {
                    max_idle: 0,
                    ..PoolSettings::default()
                },
            ),
        ] {
            let opens = Arc::new(Opens::default());
            let pool = SessionPool::with_events(settings, opens.clone());
            wave(&pool, &url, &plans).await;
            let first = opens.0.load(Ordering::Relaxed);
            let mut times = Vec::new();
            for _ in 0..WAVES {
                let before = opens.0.load(Ordering::Relaxed);
                let started = Instant::now();
                wave(&pool, &url, &plans).await;
                times.push(started.elapsed());
                let opened = opens.0.load(Ordering::Relaxed) - before;
                println!(
                    "{name}: resync of {TABLES} tables: {opened} sessions opened, {:.1} ms",
                    started.elapsed().as_secs_f64() * 1000.0
                );
            }
            times.sort();
            println!(
                "{name}: first wave opened {first}; median resync {:.1} ms ({:.2} ms per table)",
                times[WAVES / 2].as_secs_f64() * 1000.0,
                times[WAVES / 2].as_secs_f64() * 1000.0 / TABLES as f64
            );
        }
        client
            .batch_execute("DROP SCHEMA resync_bench CASCADE")
            .await
            .unwrap();
    });
}
