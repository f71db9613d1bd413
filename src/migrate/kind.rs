//! The words a BoxTable spec and a plan share: which box, its payload column type and where its
//! history lives (pure).

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
