//! What is in the database now (schema, table, columns, payload type, history), and what a run
//! must therefore do: the path decision is a pure function of those facts.

use std::collections::BTreeMap;

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::ownership::table_comment;
use super::{BoxKind, Decision, Payload, Plan, RunError};
use crate::db::{Read, Session};
use crate::ident::QualifiedName;

/// The table's columns straight from the catalog, looked up by namespace oid and name (an index
/// lookup; the `information_schema` views take tens of milliseconds once there are hundreds of
/// same-named tables in other schemas). No row: no table; one row with a NULL name: a table
/// without columns.
const COLUMNS_SQL: &str = "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, NULL) \
     FROM pg_catalog.pg_class c \
     LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
     WHERE c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1) \
       AND c.relname = $2 AND c.relkind IN ('r', 'p', 'v', 'f')";

/// The select list of [`CATALOG`]: whether the box table's schema exists, whether a history
/// table exists in `public` and in the box schema, and the table's columns (`$1` schema, `$2`
/// table, `$3` history table name).
macro_rules! catalog_columns {
    () => {
        "SELECT \
           EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1), \
           EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relname = $3 \
                   AND relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'public')), \
           EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relname = $3 \
                   AND relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1)), \
           t.oid IS NOT NULL, \
           ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                 WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum), \
           ARRAY(SELECT pg_catalog.format_type(a.atttypid, NULL) FROM pg_catalog.pg_attribute a \
                 WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)"
    };
}

/// The source of [`CATALOG`]: the box table's oid, NULL when it does not exist.
macro_rules! catalog_source {
    () => {
        " FROM (SELECT (SELECT c.oid FROM pg_catalog.pg_class c \
             WHERE c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1) \
               AND c.relname = $2 AND c.relkind IN ('r', 'p', 'v', 'f')) AS oid) t"
    };
}

/// The types of [`CATALOG`]'s and [`CATALOG_AND_HISTORY`]'s parameters.
const CATALOG_PARAMS: &[Type] = &[Type::TEXT, Type::TEXT, Type::TEXT];

/// Everything about the box table's place in the catalog, in one round trip.
const CATALOG: Read = Read {
    sql: concat!(catalog_columns!(), catalog_source!()),
    types: CATALOG_PARAMS,
};

/// [`CATALOG`] plus the highest version `public`'s history records for the table and the
/// table's comment (its ownership record), in one statement and therefore one snapshot: a
/// concurrent commit of a table together with its history row and record is seen whole or not at
/// all. Fails with `42P01` while `public` has no history table.
const CATALOG_AND_HISTORY: Read = Read {
    sql: concat!(
        catalog_columns!(),
        ", (SELECT MAX(h.\"MigrationVersion\") FROM \"public\".\"__BrighterMigrationHistory\" h \
            WHERE h.\"SchemaName\" = $1 AND h.\"BoxTableName\" = $2), ",
        table_comment!("t.oid"),
        catalog_source!()
    ),
    types: CATALOG_PARAMS,
};

/// What [`catalog_with_public_history`] read, all from one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogSnapshot {
    /// The catalog facts.
    pub catalog: Catalog,
    /// The highest version `public`'s history records for the table.
    pub history_version: Option<i32>,
    /// The table's comment (where its ownership record lives), `None` without one or a table.
    pub comment: Option<String>,
}

/// What the catalog says about a box table (see [`catalog`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    /// The box table's schema exists.
    pub schema_exists: bool,
    /// `public."__BrighterMigrationHistory"` exists.
    pub history_in_public: bool,
    /// A history table exists in the box table's own schema.
    pub history_in_schema: bool,
    /// The table's columns, `None` when it does not exist.
    pub table: Option<TableShape>,
}

/// An existing table's columns: lowercase name to data type (as `format_type` spells it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableShape {
    /// Column name to data type (`text`, `bytea`, `character varying`, ...).
    pub columns: BTreeMap<String, String>,
}

/// The facts a path decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The table's shape, `None` when it does not exist.
    pub table: Option<TableShape>,
    /// The highest history version recorded for it, `None` without rows.
    pub history_version: Option<i32>,
}

