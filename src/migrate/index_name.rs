//! The replay index's name before it is created: Brighter names it `idx_<table>_causationid`
//! (its contract, kept as is), and PostgreSQL cuts a name longer than 63 bytes, so two tables with
//! long names can share one index name, or another relation of the schema can already hold it.
//! `CREATE INDEX IF NOT EXISTS` would then skip the index without an error and leave the table
//! without it; the run refuses instead, naming both, before any statement changes anything.

use tokio_postgres::types::Type;

use super::Decision;
use super::catalog::{causation_index_name, causation_index_stored_name, creates_causation_index};
use super::{Plan, RunError};
use crate::db::{Read, Session};

/// What holds the name `$2` in schema `$1`: its kind (`pg_class.relkind`), its name, and, for an
/// index, the schema-qualified table it is on. No row: the name is free.
const NAME_HOLDER: Read = Read {
    sql: "SELECT c.relkind::text, c.relname::text, \
                 tn.nspname::text || '.' || t.relname::text \
            FROM pg_catalog.pg_class c \
            LEFT JOIN pg_catalog.pg_index x ON x.indexrelid = c.oid \
            LEFT JOIN pg_catalog.pg_class t ON t.oid = x.indrelid \
            LEFT JOIN pg_catalog.pg_namespace tn ON tn.oid = t.relnamespace \
           WHERE c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1) \
             AND c.relname = $2",
    types: &[Type::TEXT, Type::TEXT],
};

/// Checks, inside the migration transaction and before its statements, that the replay index
/// the run is about to create can be created under its name: nothing in the table's schema holds
/// that name, or only the table's own index does (which `IF NOT EXISTS` rightly keeps).
///
/// # Errors
/// [`RunError::IndexNameTaken`] naming the index, the table and what holds the name; a failed
/// read is classified as any query's.
///
/// # Idempotency
/// Read-only.
pub(super) async fn ensure_free(
    session: &Session,
    plan: &Plan,
    decision: Decision,
) -> Result<(), RunError> {
    let table = plan.table();
    let creates = match decision {
        Decision::UpToDate { .. } => false,
        decision => {
            creates_causation_index(plan.kind(), decision.from_version(), decision.to_version())
        }
    };
    if !creates {
        return Ok(());
    }
    let stored = causation_index_stored_name(table);
    let op = "looking up the replay index's name";
    let rows = session
        .read(NAME_HOLDER, &[&table.schema.as_str(), &stored.as_str()])
        .await
        .map_err(RunError::query(op, table))?;
    let Some(row) = rows.first() else {
        return Ok(());
    };
    let kind: String = row.try_get(0).map_err(RunError::query(op, table))?;
    let name: String = row.try_get(1).map_err(RunError::query(op, table))?;
    let on: Option<String> = row.try_get(2).map_err(RunError::query(op, table))?;
    let qualified = format!("{}.{name}", table.schema);
    let (holder, remedy) = match (kind.as_str(), on) {
        (_, Some(on)) if on == table.to_string() => return Ok(()),
        ("i" | "I", Some(on)) => (
            format!("the index {qualified} of table {on}"),
            format!(
                "rename that index (ALTER INDEX {qualified} RENAME TO <another name>; it keeps serving {on})"
            ),
        ),
        (kind, _) => {
            let what = relation_kind(kind);
            (format!("{what} {qualified}"), format!("rename {what}"))
        }
    };
    let full = causation_index_name(table);
    let index = if full == stored {
        stored
    } else {
        format!("{stored} (Brighter's name {full}, cut by PostgreSQL to 63 bytes)")
    };
    Err(RunError::IndexNameTaken {
        table: table.to_string(),
        index,
        holder,
        remedy,
    })
}

/// What `pg_class.relkind` calls a relation, for messages.
fn relation_kind(relkind: &str) -> &'static str {
    match relkind {
        "r" | "p" => "the table",
        "S" => "the sequence",
        "v" => "the view",
        "m" => "the materialized view",
        "f" => "the foreign table",
        "c" => "the composite type",
        _ => "the relation",
    }
}
