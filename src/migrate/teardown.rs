//! Dropping a box table (`deletionPolicy: Drop`): in one transaction under the advisory lock, the
//! table is locked against replacement, its ownership record re-checked, its rows counted, and only
//! a table the BoxTable owns, with consent for the data it holds, is dropped with its history rows.

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::history::{self, HistoryTable};
use super::ownership::{self, Claim, Origin, Owner, OwnerRecord};
use super::runner::{before_lock, locked, preflight, still_held};
use super::{BoxKind, Plan, RunError, detect};
use crate::db::Session;
use crate::ident::QualifiedName;
use crate::lock::{self, AcquireReport, Holder};

/// The outbox column that is NULL until a message has been sent.
const DISPATCHED_COLUMN: &str = "dispatched";

/// Who asks for the drop, and what they allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropRequest {
    /// The BoxTable being deleted: only a table it owns is dropped.
    pub owner: Owner,
    /// The user confirmed dropping this table's data (rows, or a table the operator adopted).
    pub consent: bool,
    /// `suspend: true`: the operator changes nothing, so it does not drop either.
    pub suspended: bool,
}

/// How many rows a table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    /// Every row.
    pub total: u64,
    /// For an outbox, messages never sent (`Dispatched IS NULL`); `None` for an inbox (or an
    /// outbox older than V2, which has no such column).
    pub undispatched: Option<u64>,
}

/// Why a drop waits for the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropBlock {
    /// The BoxTable is suspended.
    Suspended,
    /// The table holds rows, or was adopted rather than created, and consent was not given.
    NeedsConsent {
        /// Created or adopted.
        origin: Origin,
        /// What it holds.
        rows: Rows,
    },
}

/// What the drop found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropVerdict {
    /// The table (and its history rows) were dropped.
    Dropped {
        /// Created or adopted by the owner.
        origin: Origin,
        /// What the table held.
        rows: Rows,
    },
    /// There was no table; its history rows (if any) were removed.
    AlreadyGone,
    /// The table is not this BoxTable's (another owns it, or nobody does: made by an
    /// application, or created again since): it was left alone, history included.
    Kept {
        /// The record found, `None` when the table has none.
        owner: Option<OwnerRecord>,
    },
    /// Nothing changed; the drop waits for the user.
    Blocked(DropBlock),
}

/// What a drop did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropOutcome {
    /// The verdict.
    pub verdict: DropVerdict,
    /// History rows deleted from the scope's history table (and `public`'s seed rows).
    pub history_rows_deleted: u64,
    /// The lock wait.
    pub lock: AcquireReport,
    /// The sessions found blocked in `pg_advisory_lock` on the lock just before it was released.
    pub blocked: lock::Blocked,
}

impl DropOutcome {
    /// Whether the table existed and was dropped.
    pub fn dropped(&self) -> bool {
        matches!(self.verdict, DropVerdict::Dropped { .. })
    }
}

/// Drops the box table and deletes its rows from the scope's history table, in one transaction
/// under the lock, if `request.owner` owns it and the user allowed it.
///
/// `on_waiting` is called once, with the holder when it can be seen, if the lock is found taken.
///
/// # Errors
/// [`RunError::NotABrighterTable`], lock errors, classified database errors, [`RunError::Cancelled`].
///
/// # Cancel safety
/// As [`super::run`]: on cancellation the transaction is rolled back and the lock released.
///
/// # Idempotency
/// A table already gone (or a schema already gone) is [`DropVerdict::AlreadyGone`]; a blocked or
/// kept table is left exactly as it was.
pub async fn drop_box_table(
    session: &mut Session,
    plan: &Plan,
    request: &DropRequest,
    cancel: &CancellationToken,
    on_waiting: impl FnOnce(Option<Holder>) + Send,
) -> Result<DropOutcome, RunError> {
    let session = &*session;
    let client = session.client();
    let identity = plan.lock();
    let waits = async {
        preflight(session, plan, identity).await?;
        lock::acquire(session, identity, plan.lock_timeout(), cancel, on_waiting)
            .instrument(
                tracing::info_span!("lock_wait", table = %plan.table(), lock_key = %identity.lock_key()),
            )
            .await
            .map_err(RunError::from)
    };
    let report = before_lock(session, identity, cancel, waits).await?;
    let work = async {
        let table = plan.table();
        let verdict = decide_and_drop(client, plan, request).await?;
        let history_rows_deleted = match verdict {
            DropVerdict::Dropped { .. } | DropVerdict::AlreadyGone => {
                delete_history(client, plan).await?
            }
            DropVerdict::Kept { .. } | DropVerdict::Blocked(_) => 0,
        };
        tracing::debug!(table = %table, ?verdict, history_rows_deleted, "drop decided");
        let held = still_held(session, identity).await?;
        let outcome = DropOutcome {
            verdict,
            history_rows_deleted,
            lock: report,
            blocked: lock::Blocked::default(),
        };
        Ok((outcome, held))
    };
    // A drop that committed is done even if the lock was already gone at unlock (logged there).
    locked(
        session,
        plan,
        identity,
        cancel,
        work,
        std::future::ready(()),
    )
    .instrument(tracing::info_span!("drop", table = %plan.table()))
    .await
    .map(|committed| DropOutcome {
        blocked: committed.blocked,
        ..committed.value
    })
}

