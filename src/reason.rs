//! The bounded set of reasons: the same PascalCase strings in conditions, events and metric labels.

use std::fmt;
use std::str::FromStr;

/// Why a BoxTable is where it is. Every error in the operator maps to exactly one reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The table is at its target version and nothing had to change.
    UpToDate,
    /// The table was brought to its target version in this run.
    Migrated,
    /// The history records a version newer than this operator knows (a newer Brighter migrated
    /// the table): Ready, left as it is, with a Warning event.
    AheadOfOperator,
    /// Another session holds the advisory lock; the operator is polling.
    WaitingForLock,
    /// The lock is held and the migration transaction is running.
    Migrating,
    /// The lock wait reached its timeout.
    LockTimeout,
    /// The session no longer held the lock when it tried to release it (a pooler or a killed backend).
    LockLost,
    /// The referenced Secret, or its key, does not exist.
    SecretNotFound,
    /// The referenced Secret lacks the labels of `--secret-label-selector`, so the operator does
    /// not watch it (and would miss its rotation).
    SecretNotSelected,
    /// The connection string cannot be parsed.
    InvalidConnectionString,
    /// The database could not be reached.
    ConnectionFailed,
    /// The pass's waits (connecting, the reads before the lock, the lock wait) took longer than
    /// `lock.timeout` plus the margin for connecting and reading (see [`crate::waits`]); nothing
    /// was changed, and the pass is retried with backoff.
    DeadlineExceeded,
    /// The database refused the credentials, or asked for a password the connection string lacks.
    AuthenticationFailed,
    /// The database the connection string names (or, naming none, the user name) does not exist.
    DatabaseNotFound,
    /// TLS as the connection string requires it cannot be had: the server offers none, or its
    /// certificate fails verification.
    TlsFailed,
    /// The role lacks a privilege the migration needs.
    PermissionDenied,
    /// The box table's schema does not exist.
    SchemaNotFound,
    /// The target is a read-only hot standby.
    ReadOnlyDatabase,
    /// The server's PostgreSQL major is older than the oldest supported (13).
    UnsupportedPostgres,
    /// A migration statement failed.
    MigrationFailed,
    /// The table exists but is not a Brighter outbox or inbox.
    NotABrighterTable,
    /// The table or its history is at a version this operator does not know.
    UnknownSchemaVersion,
    /// History rows remain for a table that no longer exists.
    TableMissing,
    /// The table's payload column type differs from the requested payload mode.
    PayloadMismatch,
    /// The replay index's name (Brighter's, cut by PostgreSQL to 63 bytes) is already taken in the
    /// table's schema, by another table's index or another relation.
    IndexNameConflict,
    /// The spec is valid to the schema but inconsistent (for example `Json` payload on an outbox).
    InvalidSpec,
    /// Another BoxTable already manages the same database table.
    TableConflict,
    /// `suspend: true`: observing only.
    Suspended,
    /// The object is being deleted.
    Deleting,
    /// Deletion with `deletionPolicy: Drop` failed.
    DropFailed,
    /// The table and its history rows were dropped (`deletionPolicy: Drop`).
    Dropped,
    /// A Drop waits for the user: the table holds rows or was adopted (consent needed), or the
    /// BoxTable is suspended.
    DropBlocked,
    /// A Drop left the table alone because this BoxTable does not own it.
    TableKept,
    /// The run was cancelled by shutdown.
    Cancelled,
    /// The `Drifted` detail condition: the table's shape differs from its recorded version's
    /// (reported only, never repaired; Ready is unaffected).
    Drifted,
    /// The `Drifted` detail condition is False: the shape matches its recorded version.
    NoDrift,
    /// The `Drifted` detail condition is Unknown: the last pass did not compare the table's shape
    /// (it failed, stalled, waited, was suspended or is deleting); the message says why and what
    /// the last comparison found.
    NotChecked,
    /// Un-suspended, the run found the table changed since the pending plan was shown and ran
    /// what it found instead.
    Replanned,
    /// The BoxTable took over a table whose ownership record named another BoxTable that no
    /// longer exists, or one the user asked to adopt from (an event only).
    TakenOver,
}

