//! Benchmark item 1: Brighter lock-key derivation, in nanoseconds per key.
//!
//! `derive_key` is the pinned SHA-256 derivation alone; `for_table` adds building the lockKey text
//! from a validated table name (what every run does once); `for_table_hex` adds formatting the key
//! as 16 hex digits (what status and the `key` command print).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::{LockIdentity, derive_key};
use criterion::{Criterion, criterion_group, criterion_main};

fn lock_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock_key");
    group.bench_function("derive_key", |b| {
        b.iter(|| derive_key(black_box("BrighterMigration_public.outbox")))
    });
    let name = QualifiedName::parse(Some("Sales"), "Outbox").unwrap();
    group.bench_function("for_table", |b| {
        b.iter(|| LockIdentity::for_table(black_box(&name)).key())
    });
    group.bench_function("for_table_hex", |b| {
        b.iter(|| LockIdentity::for_table(black_box(&name)).key_hex())
    });
    group.finish();
}

criterion_group!(benches, lock_key);
criterion_main!(benches);
