//! Drift: how a table's actual shape differs from the shape its recorded version implies
//! (columns, types, nullability, primary key, the unique `messageid`, the replay index), as values
//! (pure). Reported only: nothing here repairs a table.
//!
//! Columns an application added are reported as extra, not as drift, because Brighter names the
//! columns it reads and writes; the one exception is an extra `NOT NULL` column without a default,
//! which makes every Brighter insert fail.

use std::fmt;

use super::catalog::causation_index_name;
use super::shape::{self, ShapeColumn};
use super::{BoxKind, Payload};
use crate::ident::QualifiedName;

/// Types earlier Brighter releases gave a column, accepted as well as the current one: the
/// message store of 2017 to 2019 (`MessageId uuid`, inbox `CommandId uuid`) and the V3-era
/// builder (`CorrelationId uuid`).
const HISTORICAL_TYPES: &[(BoxKind, &str, &str)] = &[
    (BoxKind::Outbox, "messageid", "uuid"),
    (BoxKind::Outbox, "correlationid", "uuid"),
    (BoxKind::Inbox, "commandid", "uuid"),
];

/// A column as the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActualColumn {
    /// The column name.
    pub name: String,
    /// The type with its modifier, as `format_type` spells it (`character varying(255)`).
    pub data_type: String,
    /// `NOT NULL`.
    pub not_null: bool,
    /// A default, identity or generated value exists, so an insert may leave it out.
    pub has_default: bool,
}

/// An index on the table, as the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActualIndex {
    /// The index name.
    pub name: String,
    /// Its key columns in order; `None` for an expression.
    pub columns: Vec<Option<String>>,
    /// It backs the primary key.
    pub primary: bool,
    /// It is unique.
    pub unique: bool,
    /// It is usable (an interrupted `CREATE INDEX CONCURRENTLY` leaves an invalid one).
    pub valid: bool,
    /// It has a `WHERE` clause.
    pub partial: bool,
}

impl ActualIndex {
    /// Whether this index covers exactly `columns`, whole and usable.
    fn covers(&self, columns: &[&str]) -> bool {
        self.valid
            && !self.partial
            && self.columns.len() == columns.len()
            && self
                .columns
                .iter()
                .zip(columns)
                .all(|(have, want)| have.as_deref() == Some(*want))
    }

    fn column_list(&self) -> String {
        let names: Vec<&str> = self
            .columns
            .iter()
            .map(|c| c.as_deref().unwrap_or("(expression)"))
            .collect();
        names.join(", ")
    }
}

/// A table's actual shape: its columns in order and its indexes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActualShape {
    /// The columns, in the table's order.
    pub columns: Vec<ActualColumn>,
    /// Every index on the table.
    pub indexes: Vec<ActualIndex>,
}

/// One way the table differs from its version's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    /// A column of the version is missing.
    MissingColumn {
        /// The column.
        column: &'static str,
    },
    /// A column has another type.
    ColumnType {
        /// The column.
        column: &'static str,
        /// The type found.
        found: String,
        /// The type the version gives it.
        expected: String,
    },
    /// A column that must be `NOT NULL` allows NULL.
    AllowsNull {
        /// The column.
        column: &'static str,
    },
    /// A column Brighter leaves NULL is `NOT NULL`.
    RequiresValue {
        /// The column.
        column: &'static str,
    },
    /// The primary key is missing or on other columns.
    PrimaryKey {
        /// The key's columns found, `None` without a primary key.
        found: Option<String>,
        /// The expected key columns.
        expected: String,
    },
    /// A column lost its unique index.
    MissingUnique {
        /// The column.
        column: &'static str,
    },
    /// The catalog's replay index is missing (or not usable).
    MissingIndex {
        /// The name the catalog gives it.
        name: String,
        /// Its columns.
        columns: &'static str,
    },
    /// A column the version does not have, `NOT NULL` without a default: Brighter's inserts fail.
    BlockingExtraColumn {
        /// The column.
        column: String,
    },
    /// A column the version does not have, which Brighter ignores (not drift).
    ExtraColumn {
        /// The column.
        column: String,
        /// The later catalog version it belongs to, if any.
        later_version: Option<u32>,
    },
}

