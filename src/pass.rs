//! The pass over one table that the controller and the `migrate` command share, as what was
//! observed (the only input besides the plan that decides the status): a suspended table looked
//! at, a run that succeeded, or a failure with what it did to the lock.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::converge::{self, ConvergeError, Target};
use crate::db::SessionPool;
use crate::lock::LockError;
use crate::migrate::{Plan, RunError};
use crate::status::{LockObservation, Observed};

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
pub fn failed_lock(error: &ConvergeError) -> Option<LockObservation> {
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
