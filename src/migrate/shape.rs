//! The latest (fresh) shapes of the outbox and inbox, in Brighter's column order, and the DDL that
//! creates a table directly at a version (pure). Always schema-qualified.

use super::catalog::causation_index_ddl;
use super::{BoxKind, Payload};
use crate::ident::QualifiedName;

/// A column definition in the fresh shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Def {
    /// Type and constraints, written as is.
    Sql(&'static str),
    /// The payload column: its type comes from the payload mode; always nullable.
    Payload,
}
use Def::Sql;

/// The latest outbox shape, in Brighter's column order.
const OUTBOX_FRESH: &[(&str, Def)] = &[
    ("id", Sql("bigserial PRIMARY KEY")),
    ("messageid", Sql("varchar(255) NOT NULL UNIQUE")),
    ("topic", Sql("varchar(255) NULL")),
    ("messagetype", Sql("varchar(32) NULL")),
    ("timestamp", Sql("timestamptz NULL")),
    ("correlationid", Sql("varchar(255) NULL")),
    ("replyto", Sql("varchar(255) NULL")),
    ("contenttype", Sql("varchar(128) NULL")),
    ("partitionkey", Sql("varchar(128) NULL")),
    ("workflowid", Sql("varchar(255) NULL")),
    ("jobid", Sql("varchar(255) NULL")),
    ("dispatched", Sql("timestamptz NULL")),
    ("headerbag", Sql("text NULL")),
    ("body", Def::Payload),
    ("source", Sql("varchar(255) NULL")),
    ("type", Sql("varchar(255) NULL")),
    ("dataschema", Sql("varchar(255) NULL")),
    ("subject", Sql("varchar(255) NULL")),
    ("traceparent", Sql("varchar(255) NULL")),
    ("tracestate", Sql("varchar(255) NULL")),
    ("baggage", Sql("text NULL")),
    ("dataref", Sql("varchar(255) NULL")),
    ("causationid", Sql("varchar(255) NULL")),
    ("specversion", Sql("varchar(255) NULL")),
];

/// The latest inbox shape, in Brighter's column order.
const INBOX_FRESH: &[(&str, Def)] = &[
    ("commandid", Sql("varchar(256) NOT NULL")),
    ("commandtype", Sql("varchar(256) NULL")),
    ("commandbody", Def::Payload),
    ("timestamp", Sql("timestamptz NULL")),
    ("contextkey", Sql("varchar(256)")),
    ("causationid", Sql("varchar(256) NULL")),
];

/// The inbox's table constraint, after its columns.
const INBOX_PRIMARY_KEY: &str = "PRIMARY KEY (commandid, contextkey)";

/// A column of the shape a version implies, as the fresh DDL writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeColumn {
    /// The lowercase column name.
    pub name: &'static str,
    /// The type as the DDL writes it (`varchar(255)`, `timestamptz`, `bigserial`, the payload's).
    pub sql_type: String,
    /// Whether the column is `NOT NULL` (declared so, or part of the primary key).
    pub not_null: bool,
}

/// The columns a table at `number` has, in Brighter's order, with their types and nullability
/// (the fresh shape restricted to that version's columns; `id` on an outbox always).
pub fn columns_at(kind: BoxKind, payload: Payload, number: u32) -> Vec<ShapeColumn> {
    let present = kind.columns_at(number);
    fresh_shape(kind)
        .iter()
        .filter(|(name, _)| *name == "id" || present.contains(name))
        .map(|(name, def)| match def {
            Def::Payload => ShapeColumn {
                name,
                sql_type: payload.sql_type().to_owned(),
                not_null: false,
            },
            Def::Sql(sql) => ShapeColumn {
                name,
                sql_type: sql.split_whitespace().next().unwrap_or_default().to_owned(),
                not_null: sql.contains("NOT NULL")
                    || sql.contains("PRIMARY KEY")
                    || primary_key(kind).contains(name),
            },
        })
        .collect()
}

/// The primary key's columns, in order (`id` for an outbox, `commandid, contextkey` for an inbox).
pub fn primary_key(kind: BoxKind) -> &'static [&'static str] {
    match kind {
        BoxKind::Outbox => &["id"],
        BoxKind::Inbox => &["commandid", "contextkey"],
    }
}