impl Difference {
    /// Whether this difference is drift (everything but a harmless extra column).
    pub fn is_drift(&self) -> bool {
        !matches!(self, Difference::ExtraColumn { .. })
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::MissingColumn { column } => write!(f, "column {column} is missing"),
            Difference::ColumnType {
                column,
                found,
                expected,
            } => write!(f, "column {column} is {found}, expected {expected}"),
            Difference::AllowsNull { column } => {
                write!(f, "column {column} allows NULL, expected NOT NULL")
            }
            Difference::RequiresValue { column } => {
                write!(f, "column {column} is NOT NULL, expected nullable")
            }
            Difference::PrimaryKey {
                found: None,
                expected,
            } => write!(f, "no primary key, expected ({expected})"),
            Difference::PrimaryKey {
                found: Some(found),
                expected,
            } => write!(f, "primary key is ({found}), expected ({expected})"),
            Difference::MissingUnique { column } => {
                write!(f, "no unique index on ({column})")
            }
            Difference::MissingIndex { name, columns } => {
                write!(f, "index {name} on ({columns}) is missing")
            }
            Difference::BlockingExtraColumn { column } => write!(
                f,
                "extra column {column} is NOT NULL without a default, so Brighter's inserts fail"
            ),
            Difference::ExtraColumn {
                column,
                later_version: Some(v),
            } => write!(f, "{column} (of version {v})"),
            Difference::ExtraColumn { column, .. } => f.write_str(column),
        }
    }
}

/// How a table compares with its version's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftReport {
    /// The table.
    pub table: String,
    /// The version whose shape it was compared with (its history's).
    pub version: u32,
    /// Every difference, drift first, then extra columns.
    pub differences: Vec<Difference>,
}

impl DriftReport {
    /// Whether any difference is drift.
    pub fn drifted(&self) -> bool {
        self.differences.iter().any(Difference::is_drift)
    }

    /// One line naming each difference.
    pub fn message(&self) -> String {
        let drift: Vec<String> = self
            .differences
            .iter()
            .filter(|d| d.is_drift())
            .map(ToString::to_string)
            .collect();
        let extra: Vec<String> = self
            .differences
            .iter()
            .filter(|d| !d.is_drift())
            .map(ToString::to_string)
            .collect();
        let mut out = if drift.is_empty() {
            format!(
                "{} matches the shape of version {}",
                self.table, self.version
            )
        } else {
            format!(
                "{} differs from the shape of version {}: {}",
                self.table,
                self.version,
                drift.join("; ")
            )
        };
        if !extra.is_empty() {
            out.push_str(&format!(
                "; extra columns, not drift (Brighter does not use them): {}",
                extra.join(", ")
            ));
        }
        out
    }
}

/// The type `format_type` shows for a type as the DDL writes it.
fn catalog_type(ddl_type: &str) -> String {
    match ddl_type {
        "bigserial" => "bigint".to_owned(),
        "timestamptz" => "timestamp with time zone".to_owned(),
        other => match other.strip_prefix("varchar") {
            Some(modifier) => format!("character varying{modifier}"),
            None => other.to_owned(),
        },
    }
}

fn type_matches(kind: BoxKind, expected: &ShapeColumn, found: &str) -> bool {
    found == catalog_type(&expected.sql_type)
        || HISTORICAL_TYPES
            .iter()
            .any(|(k, column, ty)| *k == kind && *column == expected.name && *ty == found)
}

