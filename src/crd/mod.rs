//! The `BoxTable` custom resource: spec and status types, the schema rules the API server enforces
//! (patterns, enums, ranges, defaults, CEL immutability), printer columns, and the names defined once
//! (group, version, kind, finalizer, field manager).
//!
//! This module holds types only (the status types live in `status.rs` and are re-exported here); [`crate::pass::plan`] turns a spec into a migration plan and
//! [`crate::status`] computes the status.

use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{self, MAX_DDL_TIMEOUT, MAX_LOCK_TIMEOUT};
use crate::ident::{IDENT_PATTERN, MAX_IDENT_BYTES};

mod database;
mod kind;
mod status;

pub use database::{
    ChannelBindingParameter, ConnectionKeys, ConnectionParameters, DEFAULT_SECRET_KEY,
    DatabaseSpec, SECRET_KEY_PATTERN, SECRET_NAME_PATTERN, SecretKeyRef, SslCertModeParameter,
    SslModeParameter, TargetSessionParameter, TlsVersionParameter,
};

pub use kind::{BoxKind, HistoryScope, Payload, RunPath};
pub use status::{
    BoxTableStatus, DRIFTED, LastRun, LockHolder, LockState, LockStatus, PendingPlan,
    PendingVersion, PgLocks, READY, RECONCILING, Reported, STALLED,
};

/// The operator's name: the leader-election Lease, the events' reporting controller, the traces'
/// service and the prefix of its sessions' `application_name`.
pub const CONTROLLER_NAME: &str = "boxtable-operator";

/// The API group of every resource this operator serves.
pub const GROUP: &str = "brighter.dev";
/// The served and stored version.
pub const VERSION: &str = "v1alpha1";
/// The kind.
pub const KIND: &str = "BoxTable";
/// The plural resource name.
pub const PLURAL: &str = "boxtables";
/// The CRD's own name (`<plural>.<group>`).
pub const CRD_NAME: &str = "boxtables.brighter.dev";
/// The finalizer that lets `deletionPolicy: Drop` run before the object goes away.
pub const FINALIZER: &str = "brighter.dev/cleanup";
/// The annotation that consents to a Drop destroying data: its value must name the table exactly
/// as `status.table` shows it (`schema.table`, lowercase; compared as written, without case
/// folding or trimming). Needed when the table holds rows or was adopted rather than created by
/// the BoxTable.
pub const CONFIRM_DROP_ANNOTATION: &str = "brighter.dev/confirm-drop";
/// The annotation that lets a BoxTable take over a table whose ownership record names a BoxTable
/// of another namespace that no longer exists, or a BoxTable of another cluster name: its value
/// must name the table exactly (`schema.table`, as `status.table` shows it). A table whose
/// recorded owner still exists is never taken over.
pub const ADOPT_ANNOTATION: &str = "brighter.dev/adopt";
/// The annotation that asks for a pass now: any new value (a timestamp, by convention) starts one
/// at once and resets the retry backoff, as Flux's `reconcile.fluxcd.io/requestedAt` does.
pub const RECONCILE_REQUESTED_ANNOTATION: &str = "brighter.dev/reconcile-requested-at";
/// The prefix of the finalizer the operator keeps on a Secret for each `deletionPolicy: Drop`
/// BoxTable that needs it to reach its database (`drop.brighter.dev/<BoxTable uid>`): deleting
/// the namespace (or the Secret) then waits for every drop instead of taking the connection
/// string away first.
pub const SECRET_FINALIZER_PREFIX: &str = "drop.brighter.dev/";
/// The server-side-apply field manager for every write the operator makes.
pub const FIELD_MANAGER: &str = "boxtable-operator";

/// The latest outbox version this API accepts as `targetVersion` (the schema needs a constant;
/// a test pins it to `migrate::catalog`).
pub const OUTBOX_LATEST_VERSION: u32 = 8;
/// The latest inbox version this API accepts as `targetVersion` (pinned to the catalog by a test;
/// also written literally in the spec's CEL rule).
pub const INBOX_LATEST_VERSION: u32 = 2;

