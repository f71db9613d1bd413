//! Reading a table's actual shape (columns with their type modifiers, nullability and defaults,
//! and its indexes) from the system catalog, and comparing it with the shape its recorded version
//! implies (see [`super::drift`]). Read-only, without the lock.

use tokio_postgres::types::Type;

use super::drift::{self, ActualColumn, ActualIndex, ActualShape, DriftReport};
use super::{Plan, RunError};
use crate::db::{Read, Session};
use crate::ident::QualifiedName;

/// The table's oid from its schema (`$1`) and name (`$2`).
macro_rules! table_oid {
    () => {
        "(SELECT c.oid FROM pg_catalog.pg_class c \
           WHERE c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1) \
             AND c.relname = $2 AND c.relkind IN ('r', 'p'))"
    };
}

/// Every live column in order: name, type with modifier, `NOT NULL`, and whether an insert may
/// leave it out (a default, an identity or a generated column).
const COLUMNS: Read = Read {
    sql: concat!(
        "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, \
                a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' \
           FROM pg_catalog.pg_attribute a \
          WHERE a.attrelid = ",
        table_oid!(),
        " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
    ),
    types: &[Type::TEXT, Type::TEXT],
};

/// Every index: name, primary, unique, valid, partial, and its key columns in order (NULL for an
/// expression; included non-key columns left out).
const INDEXES: Read = Read {
    sql: concat!(
        "SELECT i.relname::text, x.indisprimary, x.indisunique, x.indisvalid, x.indpred IS NOT NULL, \
                ARRAY(SELECT a.attname::text \
                        FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) \
                        LEFT JOIN pg_catalog.pg_attribute a \
                          ON a.attrelid = x.indrelid AND a.attnum = k.attnum \
                       WHERE k.n <= x.indnkeyatts ORDER BY k.n) \
           FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid \
          WHERE x.indrelid = ",
        table_oid!(),
        " ORDER BY i.relname"
    ),
    types: &[Type::TEXT, Type::TEXT],
};

/// Reads the table's actual shape; `None` when the table does not exist. Both reads go out in
/// one round trip.
///
/// # Errors
/// [`RunError`] classified from the database error.
pub async fn actual_shape(
    session: &Session,
    table: &QualifiedName,
) -> Result<Option<ActualShape>, RunError> {
    let op = "reading the table's shape";
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
        [&table.schema.as_str(), &table.table.as_str()];
    let (columns, indexes) = futures::future::join(
        session.read(COLUMNS, &params),
        session.read(INDEXES, &params),
    )
    .await;
    let rows = columns.map_err(RunError::query(op, table))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut columns = Vec::with_capacity(rows.len());
    for row in rows {
        columns.push(ActualColumn {
            name: row.try_get(0).map_err(RunError::query(op, table))?,
            data_type: row.try_get(1).map_err(RunError::query(op, table))?,
            not_null: row.try_get(2).map_err(RunError::query(op, table))?,
            has_default: row.try_get(3).map_err(RunError::query(op, table))?,
        });
    }
    let rows = indexes.map_err(RunError::query(op, table))?;
    let mut indexes = Vec::with_capacity(rows.len());
    for row in rows {
        indexes.push(ActualIndex {
            name: row.try_get(0).map_err(RunError::query(op, table))?,
            primary: row.try_get(1).map_err(RunError::query(op, table))?,
            unique: row.try_get(2).map_err(RunError::query(op, table))?,
            valid: row.try_get(3).map_err(RunError::query(op, table))?,
            partial: row.try_get(4).map_err(RunError::query(op, table))?,
            columns: row.try_get(5).map_err(RunError::query(op, table))?,
        });
    }
    Ok(Some(ActualShape { columns, indexes }))
}

/// Compares the table with the shape of `version` (its history's). `None` when there is nothing
/// to compare: no table, or a version this operator's catalog does not know (a newer Brighter's).
///
/// # Errors
/// [`RunError`] classified from the database error.
///
/// # Idempotency
/// Read-only.
pub async fn drift(
    session: &Session,
    plan: &Plan,
    version: u32,
) -> Result<Option<DriftReport>, RunError> {
    if !comparable(plan, version) {
        return Ok(None);
    }
    Ok(actual_shape(session, plan.table())
        .await?
        .and_then(|actual| compare(plan, version, &actual)))
}

/// Whether the catalog knows `version`'s shape, so that a table at it can be compared.
fn comparable(plan: &Plan, version: u32) -> bool {
    version != 0 && plan.kind().version(version).is_some()
}

/// Compares `actual`, read before, with the shape of `version` (see [`drift`]).
pub fn compare(plan: &Plan, version: u32, actual: &ActualShape) -> Option<DriftReport> {
    comparable(plan, version)
        .then(|| drift::compare(plan.kind(), plan.payload(), plan.table(), version, actual))
}