impl Reason {
    /// Every reason, for tests and for pre-registering metric labels.
    pub const ALL: [Reason; 39] = [
        Reason::UpToDate,
        Reason::Migrated,
        Reason::AheadOfOperator,
        Reason::WaitingForLock,
        Reason::Migrating,
        Reason::LockTimeout,
        Reason::LockLost,
        Reason::SecretNotFound,
        Reason::SecretNotSelected,
        Reason::InvalidConnectionString,
        Reason::ConnectionFailed,
        Reason::DeadlineExceeded,
        Reason::AuthenticationFailed,
        Reason::DatabaseNotFound,
        Reason::TlsFailed,
        Reason::PermissionDenied,
        Reason::SchemaNotFound,
        Reason::ReadOnlyDatabase,
        Reason::UnsupportedPostgres,
        Reason::MigrationFailed,
        Reason::NotABrighterTable,
        Reason::UnknownSchemaVersion,
        Reason::TableMissing,
        Reason::PayloadMismatch,
        Reason::IndexNameConflict,
        Reason::InvalidSpec,
        Reason::TableConflict,
        Reason::Suspended,
        Reason::Deleting,
        Reason::DropFailed,
        Reason::Dropped,
        Reason::DropBlocked,
        Reason::TableKept,
        Reason::Cancelled,
        Reason::Drifted,
        Reason::NoDrift,
        Reason::NotChecked,
        Reason::Replanned,
        Reason::TakenOver,
    ];

    /// The PascalCase string used in conditions, events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::UpToDate => "UpToDate",
            Reason::Migrated => "Migrated",
            Reason::AheadOfOperator => "AheadOfOperator",
            Reason::WaitingForLock => "WaitingForLock",
            Reason::Migrating => "Migrating",
            Reason::LockTimeout => "LockTimeout",
            Reason::LockLost => "LockLost",
            Reason::SecretNotFound => "SecretNotFound",
            Reason::SecretNotSelected => "SecretNotSelected",
            Reason::InvalidConnectionString => "InvalidConnectionString",
            Reason::ConnectionFailed => "ConnectionFailed",
            Reason::DeadlineExceeded => "DeadlineExceeded",
            Reason::AuthenticationFailed => "AuthenticationFailed",
            Reason::DatabaseNotFound => "DatabaseNotFound",
            Reason::TlsFailed => "TlsFailed",
            Reason::PermissionDenied => "PermissionDenied",
            Reason::SchemaNotFound => "SchemaNotFound",
            Reason::ReadOnlyDatabase => "ReadOnlyDatabase",
            Reason::UnsupportedPostgres => "UnsupportedPostgres",
            Reason::MigrationFailed => "MigrationFailed",
            Reason::NotABrighterTable => "NotABrighterTable",
            Reason::UnknownSchemaVersion => "UnknownSchemaVersion",
            Reason::TableMissing => "TableMissing",
            Reason::PayloadMismatch => "PayloadMismatch",
            Reason::IndexNameConflict => "IndexNameConflict",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::TableConflict => "TableConflict",
            Reason::Suspended => "Suspended",
            Reason::Deleting => "Deleting",
            Reason::DropFailed => "DropFailed",
            Reason::Dropped => "Dropped",
            Reason::DropBlocked => "DropBlocked",
            Reason::TableKept => "TableKept",
            Reason::Cancelled => "Cancelled",
            Reason::Drifted => "Drifted",
            Reason::NoDrift => "NoDrift",
            Reason::NotChecked => "NotChecked",
            Reason::Replanned => "Replanned",
            Reason::TakenOver => "TakenOver",
        }
    }

    /// Whether this failure is given up on until something changes (kstatus `Stalled`), as opposed
    /// to retried with backoff (kstatus `Reconciling`).
    ///
    /// Lock timeouts stall: the configured budget was spent, and retrying at once would only queue
    /// more waiters behind the holder. A periodic resync tries again later. So do the connection
    /// mistakes only a person can fix (credentials, a database that does not exist, TLS the
    /// server cannot give): retrying them with backoff would only repeat the same refusal.
    pub fn is_stalled(self) -> bool {
        matches!(
            self,
            Reason::LockTimeout
                | Reason::SecretNotFound
                | Reason::SecretNotSelected
                | Reason::InvalidConnectionString
                | Reason::AuthenticationFailed
                | Reason::DatabaseNotFound
                | Reason::TlsFailed
                | Reason::PermissionDenied
                | Reason::SchemaNotFound
                | Reason::ReadOnlyDatabase
                | Reason::UnsupportedPostgres
                | Reason::NotABrighterTable
                | Reason::UnknownSchemaVersion
                | Reason::TableMissing
                | Reason::PayloadMismatch
                | Reason::IndexNameConflict
                | Reason::InvalidSpec
                | Reason::TableConflict
                | Reason::DropBlocked
        )
    }
}

