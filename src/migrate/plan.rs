//! [`Plan`]: everything a run needs to know about one box table, valid by construction, with the
//! lock identity and the history table derived once (pure).

use std::time::Duration;

use super::history::HistoryTable;
use super::ownership;
use super::{BoxKind, HistoryScope, Payload};
use crate::ident::QualifiedName;
use crate::lock::LockIdentity;

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
/// knows, so a run never checks either again. The lock identity and the history table are derived
/// once, here, from the table (which a plan never changes) and the history scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    kind: BoxKind,
    table: QualifiedName,
    lock: LockIdentity,
    payload: Payload,
    history_scope: HistoryScope,
    history: HistoryTable,
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
            history: HistoryTable::for_table(&table, HistoryScope::Global),
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
        self.history = HistoryTable::for_table(&self.table, scope);
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

    /// Where the table's history rows live (derived from the table and the history scope).
    pub fn history(&self) -> &HistoryTable {
        &self.history
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
