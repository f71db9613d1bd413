//! The migration catalog: Brighter's outbox (V1..V8) and inbox (V1..V2) versions, their
//! descriptions, the columns each adds, and the DDL that creates or upgrades a table (pure).
//!
//! The descriptions are written into Brighter's history table and must stay byte-for-byte equal to
//! Brighter's own. All DDL is schema-qualified through [`QualifiedName::quoted`]; column names are
//! unquoted (PostgreSQL folds them to lowercase), as Brighter writes them.

use std::collections::BTreeSet;

use super::{BoxKind, Payload};
use crate::ident::QualifiedName;

/// A column a version adds, with the type the upgrade step gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// The lowercase column name.
    pub name: &'static str,
    /// The SQL type used by the `ADD COLUMN` step (`None` for V1 columns, never added by a step).
    pub step_type: Option<&'static str>,
}

/// One catalog version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// The version number (1, 2, ...).
    pub number: u32,
    /// Brighter's description, written into the history table by the step.
    pub description: &'static str,
    /// The columns this version adds.
    pub adds: &'static [Column],
    /// Whether this version also creates the causationid replay index.
    pub causation_index: bool,
}

const fn v1(name: &'static str) -> Column {
    Column {
        name,
        step_type: None,
    }
}

const fn col(name: &'static str, ty: &'static str) -> Column {
    Column {
        name,
        step_type: Some(ty),
    }
}

const fn version(number: u32, description: &'static str, adds: &'static [Column]) -> Version {
    Version {
        number,
        description,
        adds,
        causation_index: false,
    }
}

/// Brighter's outbox versions. Never edit a published version: append.
pub const OUTBOX: &[Version] = &[
    version(
        1,
        "Create outbox table",
        &[
            v1("messageid"),
            v1("topic"),
            v1("messagetype"),
            v1("timestamp"),
            v1("headerbag"),
            v1("body"),
        ],
    ),
    version(
        2,
        "Add dispatched column",
        &[col("dispatched", "timestamptz")],
    ),
    version(
        3,
        "Add correlationid, replyto, contenttype columns",
        &[
            col("correlationid", "varchar(255)"),
            col("replyto", "varchar(255)"),
            col("contenttype", "varchar(128)"),
        ],
    ),
    version(
        4,
        "Add partitionkey column",
        &[col("partitionkey", "varchar(128)")],
    ),
    version(
        5,
        "Add CloudEvents columns (source, type, dataschema, subject, traceparent, tracestate, baggage)",
        &[
            col("source", "varchar(255)"),
            col("type", "varchar(255)"),
            col("dataschema", "varchar(255)"),
            col("subject", "varchar(255)"),
            col("traceparent", "varchar(255)"),
            col("tracestate", "varchar(255)"),
            col("baggage", "text"),
        ],
    ),
    version(
        6,
        "Add workflowid, jobid columns",
        &[
            col("workflowid", "varchar(255)"),
            col("jobid", "varchar(255)"),
        ],
    ),
    version(
        7,
        "Add dataref, specversion columns",
        &[
            col("dataref", "varchar(255)"),
            col("specversion", "varchar(255)"),
        ],
    ),
    Version {
        number: 8,
        description: "Add causationid column and replay index",
        adds: &[col("causationid", "varchar(255)")],
        causation_index: true,
    },
];

/// Brighter's inbox versions. Never edit a published version: append.
pub const INBOX: &[Version] = &[
    version(
        1,
        "Create inbox table",
        &[
            v1("commandid"),
            v1("commandtype"),
            v1("commandbody"),
            v1("timestamp"),
            v1("contextkey"),
        ],
    ),
    version(
        2,
        "Add causationid column",
        &[col("causationid", "varchar(256)")],
    ),
];

/// A gap or disorder in a catalog: versions must run 1, 2, 3, ... with no repeats.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} catalog is not contiguous: position {position} holds V{found}")]
pub struct CatalogGap {
    /// `outbox` or `inbox`.
    pub kind: &'static str,
    /// The 0-based position in the catalog.
    pub position: usize,
    /// The version number found there.
    pub found: u32,
}

