//! Why a migration run, observation or drop failed, and the bounded reason each failure maps to.

use tokio_postgres::error::SqlState;

use crate::lock::LockError;
use crate::reason::Reason;

/// SQLSTATEs that end the session: `admin_shutdown` (`pg_terminate_backend`, a fast shutdown),
/// `crash_shutdown` and `cannot_connect_now`; and class 08, connection exceptions.
const SESSION_ENDING: [SqlState; 3] = [
    SqlState::ADMIN_SHUTDOWN,
    SqlState::CRASH_SHUTDOWN,
    SqlState::CANNOT_CONNECT_NOW,
];

/// The class of SQLSTATEs that are connection exceptions (`08xxx`).
const CONNECTION_EXCEPTION_CLASS: &str = "08";

/// Whether `source` means the session is gone (so a step did not fail on its own merits).
fn is_session_lost(source: &tokio_postgres::Error, code: Option<&SqlState>) -> bool {
    source.is_closed()
        || code.is_some_and(|c| {
            SESSION_ENDING.contains(c) || c.code().starts_with(CONNECTION_EXCEPTION_CLASS)
        })
}

/// A failed run. Messages are lowercase and never repeat their source; log with
/// [`crate::report::chain`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The operator's own catalog has a gap (a build defect, not a database problem).
    #[error("migration catalog is broken")]
    Catalog(#[source] super::catalog::CatalogGap),
    /// The table exists but lacks the column that marks a Brighter box table.
    #[error("table {table} is not a brighter {kind}: it has no {marker} column")]
    NotABrighterTable {
        /// The table.
        table: String,
        /// `outbox` or `inbox`.
        kind: &'static str,
        /// The missing marker column.
        marker: &'static str,
    },
    /// The table's columns match no known version (some V1 columns are missing).
    #[error(
        "table {table} matches no known brighter {kind} version: V1 columns {missing} are missing"
    )]
    UnknownSchemaVersion {
        /// The table.
        table: String,
        /// `outbox` or `inbox`.
        kind: &'static str,
        /// The missing V1 columns, comma-separated.
        missing: String,
    },
    /// The history's highest version for the table is zero or negative, which no Brighter writes.
    #[error(
        "history for {table} records V{history_version}, which is not a brighter {kind} version: fix or delete that history row"
    )]
    InvalidHistoryVersion {
        /// The table.
        table: String,
        /// `outbox` or `inbox`.
        kind: &'static str,
        /// The highest version in the history.
        history_version: i32,
    },
    /// History rows remain for a table that no longer exists.
    #[error(
        "table {table} does not exist but {history_table} records it at V{history_version}: delete those history rows or recreate the table"
    )]
    TableMissing {
        /// The table.
        table: String,
        /// The history table holding the rows.
        history_table: String,
        /// The highest version in the history.
        history_version: i32,
    },
    /// The payload column's type differs from the requested payload mode.
    #[error(
        "column {column} of {table} is {found} but payload mode {asked:?} needs {expected}; payload mode is never migrated"
    )]
    PayloadMismatch {
        /// The table.
        table: String,
        /// The payload column.
        column: &'static str,
        /// The type found (as `format_type` names it).
        found: String,
        /// The mode asked for.
        asked: super::Payload,
        /// The type that mode needs.
        expected: &'static str,
    },
    /// The box table's schema does not exist.
    #[error(
        "schema {schema} does not exist; the operator does not create schemas: create it first"
    )]
    SchemaNotFound {
        /// The schema.
        schema: String,
    },
    /// The role lacks a privilege.
    #[error("permission denied while {operation} for {table}")]
    PermissionDenied {
        /// What was being done.
        operation: &'static str,
        /// The table.
        table: String,
        /// The database error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The server is a read-only hot standby.
    #[error(
        "the database is read-only (a hot standby); point the connection at the primary to migrate {table}"
    )]
    ReadOnlyDatabase {
        /// The table.
        table: String,
    },
    /// The server's major version is older than the oldest this operator supports.
    #[error(
        "PostgreSQL {version} is not supported for {table}: the operator needs PostgreSQL {minimum} or newer"
    )]
    UnsupportedPostgres {
        /// The table.
        table: String,
        /// The server's version (`12.19`).
        version: String,
        /// The oldest supported major.
        minimum: u32,
    },
    /// Taking, checking or releasing the advisory lock failed (the message names the lockKey).
    #[error(transparent)]
    Lock(Box<LockError>),
    /// A migration statement failed.
    #[error("migration V{version} ({description}) of {table} failed")]
    MigrationFailed {
        /// The table.
        table: String,
        /// The version being applied.
        version: u32,
        /// Its description.
        description: String,
        /// The database error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A statement of the transaction waited `lock_timeout` for a lock on the table that another
    /// transaction holds, and gave up; the transaction was rolled back.
    #[error(
        "{operation} for {table} waited {} for a lock on the table that another transaction holds (lock_timeout, spec.ddl.lockTimeout) and was rolled back; it is retried: end that transaction, or raise spec.ddl.lockTimeout",
        crate::duration::format_duration(*waited)
    )]
    TableLockTimeout {
        /// What was being done (`applying migration V5 (...)`).
        operation: String,
        /// The table.
        table: String,
        /// The `lock_timeout` that ran out.
        waited: std::time::Duration,
        /// The database error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Another query of the run failed.
    #[error("{operation} for {table} failed")]
    Query {
        /// What was being done.
        operation: &'static str,
        /// The table.
        table: String,
        /// The database error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The session ended under the run: terminated by another backend, a server shutdown or restart,
    /// or a broken connection. The server rolled back the transaction and freed the lock.
    #[error(
        "the session was lost while {operation} for {table}; the server rolled back the transaction and freed the advisory lock"
    )]
    SessionLost {
        /// What was being done.
        operation: &'static str,
        /// The table.
        table: String,
        /// The driver or database error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The name of the replay index a step would create is already held in the table's schema
    /// (Brighter's name cut to 63 bytes, the same for two long table names), so
    /// `CREATE INDEX IF NOT EXISTS` would skip it and leave the table without the index.
    #[error(
        "the replay index of {table} cannot be created: its name {index} is already taken by {holder}, and CREATE INDEX IF NOT EXISTS would skip it; {remedy}, or use a table name of at most 47 bytes, which PostgreSQL keeps whole in the index name"
    )]
    IndexNameTaken {
        /// The table.
        table: String,
        /// The index name as PostgreSQL stores it (and Brighter's when that was cut).
        index: String,
        /// What already holds the name (for an index, with the table it is on).
        holder: String,
        /// What to rename.
        remedy: String,
    },
    /// The table's ownership record names another BoxTable: only its owner migrates or drops it
    /// (the controller says how to resolve it, see `controller::adoption`).
    #[error(
        "table {table} belongs to BoxTable {} (uid {}), recorded in the table's comment; only its owner migrates or drops it",
        record.boxtable,
        record.uid
    )]
    NotOwner {
        /// The table.
        table: String,
        /// The record naming the owner.
        record: super::ownership::OwnerRecord,
    },
    /// Shutdown cancelled the run; everything was rolled back.
    #[error("migration of {table} was cancelled and rolled back")]
    Cancelled {
        /// The table.
        table: String,
    },
    /// The caller's gate withdrew the run under the lock, before anything changed (see
    /// [`super::runner::run_gated`]).
    #[error("migration of {table} was withdrawn before any change: {why}")]
    Withdrawn {
        /// The table.
        table: String,
        /// What the gate found.
        why: String,
        /// Whether a later pass may find otherwise.
        transient: bool,
    },
}