/// Compares `actual` with the shape of `version` of a `kind` table in `payload` mode.
///
/// Longer than most: one comparison per part of the shape (columns, types, nullability, keys,
/// indexes), each adding its findings to the same report.
pub fn compare(
    kind: BoxKind,
    payload: Payload,
    table: &QualifiedName,
    version: u32,
    actual: &ActualShape,
) -> DriftReport {
    let expected = shape::columns_at(kind, payload, version);
    let mut differences = Vec::new();
    for column in &expected {
        let Some(found) = actual.columns.iter().find(|c| c.name == column.name) else {
            differences.push(Difference::MissingColumn {
                column: column.name,
            });
            continue;
        };
        if !type_matches(kind, column, &found.data_type) {
            differences.push(Difference::ColumnType {
                column: column.name,
                found: found.data_type.clone(),
                expected: catalog_type(&column.sql_type),
            });
        }
        match (column.not_null, found.not_null) {
            (true, false) => differences.push(Difference::AllowsNull {
                column: column.name,
            }),
            (false, true) => differences.push(Difference::RequiresValue {
                column: column.name,
            }),
            _ => {}
        }
    }
    let key = shape::primary_key(kind);
    let primary = actual.indexes.iter().find(|i| i.primary);
    if !primary.is_some_and(|p| p.covers(key)) {
        differences.push(Difference::PrimaryKey {
            found: primary.map(ActualIndex::column_list),
            expected: key.join(", "),
        });
    }
    for column in shape::unique_columns(kind) {
        if !actual
            .indexes
            .iter()
            .any(|i| i.unique && i.covers(&[column]))
        {
            differences.push(Difference::MissingUnique { column });
        }
    }
    let index_due = kind
        .versions()
        .iter()
        .any(|v| v.causation_index && v.number <= version);
    if index_due && !actual.indexes.iter().any(|i| i.covers(&["causationid"])) {
        differences.push(Difference::MissingIndex {
            name: causation_index_name(table),
            columns: "causationid",
        });
    }
    let mut extras = Vec::new();
    for column in &actual.columns {
        if expected.iter().any(|e| e.name == column.name) {
            continue;
        }
        if column.not_null && !column.has_default {
            differences.push(Difference::BlockingExtraColumn {
                column: column.name.clone(),
            });
        } else {
            let later_version = kind
                .versions()
                .iter()
                .find(|v| v.adds.iter().any(|c| c.name == column.name))
                .map(|v| v.number);
            extras.push(Difference::ExtraColumn {
                column: column.name.clone(),
                later_version,
            });
        }
    }
    differences.extend(extras);
    DriftReport {
        table: table.to_string(),
        version,
        differences,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> QualifiedName {
        QualifiedName::parse(None, "outbox").unwrap()
    }

    /// The shape the fresh DDL of `version` creates, as the catalog would show it.
    fn as_created(kind: BoxKind, payload: Payload, version: u32) -> ActualShape {
        let columns = shape::columns_at(kind, payload, version)
            .into_iter()
            .map(|c| ActualColumn {
                name: c.name.to_owned(),
                data_type: catalog_type(&c.sql_type),
                not_null: c.not_null,
                has_default: c.name == "id",
            })
            .collect();
        let index = |name: &str, columns: &[&str], primary: bool, unique: bool| ActualIndex {
            name: name.to_owned(),
            columns: columns.iter().map(|c| Some((*c).to_owned())).collect(),
            primary,
            unique,
            valid: true,
            partial: false,
        };
        let mut indexes = vec![index("pkey", shape::primary_key(kind), true, true)];
        if kind == BoxKind::Outbox {
            indexes.push(index("messageid_key", &["messageid"], false, true));
            if version >= 8 {
                indexes.push(index(
                    "idx_outbox_causationid",
                    &["causationid"],
                    false,
                    false,
                ));
            }
        }
        ActualShape { columns, indexes }
    }

    fn column<'a>(shape: &'a mut ActualShape, name: &str) -> &'a mut ActualColumn {
        shape.columns.iter_mut().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn a_table_as_created_has_no_drift_at_every_version() {
        for kind in [BoxKind::Outbox, BoxKind::Inbox] {
            for v in kind.versions() {
                let shape = as_created(kind, Payload::Text, v.number);
                let report = compare(kind, Payload::Text, &table(), v.number, &shape);
                assert_eq!(report.differences, [], "{kind:?} V{}", v.number);
                assert!(!report.drifted());
            }
        }
    }

    #[test]
    fn a_dropped_replay_index_is_drift_naming_the_index() {
        let mut shape = as_created(BoxKind::Outbox, Payload::Text, 8);
        shape.indexes.retain(|i| i.name != "idx_outbox_causationid");
        let report = compare(BoxKind::Outbox, Payload::Text, &table(), 8, &shape);
        assert!(report.drifted());
        assert_eq!(
            report.message(),
            "public.outbox differs from the shape of version 8: index idx_outbox_causationid on (causationid) is missing"
        );
        // Before V8 there is no replay index to miss.
        let v7 = compare(
            BoxKind::Outbox,
            Payload::Text,
            &table(),
            7,
            &as_created(BoxKind::Outbox, Payload::Text, 7),
        );
        assert!(!v7.drifted());
    }

    #[test]
    fn an_invalid_replay_index_counts_as_missing() {
        let mut shape = as_created(BoxKind::Outbox, Payload::Text, 8);
        for i in &mut shape.indexes {
            i.valid = false;
        }
        let report = compare(BoxKind::Outbox, Payload::Text, &table(), 8, &shape);
        let text = report.message();
        assert!(text.contains("idx_outbox_causationid"), "{text}");
        assert!(text.contains("primary key is (id)"), "{text}");
        assert!(text.contains("no unique index on (messageid)"), "{text}");
    }

    #[test]
    fn a_payload_of_another_type_is_drift() {
        let mut shape = as_created(BoxKind::Outbox, Payload::Binary, 8);
        column(&mut shape, "body").data_type = "text".into();
        let report = compare(BoxKind::Outbox, Payload::Binary, &table(), 8, &shape);
        assert_eq!(
            report.differences,
            [Difference::ColumnType {
                column: "body",
                found: "text".into(),
                expected: "bytea".into()
            }]
        );
    }

    #[test]
    fn nullability_both_ways_is_drift() {
        let mut shape = as_created(BoxKind::Outbox, Payload::Text, 8);
        column(&mut shape, "messageid").not_null = false;
        column(&mut shape, "topic").not_null = true;
        let report = compare(BoxKind::Outbox, Payload::Text, &table(), 8, &shape);
        assert_eq!(
            report.differences,
            [
                Difference::AllowsNull {
                    column: "messageid"
                },
                Difference::RequiresValue { column: "topic" }
            ]
        );
    }

    #[test]
    fn a_missing_column_and_a_wider_varchar_are_drift() {
        let mut shape = as_created(BoxKind::Outbox, Payload::Text, 8);
        shape.columns.retain(|c| c.name != "causationid");
        column(&mut shape, "topic").data_type = "character varying(512)".into();
        let report = compare(BoxKind::Outbox, Payload::Text, &table(), 8, &shape);
        let text = report.message();
        assert!(text.contains("column causationid is missing"), "{text}");
        assert!(
            text.contains(
                "column topic is character varying(512), expected character varying(255)"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_uuid_columns_of_earlier_brighter_releases_are_not_drift() {
        let mut shape = as_created(BoxKind::Outbox, Payload::Text, 3);
        column(&mut shape, "messageid").data_type = "uuid".into();
        column(&mut shape, "correlationid").data_type = "uuid".into();
        assert!(!compare(BoxKind::Outbox, Payload::Text, &table(), 3, &shape).drifted());
        let mut inbox = as_created(BoxKind::Inbox, Payload::Text, 1);
        column(&mut inbox, "commandid").data_type = "uuid".into();
        assert!(!compare(BoxKind::Inbox, Payload::Text, &table(), 1, &inbox).drifted());
    }

    #[test]
    fn an_extra_nullable_column_is_reported_but_is_not_drift() {
        let mut shape = as_created(BoxKind::Outbox, Payload::Text, 5);
        for (name, not_null, has_default) in [
            ("tenant", false, false),
            ("region", true, true),
            ("jobid", false, false),
        ] {
            shape.columns.push(ActualColumn {
                name: name.into(),
                data_type: "text".into(),
                not_null,
                has_default,
            });
        }
        let report = compare(BoxKind::Outbox, Payload::Text, &table(), 5, &shape);
        assert!(!report.drifted(), "{report:?}");
        assert_eq!(
            report.message(),
            "public.outbox matches the shape of version 5; extra columns, not drift (Brighter does not use them): tenant, region, jobid (of version 6)"
        );
    }

    #[test]
    fn an_extra_not_null_column_without_a_default_is_drift() {
        let mut shape = as_created(BoxKind::Outbox, Payload::Text, 8);
        shape.columns.push(ActualColumn {
            name: "tenant".into(),
            data_type: "text".into(),
            not_null: true,
            has_default: false,
        });
        let report = compare(BoxKind::Outbox, Payload::Text, &table(), 8, &shape);
        assert!(report.drifted());
        assert!(
            report
                .message()
                .contains("extra column tenant is NOT NULL without a default")
        );
    }

    #[test]
    fn an_inbox_keyed_on_other_columns_is_drift() {
        let mut shape = as_created(BoxKind::Inbox, Payload::Text, 2);
        shape.indexes[0].columns = vec![Some("commandid".into())];
        let report = compare(BoxKind::Inbox, Payload::Text, &table(), 2, &shape);
        assert_eq!(
            report.differences,
            [Difference::PrimaryKey {
                found: Some("commandid".into()),
                expected: "commandid, contextkey".into()
            }]
        );
        shape.indexes.clear();
        let report = compare(BoxKind::Inbox, Payload::Text, &table(), 2, &shape);
        assert!(
            report
                .message()
                .contains("no primary key, expected (commandid, contextkey)")
        );
    }
}
