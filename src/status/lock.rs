//! The lock part of the status: what a pass saw of Brighter's advisory lock, and the `LockStatus`
//! built from it (identity always recomputed from the table, times carried over when unchanged).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{LockHolder, LockState, LockStatus, PgLocks};
use crate::lock::Holder;
use crate::migrate::{Outcome, Plan};

/// What one pass saw of the advisory lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockObservation {
    /// Where the lock stands now.
    pub state: LockState,
    /// Tries made in this wait.
    pub attempts: u32,
    /// Time spent waiting so far.
    pub waited: Duration,
    /// The session holding the lock, while waiting or after a timeout.
    pub holder: Option<Holder>,
    /// When the operator took the lock in this pass.
    pub acquired_at: Option<Timestamp>,
    /// When the operator released the lock in this pass.
    pub released_at: Option<Timestamp>,
}

impl LockObservation {
    /// Another session holds the lock; `holder` when it could be seen.
    pub fn waiting(attempts: u32, waited: Duration, holder: Option<Holder>) -> Self {
        Self::new(LockState::Waiting, attempts, waited, holder)
    }

    /// The wait reached its timeout; `holder` when it could be seen.
    pub fn timed_out(attempts: u32, waited: Duration, holder: Option<Holder>) -> Self {
        Self::new(LockState::TimedOut, attempts, waited, holder)
    }

    /// The operator took the lock at `at`.
    pub fn acquired(attempts: u32, waited: Duration, at: Timestamp) -> Self {
        Self {
            acquired_at: Some(at),
            ..Self::new(LockState::Acquired, attempts, waited, None)
        }
    }

    /// The session no longer held the lock when it tried to release it.
    pub fn lost(attempts: u32, waited: Duration) -> Self {
        Self::new(LockState::Lost, attempts, waited, None)
    }

    /// The operator took and released the lock (for example around a failed migration).
    pub fn released(
        attempts: u32,
        waited: Duration,
        acquired_at: Timestamp,
        released_at: Timestamp,
    ) -> Self {
        Self {
            acquired_at: Some(acquired_at),
            released_at: Some(released_at),
            ..Self::new(LockState::Released, attempts, waited, None)
        }
    }

    fn new(state: LockState, attempts: u32, waited: Duration, holder: Option<Holder>) -> Self {
        Self {
            state,
            attempts,
            waited,
            holder,
            acquired_at: None,
            released_at: None,
        }
    }
}

/// A status timestamp: whole seconds, because that is all `metav1.Time` keeps on the wire, so a
/// status read back equals the one computed.
pub(super) fn time(at: Timestamp) -> Time {
    Time(Timestamp::from_second(at.as_second()).unwrap_or(at))
}

pub(super) fn millis(value: Duration) -> u64 {
    u64::try_from(value.as_millis()).unwrap_or(u64::MAX)
}

/// The identity part of the lock status, always recomputed from the plan.
fn identity_lock(plan: &Plan, state: LockState) -> LockStatus {
    let identity = plan.lock();
    LockStatus {
        lock_key: identity.lock_key().to_owned(),
        key: identity.key().to_string(),
        key_hex: identity.key_hex(),
        pg_locks: PgLocks {
            classid: identity.classid(),
            objid: identity.objid(),
            objsubid: 1,
        },
        state,
        attempts: None,
        waited_milliseconds: None,
        timeout_seconds: Some(plan.lock_timeout().as_secs_f64()),
        last_acquired_time: None,
        last_released_time: None,
        holder: None,
    }
}

/// The previous lock status with a fresh identity and timeout, and no holder unless still waiting.
pub(super) fn carried_lock(plan: &Plan, previous: Option<&LockStatus>) -> Option<LockStatus> {
    let previous = previous?;
    let keeps_holder = matches!(previous.state, LockState::Waiting | LockState::TimedOut);
    Some(LockStatus {
        attempts: previous.attempts,
        waited_milliseconds: previous.waited_milliseconds,
        last_acquired_time: previous.last_acquired_time.clone(),
        last_released_time: previous.last_released_time.clone(),
        holder: previous.holder.clone().filter(|_| keeps_holder),
        ..identity_lock(plan, previous.state)
    })
}

pub(super) fn observed_lock(
    plan: &Plan,
    previous: Option<&LockStatus>,
    obs: &LockObservation,
) -> LockStatus {
    LockStatus {
        attempts: Some(obs.attempts),
        waited_milliseconds: Some(millis(obs.waited)),
        last_acquired_time: obs
            .acquired_at
            .map(time)
            .or_else(|| previous.and_then(|p| p.last_acquired_time.clone())),
        last_released_time: obs
            .released_at
            .map(time)
            .or_else(|| previous.and_then(|p| p.last_released_time.clone())),
        holder: obs.holder.as_ref().map(|h| Box::new(holder_status(h))),
        ..identity_lock(plan, obs.state)
    }
}

/// After a run: released, acquired at start + wait, released at start + duration. `None` when the
/// run did not take the lock.
pub(super) fn succeeded_lock(
    plan: &Plan,
    previous: Option<&LockStatus>,
    outcome: &Outcome,
) -> Option<LockStatus> {
    let report = outcome.lock?;
    let at = |d: Duration| {
        jiff::SignedDuration::try_from(d)
            .ok()
            .and_then(|d| outcome.started.checked_add(d).ok())
            .unwrap_or(outcome.started)
    };
    // A first try that got the lock is no wait: reporting the try's round trip would change
    // `waitedMilliseconds` (and rewrite the status) on every otherwise identical resync.
    let waited = if report.attempts <= 1 {
        Duration::ZERO
    } else {
        report.waited
    };
    let obs = LockObservation::released(
        report.attempts,
        waited,
        at(report.waited),
        at(outcome.duration),
    );
    Some(observed_lock(plan, previous, &obs))
}

fn holder_status(holder: &Holder) -> LockHolder {
    LockHolder {
        pid: holder.pid,
        application_name: holder.application_name.clone(),
        client_addr: holder.client_addr.clone(),
        since: holder.since.map(time),
    }
}