/// Inside the transaction: locks the table against replacement, re-checks its owner, counts its
/// rows, and drops it when allowed.
async fn decide_and_drop(
    client: &Client,
    plan: &Plan,
    request: &DropRequest,
) -> Result<DropVerdict, RunError> {
    let table = plan.table();
    if detect::table_shape(client, table).await?.is_none() {
        return Ok(DropVerdict::AlreadyGone);
    }
    // From here until COMMIT the table cannot be dropped or replaced by anyone else, so the
    // record checked is the record of the table dropped.
    client
        .batch_execute(&ownership::lock_sql(table))
        .await
        .map_err(RunError::query("locking the table", table))?;
    let Some(shape) = detect::table_shape(client, table).await? else {
        return Ok(DropVerdict::AlreadyGone);
    };
    let comment = ownership::read_comment(client, table).await?.flatten();
    // A record of this BoxTable's identity under an older uid is its own (a re-created object
    // deleting the table it took back); a takeover is never asked for by a drop.
    let origin = match ownership::judge(comment.as_deref(), &request.owner) {
        Claim::Ours(origin) => origin,
        Claim::Reclaimed(record) => record.origin,
        Claim::Unowned => return Ok(DropVerdict::Kept { owner: None }),
        Claim::Theirs(record) | Claim::TakenOver(record) => {
            return Ok(DropVerdict::Kept {
                owner: Some(record),
            });
        }
    };
    let marker = plan.kind().marker_column();
    if !shape.columns.contains_key(marker) {
        return Err(RunError::NotABrighterTable {
            table: table.to_string(),
            kind: plan.kind().as_str(),
            marker,
        });
    }
    if request.suspended {
        return Ok(DropVerdict::Blocked(DropBlock::Suspended));
    }
    let has_dispatched =
        plan.kind() == BoxKind::Outbox && shape.columns.contains_key(DISPATCHED_COLUMN);
    let rows = count_rows(client, table, has_dispatched).await?;
    let needs_consent = origin == Origin::Adopted || rows.total > 0;
    if needs_consent && !request.consent {
        return Ok(DropVerdict::Blocked(DropBlock::NeedsConsent {
            origin,
            rows,
        }));
    }
    client
        .batch_execute(&format!("DROP TABLE {}", table.quoted()))
        .await
        .map_err(RunError::query("dropping the table", table))?;
    Ok(DropVerdict::Dropped { origin, rows })
}

/// Counts every row and, for an outbox with a `Dispatched` column, the unsent ones.
async fn count_rows(
    client: &Client,
    table: &QualifiedName,
    has_dispatched: bool,
) -> Result<Rows, RunError> {
    let op = "counting the table's rows";
    let sql = if has_dispatched {
        format!(
            "SELECT count(*), count(*) FILTER (WHERE {DISPATCHED_COLUMN} IS NULL) FROM {}",
            table.quoted()
        )
    } else {
        format!("SELECT count(*), NULL::int8 FROM {}", table.quoted())
    };
    let row = client
        .query_typed_one(&sql, &[])
        .await
        .map_err(RunError::query(op, table))?;
    let total: i64 = row.try_get(0).map_err(RunError::query(op, table))?;
    let undispatched: Option<i64> = row.try_get(1).map_err(RunError::query(op, table))?;
    let count = |n: i64| u64::try_from(n).unwrap_or_default();
    Ok(Rows {
        total: count(total),
        undispatched: undispatched.map(count),
    })
}

/// Deletes the table's history rows. A PerSchema table's rows may also remain in `public` (the
/// seed source); leaving them would seed them back into a re-created table's history and report
/// it as TableMissing.
async fn delete_history(client: &Client, plan: &Plan) -> Result<u64, RunError> {
    let table = plan.table();
    let mut sources = vec![plan.history().clone()];
    if sources[0] != HistoryTable::Public {
        sources.push(HistoryTable::Public);
    }
    let mut deleted = 0;
    for history in &sources {
        if history::exists(client, history, table).await? {
            deleted += history::delete_rows(client, history, table).await?;
        }
    }
    Ok(deleted)
}
