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
//! - `index_name`: refusing a replay index whose name (cut to 63 bytes) is already taken.
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
mod index_name;
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
use crate::lock::{AcquireReport, LockIdentity};

pub use error::RunError;
pub use observe::{Observation, Preview, observe, preview};
pub use runner::run;
pub use teardown::{DropBlock, DropOutcome, DropRequest, DropVerdict, Rows, drop_box_table};

// These three are also the CRD's `spec.box`, `spec.payload` and `spec.historyScope`: their doc
// comments are the schema's descriptions (the golden CRD test pins them).

/// Which kind of Brighter box table.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum BoxKind {
    /// Brighter's outbox (messages to dispatch).
    Outbox,
    /// Brighter's inbox (commands already handled).
    Inbox,
}

/// The payload column type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Payload {
    /// `text`.
    #[default]
    Text,
    /// `bytea`.
    Binary,
    /// `json` (inbox only).
    Json,
    /// `jsonb` (inbox only).
    Jsonb,
}

/// Where Brighter's `__BrighterMigrationHistory` table lives.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum HistoryScope {
    /// In `public`, whatever the box schema (Brighter's default).
    #[default]
    Global,
    /// In the box table's own schema.
    PerSchema,
}

/// PostgreSQL timeouts for the migration transaction (`SET LOCAL`), distinct from the lock wait.
/// The default sets `lock_timeout` to [`DEFAULT_DDL_LOCK_TIMEOUT`] and leaves `statement_timeout`
/// to the role's or server's setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdlTimeouts {
    /// `lock_timeout` for the DDL statements.
    pub lock_timeout: Option<Duration>,
    /// `statement_timeout` for the DDL statements.
    pub statement_timeout: Option<Duration>,
}

/// How long a migration statement waits for a table lock when the spec sets no
/// `ddl.lockTimeout`. Without a limit, a transaction that holds a lock on the table (an open
/// `BEGIN` in an application, a long report) would keep the migration, and every query on the
/// table queued behind its `ALTER TABLE`, waiting for as long as it lasts. Ten seconds is long
/// enough for the short transactions of a Brighter application to finish; a longer holder fails
/// the run (rolled back, retried with backoff) instead of stalling the table.
pub const DEFAULT_DDL_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for DdlTimeouts {
    fn default() -> Self {
        Self {
            lock_timeout: Some(DEFAULT_DDL_LOCK_TIMEOUT),
            statement_timeout: None,
        }
    }
}

/// Why a [`Plan`] cannot be built: the two combinations the catalog does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPlan {
    /// `Json` or `Jsonb` was asked for an outbox.
    #[error("payload {payload:?} is for an Inbox only; an Outbox uses Text or Binary")]
    PayloadNotForOutbox {
        /// The payload asked for.
        payload: Payload,
    },
    /// The target version is outside the versions the catalog knows for the box.
    #[error(
        "targetVersion {requested} is outside 1 to {latest}, the versions known for an {kind:?}"
    )]
    TargetVersionOutOfRange {
        /// The box.
        kind: BoxKind,
        /// The version asked for.
        requested: u32,
        /// The latest version known.
        latest: u32,
    },
}

/// Everything a run needs to know about one box table.
///
/// Valid by construction: the payload suits the box and the target is a version the catalog
/// knows, so a run never checks either again. The lock identity is derived once, here, from the
/// table (which a plan never changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    kind: BoxKind,
    table: QualifiedName,
    lock: LockIdentity,
    payload: Payload,
    history_scope: HistoryScope,
    target: u32,
    lock_timeout: Duration,
    ddl: DdlTimeouts,
    owner: Option<ownership::Owner>,
}

impl Plan {
    /// The plan for `table` of box `kind`: text payload, global history, the latest version, one
    /// lock attempt without waiting, no DDL timeouts, no owner.
    pub fn new(kind: BoxKind, table: QualifiedName) -> Self {
        Self {
            kind,
            lock: LockIdentity::for_table(&table),
            table,
            payload: Payload::Text,
            history_scope: HistoryScope::Global,
            target: kind.latest(),
            lock_timeout: Duration::ZERO,
            ddl: DdlTimeouts::default(),
            owner: None,
        }
    }

    /// With payload column type `payload`.
    ///
    /// # Errors
    /// [`InvalidPlan::PayloadNotForOutbox`] for `Json` or `Jsonb` on an outbox.
    pub fn with_payload(mut self, payload: Payload) -> Result<Self, InvalidPlan> {
        if !self.kind.accepts(payload) {
            return Err(InvalidPlan::PayloadNotForOutbox { payload });
        }
        self.payload = payload;
        Ok(self)
    }

    /// Aiming for `version` (`None`: the latest the catalog knows).
    ///
    /// # Errors
    /// [`InvalidPlan::TargetVersionOutOfRange`] for 0 or a version above the catalog's latest.
    pub fn with_target_version(mut self, version: Option<u32>) -> Result<Self, InvalidPlan> {
        let latest = self.kind.latest();
        self.target = match version {
            None => latest,
            Some(requested) if (1..=latest).contains(&requested) => requested,
            Some(requested) => {
                return Err(InvalidPlan::TargetVersionOutOfRange {
                    kind: self.kind,
                    requested,
                    latest,
                });
            }
        };
        Ok(self)
    }

    /// Waiting up to `timeout` for the advisory lock (zero: one attempt).
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// With the history table in `scope`.
    pub fn with_history_scope(mut self, scope: HistoryScope) -> Self {
        self.history_scope = scope;
        self
    }

    /// With DDL transaction timeouts `ddl`.
    pub fn with_ddl(mut self, ddl: DdlTimeouts) -> Self {
        self.ddl = ddl;
        self
    }

    /// Run as `owner`: a run records it as the table's owner and refuses a table another
    /// BoxTable owns. Without one (the `migrate` command) a run neither checks nor records
    /// ownership, as a Brighter application would not.
    pub fn with_owner(mut self, owner: ownership::Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Outbox or inbox.
    pub fn kind(&self) -> BoxKind {
        self.kind
    }

    /// The resolved, lowercased table.
    pub fn table(&self) -> &QualifiedName {
        &self.table
    }

    /// Brighter's advisory lock for the table.
    pub fn lock(&self) -> &LockIdentity {
        &self.lock
    }

    /// The payload column type.
    pub fn payload(&self) -> Payload {
        self.payload
    }

    /// Where the history table lives.
    pub fn history_scope(&self) -> HistoryScope {
        self.history_scope
    }

    /// The version to reach (the one asked for, else the latest the catalog knows).
    pub fn target(&self) -> u32 {
        self.target
    }

    /// How long to wait for the advisory lock (zero: one attempt).
    pub fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    /// Timeouts for the DDL transaction.
    pub fn ddl(&self) -> DdlTimeouts {
        self.ddl
    }

    /// The BoxTable running the plan, if any (see [`Plan::with_owner`]).
    pub fn owner(&self) -> Option<&ownership::Owner> {
        self.owner.as_ref()
    }
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
