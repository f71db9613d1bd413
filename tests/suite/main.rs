//! Every integration test of the operator in one test binary: one folder per behaviour (the lock
//! wait in `lock_wait/`, deletion in `deletion/`, drift in `drift/`, Secrets in `secrets/`, the plan
//! in `plan/`, ...), one file per angle on it (`drift/controller.rs`, `drift/database.rs`), each
//! opening with the real parts it needs, and the fixtures they share under [`support`] (one
//! BoxTable builder, one `wait_until`, one way to read SQL, one operator-process harness). One binary means one build and one link instead of one per file, one set of
//! fixtures that rustc checks for dead code as a whole, and tests from every area running side by
//! side. The few that change what all the others share (the soak's replicas electing a leader
//! through the shared Lease, the restart of the one API server, a rule taken out of the
//! cluster-wide CRD, the operator installed cluster-wide as Pods on the node) run after the rest,
//! one at a time; see `scripts/test.sh`.
// Fixture helpers outside #[test] functions fail loudly too; clippy.toml only covers #[test] bodies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod apply;
mod bounds;
mod cli;
mod connections;
mod crd;
mod deletion;
mod demo;
mod drift;
mod identity;
mod install;
mod leadership;
mod lock_wait;
mod node;
mod observability;
mod plan;
mod resilience;
mod secrets;
mod soak;
mod status;