/// The version a table's columns show (marker column, then V1's set, then the highest complete
/// cumulative set). Extra columns are allowed.
///
/// # Errors
/// [`RunError::NotABrighterTable`] without the marker column; [`RunError::UnknownSchemaVersion`]
/// when V1's columns are incomplete.
pub fn detect_version(
    kind: BoxKind,
    table: &QualifiedName,
    shape: &TableShape,
) -> Result<u32, RunError> {
    let marker = kind.marker_column();
    if !shape.columns.contains_key(marker) {
        return Err(RunError::NotABrighterTable {
            table: table.to_string(),
            kind: kind.as_str(),
            marker,
        });
    }
    let has_all = |n: u32| {
        kind.columns_at(n)
            .iter()
            .all(|c| shape.columns.contains_key(*c))
    };
    if !has_all(1) {
        let missing: Vec<&str> = kind
            .columns_at(1)
            .into_iter()
            .filter(|c| !shape.columns.contains_key(*c))
            .collect();
        return Err(RunError::UnknownSchemaVersion {
            table: table.to_string(),
            kind: kind.as_str(),
            missing: missing.join(", "),
        });
    }
    Ok(kind
        .versions()
        .iter()
        .map(|v| v.number)
        .take_while(|n| has_all(*n))
        .last()
        .unwrap_or(1))
}

/// Checks the payload column's type against the plan's payload mode (text, bytea, json, jsonb).
///
/// # Errors
/// [`RunError::PayloadMismatch`] naming the type found and the mode asked.
pub fn check_payload(plan: &Plan, shape: &TableShape) -> Result<(), RunError> {
    let column = plan.kind().payload_column();
    let Some(found) = shape.columns.get(column) else {
        return Ok(());
    };
    if Payload::from_data_type(found) == Some(plan.payload()) {
        return Ok(());
    }
    Err(RunError::PayloadMismatch {
        table: plan.table().to_string(),
        column,
        found: found.clone(),
        asked: plan.payload(),
        expected: plan.payload().sql_type(),
    })
}

/// Decides the path from the facts, for a validated `target`. `history_table` names the history
/// table in a [`RunError::TableMissing`].
///
/// # Errors
/// [`RunError::TableMissing`], [`RunError::InvalidHistoryVersion`], and the errors of
/// [`detect_version`] and [`check_payload`].
pub fn decide(
    plan: &Plan,
    target: u32,
    facts: &Facts,
    history_table: &str,
) -> Result<Decision, RunError> {
    let kind = plan.kind();
    let history = facts.history_version;
    // A version above `latest` was recorded by a newer Brighter: the table is at or above every
    // target this operator can be asked for, so it is up to date (and never downgraded).
    if let Some(v) = history.filter(|v| *v <= 0) {
        return Err(RunError::InvalidHistoryVersion {
            table: plan.table().to_string(),
            kind: kind.as_str(),
            history_version: v,
        });
    }
    let history = history.and_then(|v| u32::try_from(v).ok());
    let Some(shape) = &facts.table else {
        return match history {
            None => Ok(Decision::Fresh { to: target }),
            Some(v) => Err(RunError::TableMissing {
                table: plan.table().to_string(),
                history_table: history_table.to_owned(),
                history_version: i32::try_from(v).unwrap_or(i32::MAX),
            }),
        };
    };
    match history {
        None => {
            let detected = detect_version(kind, plan.table(), shape)?;
            check_payload(plan, shape)?;
            Ok(Decision::Bootstrap {
                detected,
                to: target,
            })
        }
        Some(from) => {
            check_payload(plan, shape)?;
            if from >= target {
                Ok(Decision::UpToDate { at: from })
            } else {
                Ok(Decision::Normal { from, to: target })
            }
        }
    }
}

/// Reads [`Catalog`] for `table` in one round trip.
///
/// # Errors
/// [`RunError`] classified from the database error.
pub async fn catalog(session: &Session, table: &QualifiedName) -> Result<Catalog, RunError> {
    let op = "reading the catalog";
    let row = session
        .read_one(
            CATALOG,
            &[
                &table.schema.as_str(),
                &table.table.as_str(),
                &super::history::HISTORY_TABLE_NAME,
            ],
        )
        .await
        .map_err(RunError::query(op, table))?;
    catalog_from_row(&row, op, table)
}

/// Reads [`Catalog`], the highest version recorded in `public`'s history for `table` and the
/// table's comment in one statement, so all come from the same snapshot. `None` when `public` has
/// no history table.
///
/// # Errors
/// [`RunError`] classified from the database error.
pub async fn catalog_with_public_history(
    session: &Session,
    table: &QualifiedName,
) -> Result<Option<CatalogSnapshot>, RunError> {
    let op = "reading the catalog and the migration history";
    let row = match session
        .read_one(
            CATALOG_AND_HISTORY,
            &[
                &table.schema.as_str(),
                &table.table.as_str(),
                &super::history::HISTORY_TABLE_NAME,
            ],
        )
        .await
    {
        Ok(row) => row,
        Err(source)
            if source
                .code()
                .is_some_and(|code| *code == SqlState::UNDEFINED_TABLE) =>
        {
            return Ok(None);
        }
        Err(source) => return Err(RunError::query(op, table)(source)),
    };
    let catalog = catalog_from_row(&row, op, table)?;
    let history_version = row.try_get(6).map_err(RunError::query(op, table))?;
    let comment = row.try_get(7).map_err(RunError::query(op, table))?;
    Ok(Some(CatalogSnapshot {
        catalog,
        history_version,
        comment,
    }))
}