/// The columns with a unique constraint of their own besides the primary key (`messageid` on an
/// outbox).
pub fn unique_columns(kind: BoxKind) -> &'static [&'static str] {
    match kind {
        BoxKind::Outbox => &["messageid"],
        BoxKind::Inbox => &[],
    }
}

fn fresh_shape(kind: BoxKind) -> &'static [(&'static str, Def)] {
    match kind {
        BoxKind::Outbox => OUTBOX_FRESH,
        BoxKind::Inbox => INBOX_FRESH,
    }
}

/// The statements that create a table directly at `number` (normally the latest): the latest
/// shape restricted to the columns that version has, plus the causationid index from V8.
///
/// The runner only asks for a version the catalog has; the shape is always schema-qualified.
pub fn fresh_statements(
    kind: BoxKind,
    payload: Payload,
    table: &QualifiedName,
    number: u32,
) -> Vec<String> {
    let present = kind.columns_at(number);
    let (shape, tail) = match kind {
        BoxKind::Outbox => (OUTBOX_FRESH, None),
        BoxKind::Inbox => (INBOX_FRESH, Some(INBOX_PRIMARY_KEY)),
    };
    let mut lines: Vec<String> = shape
        .iter()
        .filter(|(name, _)| *name == "id" || present.contains(name))
        .map(|(name, def)| match def {
            Def::Payload => format!("{name} {} NULL", payload.sql_type()),
            Def::Sql(sql) => format!("{name} {sql}"),
        })
        .collect();
    lines.extend(tail.map(str::to_owned));
    let mut out = vec![format!(
        "CREATE TABLE {} (\n  {}\n)",
        table.quoted(),
        lines.join(",\n  ")
    )];
    let index = kind
        .versions()
        .iter()
        .any(|v| v.causation_index && v.number <= number);
    if index {
        out.push(causation_index_ddl(table));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_fresh_shape_holds_every_catalog_column() {
        for kind in [BoxKind::Outbox, BoxKind::Inbox] {
            let shape = match kind {
                BoxKind::Outbox => OUTBOX_FRESH,
                BoxKind::Inbox => INBOX_FRESH,
            };
            let fresh: BTreeSet<&str> = shape
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| *n != "id")
                .collect();
            assert_eq!(fresh, kind.columns_at(kind.latest()), "{kind:?}");
        }
    }

    #[test]
    fn the_inbox_primary_key_constraint_names_the_key_columns() {
        let columns = primary_key(BoxKind::Inbox).join(", ");
        assert_eq!(INBOX_PRIMARY_KEY, format!("PRIMARY KEY ({columns})"));
    }

    #[test]
    fn the_shape_of_a_version_has_its_columns_types_and_nullability() {
        let v8 = columns_at(BoxKind::Outbox, Payload::Binary, 8);
        assert_eq!(v8.len(), 24);
        let get = |name: &str| v8.iter().find(|c| c.name == name).unwrap().clone();
        assert_eq!(get("id").sql_type, "bigserial");
        assert!(get("id").not_null && get("messageid").not_null);
        assert_eq!(get("body").sql_type, "bytea");
        assert!(!get("body").not_null && !get("causationid").not_null);
        let v1 = columns_at(BoxKind::Outbox, Payload::Text, 1);
        assert!(v1.iter().all(|c| c.name != "dispatched"));
        let inbox = columns_at(BoxKind::Inbox, Payload::Jsonb, 2);
        let contextkey = inbox.iter().find(|c| c.name == "contextkey").unwrap();
        assert!(contextkey.not_null, "part of the primary key");
    }

    #[test]
    fn fresh_ddl_is_schema_qualified_and_uses_the_payload_type() {
        let t = QualifiedName::parse(Some("public"), "Inbox").unwrap();
        let ddl = fresh_statements(BoxKind::Inbox, Payload::Jsonb, &t, 2);
        assert_eq!(ddl.len(), 1);
        assert!(
            ddl[0].starts_with("CREATE TABLE \"public\".\"inbox\" ("),
            "{}",
            ddl[0]
        );
        assert!(ddl[0].contains("commandbody jsonb NULL"), "{}", ddl[0]);
        let outbox = fresh_statements(BoxKind::Outbox, Payload::Binary, &t, 8);
        assert!(outbox[0].contains("body bytea NULL"));
        assert_eq!(outbox[1], causation_index_ddl(&t));
    }
}