impl Reason {
    /// Whether this reason is a failure, counted in `boxtable_failures_total`. Progress and
    /// success are not, and neither are the states a user chose or is asked to decide:
    /// `Suspended`, `Deleting`, `DropBlocked` (waiting for consent), `TableKept`, `Dropped`, and
    /// `Cancelled` (a shutdown), nor the reports `Drifted`, `NoDrift`, `NotChecked` and `Replanned`.
    pub fn is_failure(self) -> bool {
        !matches!(
            self,
            Reason::UpToDate
                | Reason::Migrated
                | Reason::AheadOfOperator
                | Reason::WaitingForLock
                | Reason::Migrating
                | Reason::Suspended
                | Reason::Deleting
                | Reason::Dropped
                | Reason::DropBlocked
                | Reason::TableKept
                | Reason::Cancelled
                | Reason::Drifted
                | Reason::NoDrift
                | Reason::NotChecked
                | Reason::Replanned
                | Reason::TakenOver
        )
    }

    /// Whether a Ready condition with this reason is still announced as a Warning event: the table
    /// is usable, but someone should look (a newer Brighter than the operator).
    pub fn warns_when_ready(self) -> bool {
        matches!(self, Reason::AheadOfOperator)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`Reason`] (a condition written by someone else, or by an operator that
/// knows other reasons).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a known reason")]
pub struct UnknownReason;

impl FromStr for Reason {
    type Err = UnknownReason;

    /// The reason whose [`Reason::as_str`] is `s` (as a condition stores it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or(UnknownReason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_from_its_string_and_nothing_else_does() {
        for reason in Reason::ALL {
            assert_eq!(reason.as_str().parse::<Reason>(), Ok(reason));
        }
        assert_eq!("uptodate".parse::<Reason>(), Err(UnknownReason));
        assert_eq!("".parse::<Reason>(), Err(UnknownReason));
    }

    #[test]
    fn reason_strings_are_unique_pascal_case() {
        let mut seen = std::collections::BTreeSet::new();
        for reason in Reason::ALL {
            let s = reason.as_str();
            assert!(s.chars().next().unwrap().is_ascii_uppercase(), "{s}");
            assert!(s.chars().all(|c| c.is_ascii_alphanumeric()), "{s}");
            assert!(seen.insert(s), "duplicate {s}");
        }
    }

    #[test]
    fn progress_reasons_never_stall() {
        for reason in [
            Reason::WaitingForLock,
            Reason::Migrating,
            Reason::UpToDate,
            Reason::Migrated,
            Reason::AheadOfOperator,
        ] {
            assert!(!reason.is_stalled(), "{reason}");
        }
    }
}