impl From<LockError> for RunError {
    fn from(error: LockError) -> Self {
        RunError::Lock(Box::new(error))
    }
}

impl RunError {
    /// The bounded reason used in conditions, events and metrics.
    pub fn reason(&self) -> Reason {
        match self {
            RunError::Catalog(_)
            | RunError::MigrationFailed { .. }
            | RunError::TableLockTimeout { .. } => Reason::MigrationFailed,
            RunError::NotABrighterTable { .. } => Reason::NotABrighterTable,
            RunError::UnknownSchemaVersion { .. } | RunError::InvalidHistoryVersion { .. } => {
                Reason::UnknownSchemaVersion
            }
            RunError::TableMissing { .. } => Reason::TableMissing,
            RunError::PayloadMismatch { .. } => Reason::PayloadMismatch,
            RunError::SchemaNotFound { .. } => Reason::SchemaNotFound,
            RunError::PermissionDenied { .. } => Reason::PermissionDenied,
            RunError::ReadOnlyDatabase { .. } => Reason::ReadOnlyDatabase,
            RunError::UnsupportedPostgres { .. } => Reason::UnsupportedPostgres,
            RunError::Cancelled { .. } => Reason::Cancelled,
            RunError::Withdrawn { .. } => Reason::Deleting,
            RunError::NotOwner { .. } => Reason::TableConflict,
            RunError::IndexNameTaken { .. } => Reason::IndexNameConflict,
            RunError::SessionLost { .. } => Reason::ConnectionFailed,
            RunError::Lock(lock) => match lock.as_ref() {
                LockError::Timeout { .. } => Reason::LockTimeout,
                LockError::Lost { .. }
                | LockError::BackendChanged { .. }
                | LockError::StatementsMissing { .. } => Reason::LockLost,
                LockError::Cancelled { .. } => Reason::Cancelled,
                LockError::Query { .. } | LockError::NullResult { .. } => Reason::ConnectionFailed,
            },
            RunError::Query { source, .. } => {
                if source.as_db_error().is_some() {
                    Reason::MigrationFailed
                } else {
                    Reason::ConnectionFailed
                }
            }
        }
    }

