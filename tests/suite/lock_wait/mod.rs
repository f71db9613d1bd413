//! Brighter's advisory lock: its identity in `pg_locks`, waiting with backoff, concurrent runners,
//! the session under attack, and the bounded waits of a pass.

mod advisory_lock;
mod cancelled_at_commit;
mod concurrent_runs;
mod deadline;
mod lost_before_commit;
mod session_under_attack;
mod unlock_after_commit;