/// Desired state of one Brighter outbox or inbox table in PostgreSQL.
// Each `printcolumn(...)` repeats `type_ = "string"`; clippy mistakes that for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "brighter.dev",
    version = "v1alpha1",
    kind = "BoxTable",
    plural = "boxtables",
    shortname = "bt",
    namespaced,
    status = "BoxTableStatus",
    derive = "PartialEq",
    doc = "A Brighter outbox or inbox table in PostgreSQL, provisioned and migrated under Brighter's advisory lock.",
    printcolumn(name = "Box", type_ = "string", json_path = ".spec.box"),
    printcolumn(name = "Table", type_ = "string", json_path = ".status.table"),
    printcolumn(
        name = "Version",
        type_ = "integer",
        json_path = ".status.appliedVersion"
    ),
    printcolumn(name = "Lock", type_ = "string", json_path = ".status.lock.state"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drifted\")].status",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Key",
        type_ = "string",
        json_path = ".status.lock.key",
        priority = 1
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = kubernetes_schema)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.table) ? self.table.lowerAscii() : self.box.lowerAscii()) == (has(oldSelf.table) ? oldSelf.table.lowerAscii() : oldSelf.box.lowerAscii())",
        "message": "table is immutable: it may only be written out as the table already in use (the default is the box's name)"
    },
    {
        "rule": "self.box == 'Inbox' || !has(self.payload) || !(self.payload in ['Json', 'Jsonb'])",
        "message": "Json and Jsonb payloads are for an Inbox only"
    },
    {
        "rule": "self.box == 'Outbox' || !has(self.targetVersion) || self.targetVersion <= 2",
        "message": "an Inbox has versions 1 to 2"
    }
]))]
pub struct BoxTableSpec {
    /// Which Brighter table: `Outbox` (messages to dispatch) or `Inbox` (messages already handled).
    /// It decides the columns, the versions (outbox 1 to 8, inbox 1 to 2) and the default table
    /// name. Immutable.
    #[serde(rename = "box")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "box is immutable"}]))]
    pub box_kind: BoxKind,

    /// The table name, as the Brighter application's configuration names it; defaults to the box
    /// (`outbox` or `inbox`). A letter, then letters, digits and `_`, at most 63 bytes; lowercased
    /// before use (`Outbox` and `outbox` are one table), never quoted with capitals. Immutable:
    /// it may be added later only as the table already in use (`status.table`); any other change
    /// is refused, because the operator would leave the old table behind and create a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = IDENT_PATTERN), length(min = 1, max = MAX_IDENT_BYTES))]
    pub table: Option<String>,

