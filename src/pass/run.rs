//! One pass over one box table against its database, without Kubernetes: borrow a session from
//! the [`SessionPool`] ([`checkout`]), then migrate, observe, preview or drop, and hand the session
//! back only if the step ended cleanly. A migration and an observation end in an [`Observed`]
//! value (a failure through [`failure`], with what it did to the lock), the only input besides
//! the plan that decides the status. The controller and the `migrate` command both go through
//! here, so they share one code path.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::db::pool::CheckoutError;
use crate::db::{ConnectError, Connection, PooledSession, SessionKey, SessionPool};
use crate::lock::{Holder, LockError};
use crate::migrate::{self, DropOutcome, DropRequest, Observation, Outcome, Plan, RunError};
use crate::reason::Reason;
use crate::status::{LockObservation, Observed};

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

/// Why a pass over a table failed. Each variant names the step; `reason()` gives the bounded reason.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
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

impl PassError {
    /// What the status says about this failure: the error chain, without the "migration failed"
    /// wrapper of a run (the runner's error names what was attempted, or what was found before
    /// anything was attempted, like a missing schema).
    pub fn message(&self) -> String {
        match self {
            PassError::Run { source, .. } => crate::report::chain(source),
            other => crate::report::chain(other),
        }
    }

    /// The bounded reason for status, events and metrics.
    pub fn reason(&self) -> Reason {
        match self {
            PassError::Connect(e) => e.reason(),
            PassError::Cancelled { .. } => Reason::Cancelled,
            PassError::Run { source, .. } => source.reason(),
        }
    }
}

/// Borrows a session for `target` from `pool` (waiting while the target's sessions are all lent).
///
/// # Errors
/// [`PassError::Connect`] or, when `cancel` fires while waiting, [`PassError::Cancelled`].
pub async fn checkout<'p>(
    pool: &'p SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<PooledSession<'p>, PassError> {
    let key = SessionKey::of(target.connection);
    pool.checkout(&key, target.source, target.application_name, cancel)
        .await
        .map_err(|error| match error {
            CheckoutError::Connect(error) => PassError::Connect(error),
            CheckoutError::Cancelled => PassError::Cancelled {
                table: plan.table().to_string(),
            },
        })
}

/// Where the table stands, read without changing anything (for `suspend: true`).
///
/// # Errors
/// [`PassError`] for the step that failed.
async fn look(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<Observation, PassError> {
    let mut lent = checkout(pool, target, plan, cancel).await?;
    let observation = migrate::observe(lent.session(), plan)
        .await
        .map_err(|source| PassError::Run {
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
/// [`PassError`] for the step that failed.
pub async fn preview(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<migrate::Preview, PassError> {
    let mut lent = checkout(pool, target, plan, cancel).await?;
    let preview = migrate::preview(lent.session(), plan)
        .await
        .map_err(|source| PassError::Run {
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
/// [`PassError`] for the step that failed.
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
) -> Result<DropOutcome, PassError> {
    let mut lent = checkout(pool, target, plan, cancel).await?;
    let outcome = migrate::drop_box_table(lent.session(), plan, request, cancel, on_waiting)
        .await
        .map_err(|source| PassError::Run {
            operation: "drop",
            source,
        })?;
    lent.give_back().await;
    Ok(outcome)
}

/// Whether [`migrate()`] compares the table with the shape of its version after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftCheck {
    /// Read the table's shape and report drift in [`Outcome::drift`] (the controller and the
    /// `migrate` command, so that both write the same `Drifted` condition).
    After,
    /// Leave [`Outcome::drift`] as the run left it (a caller that wants only the run).
    Skip,
}

/// Brings the table to its target version (see [`crate::migrate::run`]; `gate` as in
/// [`migrate::runner::run_gated`]; the `migrate` command passes one that always lets the run
/// go on), then, with [`DriftCheck::After`], compares the table with the shape of the version
/// it is at ([`Outcome::drift`]; a failed read is logged and leaves it unchecked). The session
/// goes back to the pool only when the run (and the drift read) succeeded and the lock was
/// released by this session.
///
/// # Errors
/// [`PassError`] for the step that failed.
///
/// # Cancel safety
/// Cancelling `cancel` abandons the wait for a session or the lock, or cancels the running
/// statement, rolls back and releases the lock. Dropping the future closes the session.
pub async fn migrate<G, F>(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
    on_waiting: impl FnOnce(Option<Holder>) + Send,
    gate: G,
    drift: DriftCheck,
) -> Result<Outcome, PassError>
where
    G: FnOnce() -> F + Send,
    F: std::future::Future<Output = Result<(), migrate::runner::Withdrawal>> + Send,
{
    let mut lent = checkout(pool, target, plan, cancel).await?;
    let session = lent.session();
    let mut outcome = migrate::runner::run_gated(session, plan, cancel, on_waiting, gate)
        .await
        .map_err(|source| PassError::Run {
            operation: "migration",
            source,
        })?;
    let mut clean = !outcome.lock_lost_after_commit;
    if drift == DriftCheck::After {
        outcome.drift = match migrate::inspect::drift(session.client(), plan, outcome.to_version)
            .await
        {
            Ok(report) => report,
            Err(error) => {
                tracing::warn!(table = %plan.table(), error = %crate::report::chain(&error), "reading the table's shape for the drift check failed");
                clean = false;
                None
            }
        };
    }
    if clean {
        lent.give_back().await;
    }
    Ok(outcome)
}

/// Looks at a suspended table without changing anything: the version found and what a run would
/// do now, or the failure.
///
/// # Cancel safety
/// Cancelling `cancel` abandons a wait for a free session.
pub async fn observe(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Observed {
    match look(pool, target, plan, cancel).await {
        Ok(found) => Observed::Suspended {
            applied_version: (found.current_version > 0).then_some(found.current_version),
            would: Some(found.decision),
        },
        Err(error) => failure(&error),
    }
}

/// What the status should say about a failed pass, with the lock part when the lock was involved
/// (a timeout names the holder).
pub fn failure(error: &PassError) -> Observed {
    Observed::Failed {
        reason: error.reason(),
        message: error.message(),
        lock: failed_lock(error),
    }
}

/// What a failed pass did to the lock: a timeout (with the holder, when seen) or a lost lock;
/// `None` when the lock was not the trouble.
fn failed_lock(error: &PassError) -> Option<LockObservation> {
    let PassError::Run {
        source: RunError::Lock(lock),
        ..
    } = error
    else {
        return None;
    };
    match lock.as_ref() {
        LockError::Timeout {
            holder,
            attempts,
            timeout,
            ..
        } => Some(LockObservation::timed_out(
            *attempts,
            *timeout,
            holder.clone(),
        )),
        LockError::Lost { .. } => Some(LockObservation::lost(1, Duration::ZERO)),
        _ => None,
    }
}
