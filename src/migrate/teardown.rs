//! Dropping a box table (`deletionPolicy: Drop`): the table and its history rows go together, in
//! one transaction under the advisory lock.

use tokio_util::sync::CancellationToken;

use super::history::{self, HistoryTable};
use super::runner::{locked, preflight};
use super::{Plan, RunError, detect};
use crate::db::Session;
use crate::lock::{self, AcquireReport, LockIdentity};

/// What dropping a box table did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropOutcome {
    /// Whether the table existed before the drop.
    pub table_existed: bool,
    /// History rows deleted from the scope's history table.
    pub history_rows_deleted: u64,
    /// The lock wait.
    pub lock: AcquireReport,
}

/// Drops the box table and deletes its rows from the scope's history table, in one transaction
/// under the lock (`deletionPolicy: Drop`). A table without the marker column is refused.
///
/// # Errors
/// [`RunError::NotABrighterTable`], lock errors, classified database errors, [`RunError::Cancelled`].
///
/// # Cancel safety
/// As [`super::run`]: on cancellation the transaction is rolled back and the lock released.
///
/// # Idempotency
/// A table already gone (or a schema already gone) is success.
pub async fn drop_box_table(
    session: &mut Session,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<DropOutcome, RunError> {
    let session = &*session;
    let client = session.client();
    let identity = LockIdentity::for_table(&plan.table);
    preflight(session, plan, &identity).await?;
    let report = lock::acquire(client, &identity, plan.lock_timeout, cancel, |_| ())
        .await
        .map_err(RunError::from)?;
    let work = async {
        let table = &plan.table;
        let shape = detect::table_shape(client, table).await?;
        if let Some(shape) = &shape {
            let marker = plan.kind.marker_column();
            if !shape.columns.contains_key(marker) {
                return Err(RunError::NotABrighterTable {
                    table: table.to_string(),
                    kind: plan.kind.as_str(),
                    marker,
                });
            }
            let sql = format!("DROP TABLE IF EXISTS {}", table.quoted());
            client
                .batch_execute(&sql)
                .await
                .map_err(RunError::query("dropping the table", table))?;
        }
        // A PerSchema table's rows may also remain in `public` (the seed source); leaving them
        // would seed them back into a re-created table's history and report it as TableMissing.
        let mut sources = vec![HistoryTable::for_table(table, plan.history_scope)];
        if sources[0] != HistoryTable::Public {
            sources.push(HistoryTable::Public);
        }
        let mut deleted = 0;
        for history in &sources {
            if history::exists(client, history, table).await? {
                deleted += history::delete_rows(client, history, table).await?;
            }
        }
        Ok(DropOutcome {
            table_existed: shape.is_some(),
            history_rows_deleted: deleted,
            lock: report,
        })
    };
    locked(session, plan, &identity, cancel, work).await
}