    /// The PostgreSQL schema holding the table; default `public`. Same rules as `table`. It must
    /// exist: the operator never creates schemas (a missing one is reported as `SchemaNotFound`;
    /// after `CREATE SCHEMA`, set annotation `brighter.dev/reconcile-requested-at` to retry at
    /// once). Immutable.
    #[serde(default = "default_schema")]
    #[schemars(
        regex(pattern = IDENT_PATTERN),
        length(min = 1, max = MAX_IDENT_BYTES),
        extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "schema is immutable"}])
    )]
    pub schema: String,

    /// The payload column type, as the Brighter application is configured: `Text` (default) or
    /// `Binary` (`bytea`); an Inbox may also use `Json` or `Jsonb`. Never migrated: an existing
    /// table with another type is reported as `PayloadMismatch`.
    #[serde(default)]
    pub payload: Payload,

    /// Where Brighter's migration history table (`__BrighterMigrationHistory`) lives. `Global`
    /// (default, Brighter's default): one table in schema `public` for every box table. `PerSchema`:
    /// a history table in the box table's own schema (seeded from `public` on each run), for
    /// applications that configure Brighter to keep history per schema. Set it as the application
    /// is configured, so that both read the same history.
    #[serde(default)]
    pub history_scope: HistoryScope,

    /// How to reach the database: a Secret holding the connection string, or its parts.
    pub database: DatabaseSpec,

    /// How long to wait for Brighter's migration advisory lock, which a Brighter application
    /// holds while it migrates the same table.
    #[serde(default)]
    pub lock: LockSpec,

    /// PostgreSQL timeouts for the migration's DDL statements (`SET LOCAL` in its transaction),
    /// distinct from `lock.timeout`: how long a statement may wait for table locks held by
    /// applications, and run. Unset: a table lock is waited for at most 10s, and the role's or
    /// server's `statement_timeout` applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Boxed: most BoxTables never set it, and the watch cache keeps every BoxTable (see
    // benches/cache_footprint.rs).
    pub ddl: Option<Box<DdlSpec>>,

    /// The schema version to reach: 1 to 8 for an Outbox, 1 to 2 for an Inbox; default the latest
    /// the operator knows (outbox 8, inbox 2). Set it to the version the application's Brighter
    /// release expects. Tables are never downgraded: a table above it is left as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = OUTBOX_LATEST_VERSION))]
    pub target_version: Option<u32>,

    /// What deleting this BoxTable does to the database table. `Retain` (default): nothing; the
    /// table, its rows and its history stay. `Drop`: WARNING, deleting the BoxTable DROPS THE TABLE
    /// AND ALL ITS DATA (for an outbox, messages not yet dispatched are lost) and its history rows.
    /// Only a table this BoxTable owns is dropped (its ownership is recorded in the table's
    /// comment); a table that holds rows, or that existed before and was adopted, is dropped only
    /// after consent, annotation `brighter.dev/confirm-drop=<schema.table>`; until then deletion
    /// waits with reason `DropBlocked`. `suspend: true` blocks a drop too. Only Drop BoxTables
    /// carry the finalizer `brighter.dev/cleanup`. See "Deleting a BoxTable" in the operator's
    /// README.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// When true, the operator only observes: it reports the table's version and changes nothing
    /// in the database (no migration, and no drop on deletion: a suspended Drop BoxTable's
    /// deletion waits with reason `DropBlocked` until this is false again). `status.pending` then
    /// shows what a run would apply, for review; setting it to false applies that.
    #[serde(default)]
    pub suspend: bool,
}

impl BoxTableSpec {
    /// A spec with every default: the given box, its database in Secret `secret_name` under key
    /// `connectionString`, default table, schema `public`, `Text` payload, 30s lock wait.
    pub fn new(box_kind: BoxKind, secret_name: &str) -> Self {
        Self {
            box_kind,
            table: None,
            schema: default_schema(),
            payload: Payload::default(),
            history_scope: HistoryScope::default(),
            database: DatabaseSpec {
                secret_ref: SecretKeyRef {
                    name: secret_name.to_owned(),
                    key: None,
                    keys: None,
                },
                parameters: None,
            },
            lock: LockSpec::default(),
            ddl: None,
            target_version: None,
            deletion_policy: DeletionPolicy::default(),
            suspend: false,
        }
    }
}

fn default_schema() -> String {
    crate::ident::DEFAULT_SCHEMA.to_owned()
}

/// What deleting the BoxTable does to the database table.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DeletionPolicy {
    /// Keep the table, its rows and its history.
    #[default]
    Retain,
    /// Drop the table with all its data, and its history rows (owned tables only; data needs
    /// consent).
    Drop,
}

/// The longest duration text the schema accepts (four units of nine digits).
pub const MAX_DURATION_TEXT: u32 = 64;

/// The advisory-lock wait.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockSpec {
    /// How long to wait for Brighter's advisory lock, in Go's duration form (`30s`, `1m30s`,
    /// `500ms`); default `30s`, at most `1h`; `0s` means one attempt. When it runs out the
    /// BoxTable stalls with `LockTimeout`, naming the session holding the lock.
    #[serde(default = "default_lock_timeout")]
    #[schemars(
        length(max = MAX_DURATION_TEXT),
        extend("x-kubernetes-validations" = duration::cel_rules(MAX_LOCK_TIMEOUT))
    )]
    pub timeout: String,
}

/// The lock wait used when none is given.
pub const DEFAULT_LOCK_TIMEOUT: &str = "30s";

fn default_lock_timeout() -> String {
    DEFAULT_LOCK_TIMEOUT.to_owned()
}

impl Default for LockSpec {
    fn default() -> Self {
        Self {
            timeout: default_lock_timeout(),
        }
    }
}