impl BoxKind {
    /// `outbox` or `inbox`, as used in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            BoxKind::Outbox => "outbox",
            BoxKind::Inbox => "inbox",
        }
    }

    /// This kind's catalog, V1 first.
    pub fn versions(self) -> &'static [Version] {
        match self {
            BoxKind::Outbox => OUTBOX,
            BoxKind::Inbox => INBOX,
        }
    }

    /// The latest version the catalog knows (8 for the outbox, 2 for the inbox).
    pub fn latest(self) -> u32 {
        self.versions().last().map_or(0, |v| v.number)
    }

    /// The column whose presence identifies a Brighter table of this kind.
    pub fn marker_column(self) -> &'static str {
        match self {
            BoxKind::Outbox => "headerbag",
            BoxKind::Inbox => "commandbody",
        }
    }

    /// The payload column (`body` or `commandbody`).
    pub fn payload_column(self) -> &'static str {
        match self {
            BoxKind::Outbox => "body",
            BoxKind::Inbox => "commandbody",
        }
    }

    /// Whether this kind accepts the payload mode (json and jsonb are inbox-only).
    pub fn accepts(self, payload: Payload) -> bool {
        matches!(payload, Payload::Text | Payload::Binary) || self == BoxKind::Inbox
    }

    /// Version `number`, if the catalog has it.
    pub fn version(self, number: u32) -> Option<&'static Version> {
        self.versions().iter().find(|v| v.number == number)
    }

    /// Every column present at `number`: the union of what V1..=`number` add.
    pub fn columns_at(self, number: u32) -> BTreeSet<&'static str> {
        self.versions()
            .iter()
            .filter(|v| v.number <= number)
            .flat_map(|v| v.adds.iter().map(|c| c.name))
            .collect()
    }

    /// Checks that the catalog runs V1, V2, ... without gaps or repeats.
    ///
    /// # Errors
    /// [`CatalogGap`] naming the first out-of-place version.
    pub fn check_contiguous(self) -> Result<(), CatalogGap> {
        check_contiguous(self.as_str(), self.versions())
    }
}

impl Payload {
    /// The PostgreSQL type of the payload column in this mode.
    pub fn sql_type(self) -> &'static str {
        match self {
            Payload::Text => "text",
            Payload::Binary => "bytea",
            Payload::Json => "json",
            Payload::Jsonb => "jsonb",
        }
    }

    /// The mode for a column type as `format_type` (and `information_schema`) names it.
    pub fn from_data_type(data_type: &str) -> Option<Self> {
        match data_type {
            "text" => Some(Payload::Text),
            "bytea" => Some(Payload::Binary),
            "json" => Some(Payload::Json),
            "jsonb" => Some(Payload::Jsonb),
            _ => None,
        }
    }
}

/// Checks that `versions` run 1, 2, 3, ... without gaps or repeats.
///
/// # Errors
/// [`CatalogGap`] naming the first out-of-place version.
pub fn check_contiguous(kind: &'static str, versions: &[Version]) -> Result<(), CatalogGap> {
    for (position, v) in versions.iter().enumerate() {
        if usize::try_from(v.number).ok() != Some(position + 1) {
            return Err(CatalogGap {
                kind,
                position,
                found: v.number,
            });
        }
    }
    Ok(())
}

/// The name of the outbox's causationid replay index (created in the table's schema).
pub fn causation_index_name(table: &QualifiedName) -> String {
    format!("idx_{}_causationid", table.table)
}