fn catalog_from_row(
    row: &tokio_postgres::Row,
    op: &'static str,
    table: &QualifiedName,
) -> Result<Catalog, RunError> {
    let get_bool = |i| {
        row.try_get::<_, bool>(i)
            .map_err(RunError::query(op, table))
    };
    let (schema_exists, history_in_public, history_in_schema, table_exists) =
        (get_bool(0)?, get_bool(1)?, get_bool(2)?, get_bool(3)?);
    let shape = if table_exists {
        let names: Vec<String> = row.try_get(4).map_err(RunError::query(op, table))?;
        let types: Vec<String> = row.try_get(5).map_err(RunError::query(op, table))?;
        Some(TableShape {
            columns: names.into_iter().zip(types).collect(),
        })
    } else {
        None
    };
    Ok(Catalog {
        schema_exists,
        history_in_public,
        history_in_schema,
        table: shape,
    })
}

/// The table's columns, or `None` when it does not exist.
///
/// # Errors
/// [`RunError`] classified from the database error.
pub async fn table_shape(
    client: &Client,
    table: &QualifiedName,
) -> Result<Option<TableShape>, RunError> {
    let op = "reading the table's columns";
    let rows = client
        .query_typed(
            COLUMNS_SQL,
            &[
                (&table.schema.as_str(), Type::TEXT),
                (&table.table.as_str(), Type::TEXT),
            ],
        )
        .await
        .map_err(RunError::query(op, table))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut columns = BTreeMap::new();
    for row in rows {
        let name: Option<String> = row.try_get(0).map_err(RunError::query(op, table))?;
        let ty: Option<String> = row.try_get(1).map_err(RunError::query(op, table))?;
        if let (Some(name), Some(ty)) = (name, ty) {
            columns.insert(name, ty);
        }
    }
    Ok(Some(TableShape { columns }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(kind: BoxKind) -> Plan {
        Plan::new(kind, QualifiedName::parse(None, "outbox").unwrap())
    }

    fn shape(cols: &[&str]) -> TableShape {
        let mut columns: BTreeMap<String, String> = cols
            .iter()
            .map(|c| (c.to_string(), "character varying".into()))
            .collect();
        columns.insert("body".into(), "text".into());
        columns.insert("commandbody".into(), "text".into());
        TableShape { columns }
    }

    #[test]
    fn a_2019_outbox_with_dispatched_detects_as_v2() {
        let cols = [
            "id",
            "messageid",
            "topic",
            "messagetype",
            "timestamp",
            "dispatched",
            "headerbag",
            "body",
        ];
        let t = plan(BoxKind::Outbox).table().clone();
        assert_eq!(
            detect_version(BoxKind::Outbox, &t, &shape(&cols)).unwrap(),
            2
        );
    }

    #[test]
    fn a_later_column_without_the_earlier_ones_does_not_raise_the_version() {
        let cols = [
            "messageid",
            "topic",
            "messagetype",
            "timestamp",
            "headerbag",
            "dispatched",
            "partitionkey",
        ];
        let t = plan(BoxKind::Outbox).table().clone();
        assert_eq!(
            detect_version(BoxKind::Outbox, &t, &shape(&cols)).unwrap(),
            2
        );
    }

    #[test]
    fn a_history_above_the_catalog_is_up_to_date_at_that_version() {
        let facts = Facts {
            table: Some(shape(&[])),
            history_version: Some(9),
        };
        assert_eq!(
            decide(&plan(BoxKind::Outbox), 8, &facts, "h").unwrap(),
            Decision::UpToDate { at: 9 }
        );
    }

    #[test]
    fn a_history_above_the_catalog_without_its_table_is_still_a_missing_table() {
        let facts = Facts {
            table: None,
            history_version: Some(9),
        };
        let err = decide(&plan(BoxKind::Outbox), 8, &facts, "h").unwrap_err();
        assert!(matches!(err, RunError::TableMissing { .. }), "{err}");
    }

    #[test]
    fn a_history_version_of_zero_is_refused() {
        let facts = Facts {
            table: Some(shape(&[])),
            history_version: Some(0),
        };
        let err = decide(&plan(BoxKind::Outbox), 8, &facts, "h").unwrap_err();
        assert!(err.to_string().contains("V0"), "{err}");
    }

    #[test]
    fn a_table_above_the_target_is_left_alone() {
        let facts = Facts {
            table: Some(shape(&[])),
            history_version: Some(8),
        };
        assert_eq!(
            decide(&plan(BoxKind::Outbox), 5, &facts, "h").unwrap(),
            Decision::UpToDate { at: 8 }
        );
    }
}
