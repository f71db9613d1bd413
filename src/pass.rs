//! The pass over one table that the controller and the `migrate` command share: the run
//! ([`migrate()`]), and what was observed (the only input besides the plan that decides the
//! status): a suspended table looked at, a run that succeeded, or a failure with what it did to
//! the lock.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::converge::{self, ConvergeError, Target};
use crate::db::SessionPool;
use crate::lock::{Holder, LockError};
use crate::migrate::{self, Outcome, Plan, RunError};
use crate::status::{LockObservation, Observed};

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
/// [`ConvergeError`] for the step that failed.
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
) -> Result<Outcome, ConvergeError>
where
    G: FnOnce() -> F + Send,
    F: std::future::Future<Output = Result<(), migrate::runner::Withdrawal>> + Send,
{
    let mut lent = converge::checkout(pool, target, plan, cancel).await?;
    let session = lent.session();
    let mut outcome = migrate::runner::run_gated(session, plan, cancel, on_waiting, gate)
        .await
        .map_err(|source| ConvergeError::Run {
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
pub async fn observe_suspended(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Observed {
    match converge::observe(pool, target, plan, cancel).await {
        Ok(found) => Observed::Suspended {
            applied_version: (found.current_version > 0).then_some(found.current_version),
            would: Some(found.decision),
        },
        Err(error) => failure(&error),
    }
}

/// What the status should say about a failed pass, with the lock part when the lock was involved
/// (a timeout names the holder).
pub fn failure(error: &ConvergeError) -> Observed {
    Observed::Failed {
        reason: error.reason(),
        message: error.message(),
        lock: failed_lock(error),
    }
}

/// What a failed pass did to the lock: a timeout (with the holder, when seen) or a lost lock;
/// `None` when the lock was not the trouble.
fn failed_lock(error: &ConvergeError) -> Option<LockObservation> {
    let ConvergeError::Run {
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