/// PostgreSQL timeouts for the migration transaction, distinct from the advisory-lock wait.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DdlSpec {
    /// PostgreSQL `lock_timeout` for the DDL statements: how long one statement may wait for a
    /// table lock (an application's open transaction on the table blocks `ALTER TABLE`, and
    /// every query on the table queues behind it). Go's duration form, like `5s`; default `10s`,
    /// at most `24h`. When it runs out the migration is rolled back and retried with backoff. Not
    /// the advisory-lock wait (`lock.timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = MAX_DURATION_TEXT),
        extend("x-kubernetes-validations" = duration::cel_rules(MAX_DDL_TIMEOUT))
    )]
    pub lock_timeout: Option<String>,
    /// PostgreSQL `statement_timeout` for the DDL statements: how long one statement may run.
    /// Go's duration form, like `60s`; at most `24h`. A statement cut short rolls the whole
    /// migration back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = MAX_DURATION_TEXT),
        extend("x-kubernetes-validations" = duration::cel_rules(MAX_DDL_TIMEOUT))
    )]
    pub statement_timeout: Option<String>,
}

/// Makes a schema what kube-apiserver and kubectl expect, in it and every subschema:
///
/// - the `uint32`/`uint64` formats schemars gives unsigned fields, which kube-apiserver does not
///   know (it warns about them when the CRD is applied), become `int64`; `minimum: 0` stays, so
///   the schema still refuses negative values;
/// - each description's paragraphs become single lines ([`one_line_paragraphs`]): the doc
///   comments they come from are wrapped at 100 columns, and `kubectl explain` wraps text again
///   for the terminal, so the kept line breaks would show as ragged lines.
fn kubernetes_schema(schema: &mut schemars::Schema) {
    if let Some(format) = schema.get("format").and_then(|f| f.as_str())
        && (format == "uint32" || format == "uint64")
    {
        schema.insert("format".to_owned(), "int64".into());
    }
    if let Some(description) = schema.get("description").and_then(|d| d.as_str()) {
        let joined = one_line_paragraphs(description);
        schema.insert("description".to_owned(), joined.into());
    }
    schemars::transform::transform_subschemas(&mut kubernetes_schema, schema);
}

/// `text` with the lines of each paragraph joined by single spaces; paragraphs (separated by a
/// blank line) stay apart, separated by one blank line.
fn one_line_paragraphs(text: &str) -> String {
    let mut paragraphs: Vec<String> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            if !current.is_empty() {
                paragraphs.push(current.join(" "));
                current.clear();
            }
        } else {
            current.push(line);
        }
    }
    if !current.is_empty() {
        paragraphs.push(current.join(" "));
    }
    paragraphs.join("\n\n")
}

/// Why the CRD could not be rendered as YAML.
#[derive(Debug, thiserror::Error)]
#[error("rendering the BoxTable CRD as YAML failed")]
pub struct CrdYamlError(#[source] serde_saphyr::SerializeError);

/// The CustomResourceDefinition YAML, as checked in at `crds/boxtable.yaml` and printed by
/// `boxtable-operator crd`.
///
/// # Errors
/// [`CrdYamlError`] when serialisation fails (not expected for a derived CRD).
pub fn crd_yaml() -> Result<String, CrdYamlError> {
    let body = serde_saphyr::to_string(&BoxTable::crd()).map_err(CrdYamlError)?;
    Ok(format!(
        "# Generated from src/crd.rs by `boxtable-operator crd`; do not edit by hand.\n\
         # Regenerate with: UPDATE_GOLDEN=1 cargo test --test suite -- crd::golden::\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_become_single_lines_and_stay_apart() {
        assert_eq!(
            one_line_paragraphs(
                "The table name, as the\nBrighter application names it.\n\nImmutable: it may\n  be added later."
            ),
            "The table name, as the Brighter application names it.\n\nImmutable: it may be added later."
        );
        assert_eq!(one_line_paragraphs("One line."), "One line.");
        assert_eq!(one_line_paragraphs("a\n\n\n\nb\n"), "a\n\nb");
    }
}
