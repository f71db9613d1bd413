//! Brighter's migration history table, `"<schema>"."__BrighterMigrationHistory"`: where it lives,
//! creating it race-safely, seeding a per-schema copy from `public`, and reading and writing rows.
//!
//! Table and column names are quoted mixed case exactly as Brighter writes them; row values are the
//! lowercased schema and table names. Every value goes through a `$n` parameter.

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::{HistoryScope, RunError};
use crate::db::{Read, Session, pipeline};
use crate::ident::{DEFAULT_SCHEMA, Ident, QualifiedName};

/// The history table's name (quoted, mixed case).
pub const HISTORY_TABLE: &str = "\"__BrighterMigrationHistory\"";
/// The history table's unquoted name, for catalog lookups.
pub const HISTORY_TABLE_NAME: &str = "__BrighterMigrationHistory";

/// SQLSTATEs that mean another session created the history table at the same moment.
pub const CREATE_RACE_SQLSTATES: [SqlState; 3] = [
    SqlState::UNIQUE_VIOLATION,
    SqlState::DUPLICATE_TABLE,
    SqlState::DUPLICATE_OBJECT,
];

/// [`HistoryTable::max_version_sql`] of `public`'s history, as a constant the session can keep
/// prepared (a unit test holds the two texts equal).
const PUBLIC_MAX_VERSION: Read = Read {
    sql: "SELECT MAX(\"MigrationVersion\") FROM \"public\".\"__BrighterMigrationHistory\" \
          WHERE \"SchemaName\" = $1 AND \"BoxTableName\" = $2",
    types: &[Type::TEXT, Type::TEXT],
};
const SAVEPOINT: &str = "SAVEPOINT boxtable_history";
/// Undoes a failed creation and leaves the savepoint, in one message.
const ROLLBACK_TO_AND_RELEASE_SAVEPOINT: &str =
    "ROLLBACK TO SAVEPOINT boxtable_history; RELEASE SAVEPOINT boxtable_history";
const RELEASE_SAVEPOINT: &str = "RELEASE SAVEPOINT boxtable_history";

const EXISTS_SQL: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class \
     WHERE relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1) AND relname = $2)";

/// Where a box table's history rows live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryTable {
    /// `public."__BrighterMigrationHistory"`.
    Public,
    /// The history table in a box table's own (non-public) schema.
    InSchema(Ident),
}

impl HistoryTable {
    /// The history table for `table` in `scope`: `public` (Global) or the box table's schema
    /// (PerSchema).
    pub fn for_table(table: &QualifiedName, scope: HistoryScope) -> Self {
        match scope {
            HistoryScope::PerSchema if table.schema.as_str() != DEFAULT_SCHEMA => {
                HistoryTable::InSchema(table.schema.clone())
            }
            _ => HistoryTable::Public,
        }
    }

    /// The schema it lives in, unquoted.
    pub fn schema_name(&self) -> &str {
        match self {
            HistoryTable::Public => DEFAULT_SCHEMA,
            HistoryTable::InSchema(schema) => schema.as_str(),
        }
    }

