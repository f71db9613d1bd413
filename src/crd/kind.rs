//! The words a BoxTable spec, its status and a migration plan share: which box, its payload column
//! type, where its history lives, and which path a run took (pure). The migration core uses them
//! as they are.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
