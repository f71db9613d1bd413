//! Bringing a Brighter box table to its target version under the advisory lock, exactly as
//! Brighter's own runner would, so an application and the operator can share a database.
//!
//! - `catalog`: the versions, their descriptions and DDL (pure).
//! - `detect`: what is in the database now (table, columns, payload type, history).
//! - `history`: Brighter's `__BrighterMigrationHistory` table.
//! - `shape`: the latest (fresh) table shapes and their DDL (pure).
//! - `runner`: the one transaction: lock, BEGIN, ensure history, re-detect, apply, COMMIT, unlock.
//! - `statements`: the statements a transaction runs, as values (the runner executes them,
//!   `migrate --dry-run` prints them).
//! - `drift`: how a table differs from the shape its recorded version implies (pure).
//! - `inspect`: reading a table's actual shape and comparing it (drift, read-only).
//! - `observe`: what a run would do, read-only (suspended resources and `migrate --dry-run`).
//! - `ownership`: which BoxTable owns a table (a record in the table's comment).
//! - `server`: which PostgreSQL majors are supported (13 and newer).
//! - `teardown`: dropping a table and its history rows (`deletionPolicy: Drop`).
//! - `error`: [`RunError`] and its bounded [`crate::reason::Reason`].

pub mod catalog;
pub mod detect;
pub mod drift;
mod error;
pub mod history;
pub mod inspect;
pub mod observe;
pub mod ownership;
pub mod runner;
pub mod server;
pub mod shape;
pub mod statements;
pub mod teardown;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ident::QualifiedName;
use crate::lock::AcquireReport;

pub use error::RunError;
pub use observe::{Observation, Preview, observe, preview};
pub use runner::run;
pub use teardown::{DropBlock, DropOutcome, DropRequest, DropVerdict, Rows, drop_box_table};

/// Which kind of box table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BoxKind {
    /// Brighter's outbox (latest V8).
    Outbox,
    /// Brighter's inbox (latest V2).
    Inbox,
}

/// The payload column type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload {
    /// `text` (default).
    Text,
    /// `bytea`.
    Binary,
    /// `json` (inbox only).
    Json,
    /// `jsonb` (inbox only).
    Jsonb,
}

/// Where the history table lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HistoryScope {
    /// `public."__BrighterMigrationHistory"`, whatever the box schema (Brighter's default).
    Global,
    /// The history table lives in the box table's own schema, seeded from `public`.
    PerSchema,
}

/// PostgreSQL timeouts for the migration transaction (`SET LOCAL`), distinct from the lock wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DdlTimeouts {
    /// `lock_timeout` for the DDL statements.
    pub lock_timeout: Option<Duration>,
    /// `statement_timeout` for the DDL statements.
    pub statement_timeout: Option<Duration>,
}

/// Everything a run needs to know about one box table, already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Outbox or inbox.
    pub kind: BoxKind,
    /// The resolved, lowercased table.
    pub table: QualifiedName,
    /// The payload column type.
    pub payload: Payload,
    /// Where the history table lives.
    pub history_scope: HistoryScope,
    /// The version to reach; `None` means the latest the catalog knows.
    pub target_version: Option<u32>,
    /// How long to wait for the advisory lock (zero = one attempt).
    pub lock_timeout: Duration,
    /// Timeouts for the DDL transaction.
    pub ddl: DdlTimeouts,
    /// The BoxTable running the plan: a run records it as the table's owner and refuses a table
    /// another BoxTable owns. `None` (the `migrate` command) neither checks nor records ownership,
    /// as a Brighter application would not.
    pub owner: Option<ownership::Owner>,
}

/// Which path a run took (also as `status.lastRun.path` and `status.pending.path` show it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RunPath {
    /// No table: the latest shape was created with one history row.
    Fresh,
    /// A table without history: its version was detected and stamped, then later steps applied.
    Bootstrap,
    /// History rows exist: later steps were applied.
    Normal,
    /// Nothing to do.
    UpToDate,
}

impl RunPath {
    /// The string shown in status (`Fresh`, `Bootstrap`, `Normal`, `UpToDate`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunPath::Fresh => "Fresh",
            RunPath::Bootstrap => "Bootstrap",
            RunPath::Normal => "Normal",
            RunPath::UpToDate => "UpToDate",
        }
    }
}

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