    /// Classifies a database error from `operation`: a lost session, privilege, missing schema and
    /// read-only errors get their own variants; anything else becomes what `otherwise` builds.
    pub(crate) fn classify(
        source: tokio_postgres::Error,
        operation: &'static str,
        table: &crate::ident::QualifiedName,
        otherwise: impl FnOnce(tokio_postgres::Error) -> RunError,
    ) -> RunError {
        let code = source.code().cloned();
        if is_session_lost(&source, code.as_ref()) {
            return RunError::SessionLost {
                operation,
                table: table.to_string(),
                source,
            };
        }
        match code {
            Some(SqlState::INSUFFICIENT_PRIVILEGE) => RunError::PermissionDenied {
                operation,
                table: table.to_string(),
                source,
            },
            Some(SqlState::INVALID_SCHEMA_NAME) => RunError::SchemaNotFound {
                schema: table.schema.to_string(),
            },
            // A hot standby, or `default_transaction_read_only`.
            Some(SqlState::READ_ONLY_SQL_TRANSACTION) => RunError::ReadOnlyDatabase {
                table: table.to_string(),
            },
            _ => otherwise(source),
        }
    }

    /// This error as a [`RunError::TableLockTimeout`] when its database error is
    /// `lock_not_available` and `lock_timeout` was set to `waited`; else unchanged.
    pub(crate) fn with_table_lock_timeout(self, waited: Option<std::time::Duration>) -> RunError {
        let Some(waited) = waited else {
            return self;
        };
        let timed_out = |source: &tokio_postgres::Error| {
            // `lock_not_available`: a statement waited `lock_timeout` for a lock and gave up.
            source.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
        };
        match self {
            RunError::MigrationFailed {
                table,
                version,
                description,
                source,
            } if timed_out(&source) => RunError::TableLockTimeout {
                operation: format!("migration V{version} ({description})"),
                table,
                waited,
                source,
            },
            RunError::Query {
                operation,
                table,
                source,
            } if timed_out(&source) => RunError::TableLockTimeout {
                operation: operation.to_owned(),
                table,
                waited,
                source,
            },
            other => other,
        }
    }

    /// A failed query of `operation`, classified.
    pub(crate) fn query<'a>(
        operation: &'static str,
        table: &'a crate::ident::QualifiedName,
    ) -> impl FnOnce(tokio_postgres::Error) -> RunError + 'a {
        move |source| {
            RunError::classify(source, operation, table, |source| RunError::Query {
                operation,
                table: table.to_string(),
                source,
            })
        }
    }
}