/// The name the causationid replay index gets as PostgreSQL stores it: Brighter's name cut to
/// 63 bytes (NAMEDATALEN - 1), as the server cuts every longer identifier. Table names longer than
/// 47 bytes give a cut name, which two tables can then share.
pub fn causation_index_stored_name(table: &QualifiedName) -> String {
    let mut name = causation_index_name(table);
    let mut end = name.len().min(crate::ident::MAX_IDENT_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name.truncate(end);
    name
}

/// Whether a run from `from` to `to` (0 for a new table) creates the causationid replay index.
pub fn creates_causation_index(kind: BoxKind, from: u32, to: u32) -> bool {
    kind.versions()
        .iter()
        .any(|v| v.causation_index && from < v.number && v.number <= to)
}

/// `CREATE INDEX IF NOT EXISTS idx_<table>_causationid ON "s"."t" (causationid)`.
pub fn causation_index_ddl(table: &QualifiedName) -> String {
    format!(
        "CREATE INDEX IF NOT EXISTS {} ON {} (causationid)",
        causation_index_name(table),
        table.quoted()
    )
}

/// The statements of one upgrade step: one `ADD COLUMN IF NOT EXISTS` per column, then the index
/// when the version has one. V1 has no step (it is only ever created fresh or found).
pub fn step_statements(version: &Version, table: &QualifiedName) -> Vec<String> {
    let mut out: Vec<String> = version
        .adds
        .iter()
        .filter_map(|c| {
            c.step_type.map(|ty| {
                format!(
                    "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {ty} NULL;",
                    table.quoted(),
                    c.name
                )
            })
        })
        .collect();
    if version.causation_index {
        out.push(causation_index_ddl(table));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_catalogs_are_contiguous_and_end_at_the_latest_version() {
        BoxKind::Outbox.check_contiguous().unwrap();
        BoxKind::Inbox.check_contiguous().unwrap();
        assert_eq!(BoxKind::Outbox.latest(), 8);
        assert_eq!(BoxKind::Inbox.latest(), 2);
    }

    #[test]
    fn a_gap_in_a_catalog_is_found() {
        let broken = [OUTBOX[0], OUTBOX[2]];
        let gap = check_contiguous("outbox", &broken).unwrap_err();
        assert_eq!((gap.position, gap.found), (1, 3));
    }

    #[test]
    fn steps_add_each_column_if_missing_and_v8_adds_the_index() {
        let t = QualifiedName::parse(Some("Sales"), "Order").unwrap();
        let v8 = BoxKind::Outbox.version(8).unwrap();
        assert_eq!(
            step_statements(v8, &t),
            [
                "ALTER TABLE \"sales\".\"order\" ADD COLUMN IF NOT EXISTS causationid varchar(255) NULL;",
                "CREATE INDEX IF NOT EXISTS idx_order_causationid ON \"sales\".\"order\" (causationid)",
            ]
        );
        assert_eq!(
            step_statements(BoxKind::Outbox.version(5).unwrap(), &t).len(),
            7
        );
    }

    #[test]
    fn the_stored_index_name_is_brighters_name_cut_to_63_bytes() {
        let short = QualifiedName::parse(None, "outbox").unwrap();
        assert_eq!(
            causation_index_stored_name(&short),
            "idx_outbox_causationid"
        );
        let fits = QualifiedName::parse(None, &"a".repeat(47)).unwrap();
        assert_eq!(causation_index_stored_name(&fits).len(), 63);
        assert_eq!(
            causation_index_stored_name(&fits),
            causation_index_name(&fits)
        );
        let one = QualifiedName::parse(None, &format!("{}_a", "b".repeat(59))).unwrap();
        let two = QualifiedName::parse(None, &format!("{}_b", "b".repeat(59))).unwrap();
        assert_eq!(
            causation_index_stored_name(&one),
            format!("idx_{}", "b".repeat(59))
        );
        assert_eq!(
            causation_index_stored_name(&one),
            causation_index_stored_name(&two),
            "two long names share one cut index name"
        );
    }

    #[test]
    fn only_a_run_through_v8_creates_the_replay_index() {
        assert!(creates_causation_index(BoxKind::Outbox, 0, 8));
        assert!(creates_causation_index(BoxKind::Outbox, 3, 8));
        assert!(!creates_causation_index(BoxKind::Outbox, 3, 7));
        assert!(!creates_causation_index(BoxKind::Outbox, 8, 8));
        assert!(!creates_causation_index(BoxKind::Inbox, 0, 2));
    }

    #[test]
    fn cumulative_columns_grow_with_each_version() {
        assert!(BoxKind::Outbox.columns_at(2).contains("dispatched"));
        assert!(!BoxKind::Outbox.columns_at(1).contains("dispatched"));
        assert_eq!(BoxKind::Outbox.columns_at(8).len(), 23);
    }
}
