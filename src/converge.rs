//! One box table against its database, without Kubernetes: borrow a session from the
//! [`SessionPool`] ([`checkout`]), then observe, preview or drop, and hand the session back only if
//! the step ended cleanly. The run itself is [`crate::pass::migrate()`]. The controller and the
//! `migrate` command both go through here, so they share one code path.

use tokio_util::sync::CancellationToken;

use crate::db::pool::CheckoutError;
use crate::db::{ConnectError, Connection, PooledSession, SessionKey, SessionPool};

use crate::lock::Holder;
use crate::migrate::{self, DropOutcome, DropRequest, Observation, Plan, RunError};
use crate::reason::Reason;

/// Where a box table lives: the database target (parsed settings and TLS files).
pub struct Target<'a> {
    /// The database target, read from a Secret or given on the command line.
    pub connection: &'a Connection,
    /// `application_name` for the session, so a holder can be recognised in `pg_stat_activity`.
    pub application_name: &'a str,
    /// Where the connection string came from (a Secret), so that the sessions opened with its
    /// previous contents are closed once it changes; `None` when it cannot change.
    pub source: Option<&'a str>,
}

/// Why converging failed. Each variant names the step; `reason()` gives the bounded reason.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    /// The session could not be opened.
    #[error("could not open a session")]
    Connect(#[source] ConnectError),
    /// Shutdown came while the pass waited for a free session.
    #[error("cancelled while waiting for a free session to {table}")]
    Cancelled {
        /// The table the pass was for.
        table: String,
    },
    /// The run, observation or drop failed.
    #[error("{operation} failed")]
    Run {
        /// migrate, observe or drop.
        operation: &'static str,
        /// The runner's error.
        #[source]
        source: RunError,
    },
}

impl ConvergeError {
    /// What the status says about this failure: the error chain, without the "migration failed"
    /// wrapper of a run (the runner's error names what was attempted, or what was found before
    /// anything was attempted, like a missing schema).
    pub fn message(&self) -> String {
        match self {
            ConvergeError::Run { source, .. } => crate::report::chain(source),
            other => crate::report::chain(other),
        }
    }

    /// The bounded reason for status, events and metrics.
    pub fn reason(&self) -> Reason {
        match self {
            ConvergeError::Connect(e) => e.reason(),
            ConvergeError::Cancelled { .. } => Reason::Cancelled,
            ConvergeError::Run { source, .. } => source.reason(),
        }
    }
}

/// Borrows a session for `target` from `pool` (waiting while the target's sessions are all lent).
///
/// # Errors
/// [`ConvergeError::Connect`] or, when `cancel` fires while waiting, [`ConvergeError::Cancelled`].
pub async fn checkout<'p>(
    pool: &'p SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<PooledSession<'p>, ConvergeError> {
    let key = SessionKey::of(target.connection);
    pool.checkout(&key, target.source, target.application_name, cancel)
        .await
        .map_err(|error| match error {
            CheckoutError::Connect(error) => ConvergeError::Connect(error),
            CheckoutError::Cancelled => ConvergeError::Cancelled {
                table: plan.table().to_string(),
            },
        })
}

/// Reports where the table stands without changing anything (for `suspend: true`).
///
/// # Errors
/// [`ConvergeError`] for the step that failed.
pub async fn observe(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<Observation, ConvergeError> {
    let mut lent = checkout(pool, target, plan, cancel).await?;
    let observation = migrate::observe(lent.session(), plan)
        .await
        .map_err(|source| ConvergeError::Run {
            operation: "observation",
            source,
        })?;
    lent.give_back().await;
    Ok(observation)
}

/// What a run would do now and the statements it would send, read without the lock
/// (`migrate --dry-run`).
///
/// # Errors
/// [`ConvergeError`] for the step that failed.
pub async fn preview(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<migrate::Preview, ConvergeError> {
    let mut lent = checkout(pool, target, plan, cancel).await?;
    let preview = migrate::preview(lent.session(), plan)
        .await
        .map_err(|source| ConvergeError::Run {
            operation: "plan",
            source,
        })?;
    lent.give_back().await;
    Ok(preview)
}

/// Drops the table and its history rows under the lock (for `deletionPolicy: Drop`), if
/// `request.owner` owns it and the user allowed it (see [`migrate::drop_box_table`]).
///
/// # Errors
/// [`ConvergeError`] for the step that failed.
///
/// # Cancel safety
/// Cancelling `cancel` abandons the wait for a session or the lock, or cancels the running
/// statement, rolls back and releases the lock.
///
/// # Idempotency
/// A table that is already gone is success.
pub async fn drop(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    request: &DropRequest,
    cancel: &CancellationToken,
    on_waiting: impl FnOnce(Option<Holder>) + Send,
) -> Result<DropOutcome, ConvergeError> {
    let mut lent = checkout(pool, target, plan, cancel).await?;
    let outcome = migrate::drop_box_table(lent.session(), plan, request, cancel, on_waiting)
        .await
        .map_err(|source| ConvergeError::Run {
            operation: "drop",
            source,
        })?;
    lent.give_back().await;
    Ok(outcome)
}
