//! What a run would do, read without the lock: `plan`, `migrate --dry-run` and a suspended
//! BoxTable's `status.pending`.

mod cli;
mod pending;
