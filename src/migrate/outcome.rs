//! What a run did: its [`Outcome`], with the [`RunPath`] it took (pure).

use std::time::Duration;

use super::{RunPath, drift};
use crate::lock::AcquireReport;

/// What a successful run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The path taken.
    pub path: RunPath,
    /// The version before the run (0 when there was no table).
    pub from_version: u32,
    /// The version after the run (above `target_version` when the table was already beyond it:
    /// tables are never downgraded).
    pub to_version: u32,
    /// The version the run aimed for (the plan's target, or the catalog's latest).
    pub target_version: u32,
    /// The latest version this operator's catalog knows for the table's kind. A `to_version` above
    /// it was recorded by a newer Brighter: the table is left as it is.
    pub known_latest: u32,
    /// The migration committed, but the session no longer held the advisory lock when it went to
    /// release it (`pg_advisory_unlock` returned false). The table is at `to_version`; the run is
    /// a success with a warning.
    pub lock_lost_after_commit: bool,
    /// The lock wait, when the lock was taken (an up-to-date check may skip it).
    pub lock: Option<AcquireReport>,
    /// The sessions found blocked in `pg_advisory_lock` on the lock just before this run released
    /// it (none when the run took no lock).
    pub blocked: crate::lock::Blocked,
    /// When the run started.
    pub started: jiff::Timestamp,
    /// How long the run took, lock wait included.
    pub duration: Duration,
    /// How the table compares with the shape of `to_version`, when it was checked (the
    /// controller checks after every successful pass; `None`: not checked).
    pub drift: Option<drift::DriftReport>,
}