    /// `"schema"."__BrighterMigrationHistory"` for SQL text.
    pub fn quoted(&self) -> String {
        match self {
            HistoryTable::Public => format!("\"{DEFAULT_SCHEMA}\".{HISTORY_TABLE}"),
            HistoryTable::InSchema(schema) => format!("{}.{HISTORY_TABLE}", schema.quoted()),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` with Brighter's exact shape.
    pub fn create_sql(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n  \
             \"MigrationVersion\" INT NOT NULL,\n  \
             \"SchemaName\" VARCHAR(256) NOT NULL DEFAULT 'public',\n  \
             \"BoxTableName\" VARCHAR(256) NOT NULL,\n  \
             \"Description\" VARCHAR(512) NOT NULL,\n  \
             \"AppliedAt\" TIMESTAMPTZ NOT NULL DEFAULT NOW(),\n  \
             PRIMARY KEY (\"SchemaName\", \"BoxTableName\", \"MigrationVersion\"))",
            self.quoted()
        )
    }

    /// `INSERT` of one history row: `$1` version, `$2` schema, `$3` table, `$4` description.
    pub(super) fn insert_sql(&self) -> String {
        format!(
            "INSERT INTO {} (\"MigrationVersion\", \"SchemaName\", \"BoxTableName\", \"Description\") \
             VALUES ($1, $2, $3, $4)",
            self.quoted()
        )
    }

    /// `SELECT MAX("MigrationVersion")` for one table (`$1` schema, `$2` table).
    fn max_version_sql(&self) -> String {
        format!(
            "SELECT MAX(\"MigrationVersion\") FROM {} WHERE \"SchemaName\" = $1 AND \"BoxTableName\" = $2",
            self.quoted()
        )
    }

    fn delete_sql(&self) -> String {
        format!(
            "DELETE FROM {} WHERE \"SchemaName\" = $1 AND \"BoxTableName\" = $2",
            self.quoted()
        )
    }

    /// Copies `from`'s rows for one table into this table where their version is missing, keeping
    /// Description and AppliedAt.
    pub(super) fn seed_sql(&self, from: &HistoryTable) -> String {
        format!(
            "INSERT INTO {to} (\"MigrationVersion\", \"SchemaName\", \"BoxTableName\", \"Description\", \"AppliedAt\") \
             SELECT g.\"MigrationVersion\", g.\"SchemaName\", g.\"BoxTableName\", g.\"Description\", g.\"AppliedAt\" \
             FROM {from} g WHERE g.\"SchemaName\" = $1 AND g.\"BoxTableName\" = $2 \
             AND NOT EXISTS (SELECT 1 FROM {to} p WHERE p.\"SchemaName\" = g.\"SchemaName\" \
             AND p.\"BoxTableName\" = g.\"BoxTableName\" AND p.\"MigrationVersion\" = g.\"MigrationVersion\")",
            to = self.quoted(),
            from = from.quoted()
        )
    }
}

/// Whether `history` exists.
///
/// # Errors
/// [`RunError::Query`] (classified) when the lookup fails.
pub async fn exists(
    client: &Client,
    history: &HistoryTable,
    table: &QualifiedName,
) -> Result<bool, RunError> {
    let row = client
        .query_typed_one(
            EXISTS_SQL,
            &[
                (&history.schema_name(), Type::TEXT),
                (&HISTORY_TABLE_NAME, Type::TEXT),
            ],
        )
        .await
        .map_err(RunError::query("looking up the history table", table))?;
    row.try_get(0)
        .map_err(RunError::query("looking up the history table", table))
}

/// Creates the history table if missing, inside a savepoint, treating a concurrent creation (by a
/// session that does not take this table's lock) as success. Runs inside the caller's transaction.
///
/// `SAVEPOINT`, `CREATE TABLE IF NOT EXISTS` and `RELEASE SAVEPOINT` go out together, one round
/// trip, each still its own message (so the `CREATE` is byte for byte the statement a plan lists).
/// A failed `CREATE` aborts the transaction back to the savepoint (the `RELEASE` after it then
/// fails with `25P02`); one more message rolls back to the savepoint and releases it. Returns
/// whether that happened (a concurrent creation): statements sent after this one in the same
/// batch failed too and must be sent again.
///
/// # Errors
/// [`RunError`] classified from the database error (privilege, missing schema, other).
///
/// # Idempotency
/// An existing history table is left as it is.
pub async fn ensure_table(
    client: &Client,
    history: &HistoryTable,
    table: &QualifiedName,
) -> Result<bool, RunError> {
    let op = "creating the history table";
    let create = history.create_sql();
    let mut answers = pipeline::in_order(vec![
        client.batch_execute(SAVEPOINT),
        client.batch_execute(&create),
        client.batch_execute(RELEASE_SAVEPOINT),
    ])
    .await
    .into_iter();
    let (saved, created, released) = (answers.next(), answers.next(), answers.next());
    saved.transpose().map_err(RunError::query(op, table))?;
    match created {
        Some(Err(source)) => {
            let raced = source
                .code()
                .is_some_and(|code| CREATE_RACE_SQLSTATES.contains(code));
            if !raced {
                return Err(RunError::query(op, table)(source));
            }
            client
                .batch_execute(ROLLBACK_TO_AND_RELEASE_SAVEPOINT)
                .await
                .map_err(RunError::query(op, table))?;
            Ok(true)
        }
        _ => {
            released.transpose().map_err(RunError::query(op, table))?;
            Ok(false)
        }
    }
}

/// Copies this table's rows from `public`'s history into `history` (PerSchema), keeping
/// Description and AppliedAt, for versions not there yet. Returns the rows copied.
///
/// # Errors
/// [`RunError`] classified from the database error.
///
/// # Idempotency
/// Rows already present are skipped; a missing `public` history table copies nothing.
pub async fn seed_from_public(
    client: &Client,
    history: &HistoryTable,
    table: &QualifiedName,
) -> Result<u64, RunError> {
    let public = HistoryTable::Public;
    if *history == public || !exists(client, &public, table).await? {
        return Ok(0);
    }
    client
        .execute(
            &history.seed_sql(&public),
            &[&table.schema.as_str(), &table.table.as_str()],
        )
        .await
        .map_err(RunError::query(
            "seeding the per-schema history from public",
            table,
        ))
}

/// The highest recorded version for `table`, if any row exists.
///
/// # Errors
/// [`RunError`] classified from the database error.
pub async fn max_version(
    session: &Session,
    history: &HistoryTable,
    table: &QualifiedName,
) -> Result<Option<i32>, RunError> {
    let (schema, name) = (table.schema.as_str(), table.table.as_str());
    let read = match history {
        // One text for every table, so the session keeps it prepared.
        HistoryTable::Public => {
            session
                .read_one(PUBLIC_MAX_VERSION, &[&schema, &name])
                .await
        }
        // A text per schema: unnamed, so a session keeps no statement per tenant.
        HistoryTable::InSchema(_) => {
            session
                .client()
                .query_typed_one(
                    &history.max_version_sql(),
                    &[(&schema, Type::TEXT), (&name, Type::TEXT)],
                )
                .await
        }
    };
    let row = read.map_err(RunError::query("reading the migration history", table))?;
    row.try_get(0)
        .map_err(RunError::query("reading the migration history", table))
}

/// Deletes every history row of `table` in `history`, returning how many went.
///
/// # Errors
/// [`RunError`] classified from the database error.
pub async fn delete_rows(
    client: &Client,
    history: &HistoryTable,
    table: &QualifiedName,
) -> Result<u64, RunError> {
    client
        .execute(
            &history.delete_sql(),
            &[&table.schema.as_str(), &table.table.as_str()],
        )
        .await
        .map_err(RunError::query("deleting history rows", table))
}

/// `fresh install at V<n>`.
pub fn fresh_description(version: u32) -> String {
    format!("fresh install at V{version}")
}

/// `bootstrap: detected at V<n>`.
pub fn bootstrap_description(version: u32) -> String {
    format!("bootstrap: detected at V{version}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prepared_read_of_publics_highest_version_is_the_same_text_as_the_built_one() {
        let built = HistoryTable::Public.max_version_sql();
        let squeeze = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(squeeze(PUBLIC_MAX_VERSION.sql), squeeze(&built));
    }

    #[test]
    fn global_history_lives_in_public_and_per_schema_in_the_box_schema() {
        let t = QualifiedName::parse(Some("Sales"), "Outbox").unwrap();
        assert_eq!(
            HistoryTable::for_table(&t, HistoryScope::Global).quoted(),
            "\"public\".\"__BrighterMigrationHistory\""
        );
        assert_eq!(
            HistoryTable::for_table(&t, HistoryScope::PerSchema).quoted(),
            "\"sales\".\"__BrighterMigrationHistory\""
        );
    }

    #[test]
    fn descriptions_match_brighters_wording() {
        assert_eq!(fresh_description(8), "fresh install at V8");
        assert_eq!(bootstrap_description(2), "bootstrap: detected at V2");
    }
}
