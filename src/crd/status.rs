//! The `BoxTable` status types: exactly the field names of the API contract, all optional at the
//! top level, timestamps as `metav1.Time`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::RunPath;
use crate::reason::Reason;

/// The kstatus condition that says the table is at its target version.
pub const READY: &str = "Ready";
/// The kstatus condition that says the operator is still working (or retrying).
pub const RECONCILING: &str = "Reconciling";
/// The kstatus condition that says the operator gave up until something changes.
pub const STALLED: &str = "Stalled";
/// The detail condition that says the table's shape differs from its recorded version's. It
/// never changes Ready.
pub const DRIFTED: &str = "Drifted";

/// One condition as the operator reads it back: the [`Reason`] typed, so no reader parses or
/// compares the string a condition stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported<'a> {
    /// `True`, `False` or `Unknown`.
    pub status: &'a str,
    /// The reason; `None` for one this operator does not know (written by another version, or by
    /// another field manager).
    pub reason: Option<Reason>,
    /// Why the condition has its status.
    pub message: &'a str,
}

impl Reported<'_> {
    /// Whether the condition's status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }

    /// Whether the condition's status is `Unknown`.
    pub fn is_unknown(&self) -> bool {
        self.status == "Unknown"
    }
}

impl BoxTableStatus {
    /// The condition of type `type_`, read with its reason typed.
    pub fn condition(&self, type_: &str) -> Option<Reported<'_>> {
        self.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| Reported {
                status: &c.status,
                reason: c.reason.parse().ok(),
                message: &c.message,
            })
    }

    /// The `Ready` condition, read with its reason typed.
    pub fn ready(&self) -> Option<Reported<'_>> {
        self.condition(READY)
    }

    /// The reason of the `Ready` condition, when it has one this operator knows.
    pub fn ready_reason(&self) -> Option<Reason> {
        self.ready().and_then(|ready| ready.reason)
    }

    /// Whether the condition of type `type_` is `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.is_true())
    }
}

/// Observed state of a BoxTable. Written only by the operator, and only when it changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::kubernetes_schema)]
pub struct BoxTableStatus {
    /// The `metadata.generation` this status describes; -1 until the operator first reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = -1))]
    pub observed_generation: Option<i64>,
    /// The resolved, lowercased table (`schema.table`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// The version the table is at, as last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_version: Option<u32>,
    /// The version the operator is bringing the table to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<u32>,
    /// Brighter's advisory lock for this table: identity, state and holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockStatus>,
    /// The last completed migration run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// While `suspend: true`: the plan a run would carry out now, for review (the path, the
    /// versions, and each history row it would write). Setting `suspend: false` applies it; if the
    /// table changed in between, the run re-plans and says so (event `Replanned`, and the Ready
    /// message). Absent when not suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Boxed: most BoxTables never set it, and the watch cache keeps every BoxTable (see
    // benches/cache_footprint.rs).
    pub pending: Option<Box<PendingPlan>>,
    /// kstatus conditions `Ready`, `Reconciling`, `Stalled`, and the detail condition `Drifted`
    /// (True when the table's columns, types, nullability, keys or replay index no longer match
    /// the shape of its recorded version; reported only, never repaired, and Ready is unaffected;
    /// Unknown, reason `NotChecked`, when the last pass did not compare the shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Brighter's advisory lock for this table, as the operator last saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::kubernetes_schema)]
pub struct LockStatus {
    /// The lockKey text (`BrighterMigration_<schema>.<table>`).
    pub lock_key: String,
    /// The derived bigint key as a decimal string (JSON clients lose precision past 2^53).
    pub key: String,
    /// The key as 16 lowercase hex digits.
    pub key_hex: String,
    /// How `pg_locks` shows this lock.
    pub pg_locks: PgLocks,
    /// Where the lock stands.
    pub state: LockState,
    /// Tries made in the latest wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// How long the latest wait took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_milliseconds: Option<u64>,
    /// The configured wait, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    /// When the operator last took the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_acquired_time: Option<Time>,
    /// When the operator last released the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_released_time: Option<Time>,
    /// While waiting and after a timeout: the session holding the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Boxed: most BoxTables never set it, and the watch cache keeps every BoxTable (see
    // benches/cache_footprint.rs).
    pub holder: Option<Box<LockHolder>>,
}

/// The `pg_locks` columns that identify an advisory lock taken with one bigint key.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::kubernetes_schema)]
pub struct PgLocks {
    /// The key's high 32 bits, unsigned.
    pub classid: u32,
    /// The key's low 32 bits, unsigned.
    pub objid: u32,
    /// Always 1 for a single-bigint advisory lock.
    pub objsubid: u32,
}

/// Where the advisory lock stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum LockState {
    /// Another session holds it; the operator is polling.
    Waiting,
    /// The operator holds it (a migration is running).
    Acquired,
    /// The operator took it and released it.
    Released,
    /// The wait reached its timeout.
    TimedOut,
    /// The session lost it before releasing it.
    Lost,
}

/// The session holding the advisory lock.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockHolder {
    /// Backend process id.
    pub pid: i32,
    /// The holder's `application_name` (empty when unset).
    #[serde(default)]
    pub application_name: String,
    /// The client address; absent for a Unix-socket client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_addr: Option<String>,
    /// Start of the holder's current transaction, else of its latest statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}

/// The last completed migration run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::kubernetes_schema)]
pub struct LastRun {
    /// The path the run took.
    pub path: RunPath,
    /// The version before the run (0 when there was no table).
    pub from_version: u32,
    /// The version after the run.
    pub to_version: u32,
    /// When the run started.
    pub start_time: Time,
    /// How long the run took, lock wait included, in milliseconds.
    pub duration_milliseconds: u64,
}

/// What a run would do now, shown while the BoxTable is suspended.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::kubernetes_schema)]
pub struct PendingPlan {
    /// The path the run would take (`UpToDate`: nothing to apply).
    pub path: RunPath,
    /// The version the table is at now (0 when it does not exist).
    pub from_version: u32,
    /// The version the run would reach.
    pub to_version: u32,
    /// The history rows the run would write, in order: each version and its description
    /// (a fresh table: one row at the target; a table without history: its detected version
    /// first). Empty when there is nothing to apply.
    #[serde(default)]
    pub versions: Vec<PendingVersion>,
}

/// One version a pending run would apply, as its history row records it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::kubernetes_schema)]
pub struct PendingVersion {
    /// The version.
    pub version: u32,
    /// Its description, as written into `__BrighterMigrationHistory`.
    pub description: String,
}
