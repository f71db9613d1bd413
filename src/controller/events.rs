//! Events (events.k8s.io/v1) on transitions only: a status that did not change its Ready reason
//! or lock state publishes nothing.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::crd::{BoxTable, BoxTableStatus, LockState};
use crate::migrate::{Outcome, Plan};
use crate::reason::Reason;

/// The longest event note written: 1000 bytes of text and `...` when cut (the API server takes
/// notes up to 1 kB).
const EVENT_NOTE_MAX_BYTES: usize = 1003;

/// An event worth publishing for a status change, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Normal or Warning.
    pub warning: bool,
    /// The bounded reason.
    pub reason: Reason,
    /// What the operator was doing (`Reconcile`, `Lock`, `Migrate`, `Drop`).
    pub action: &'static str,
    /// Human-readable note.
    pub note: String,
}

fn ready(status: Option<&BoxTableStatus>) -> Option<(String, String, String)> {
    let cond = status?
        .conditions
        .iter()
        .find(|c| c.type_ == crate::status::READY)?;
    Some((
        cond.status.clone(),
        cond.reason.clone(),
        cond.message.clone(),
    ))
}

fn drifted(status: Option<&BoxTableStatus>) -> Option<(bool, String)> {
    let cond = status?
        .conditions
        .iter()
        .find(|c| c.type_ == crate::status::DRIFTED)?;
    Some((cond.status == "True", cond.message.clone()))
}

fn lock_state(status: Option<&BoxTableStatus>) -> Option<LockState> {
    status?.lock.as_ref().map(|l| l.state)
}

/// The transitions between `before` and `after`: lock contended or acquired after a wait, a
/// change of the Ready condition's reason (migrated, failed, timed out, dropped, ...), and the
/// `Drifted` condition turning True (a Warning) or back to False.
pub fn transitions(before: Option<&BoxTableStatus>, after: &BoxTableStatus) -> Vec<Transition> {
    let mut out = Vec::new();
    let was_drifted = drifted(before).is_some_and(|(d, _)| d);
    match drifted(Some(after)) {
        Some((true, message)) if !was_drifted => out.push(Transition {
            warning: true,
            reason: Reason::Drifted,
            action: "CheckDrift",
            note: message,
        }),
        Some((false, message)) if was_drifted => out.push(Transition {
            warning: false,
            reason: Reason::NoDrift,
            action: "CheckDrift",
            note: message,
        }),
        _ => {}
    }
    let (old_lock, new_lock) = (lock_state(before), lock_state(Some(after)));
    if new_lock == Some(LockState::Waiting) && old_lock != Some(LockState::Waiting) {
        let holder = after
            .lock
            .as_ref()
            .and_then(|l| l.holder.as_ref())
            .map(|h| format!(" held by pid {} ({})", h.pid, h.application_name))
            .unwrap_or_default();
        let key = after
            .lock
            .as_ref()
            .map(|l| l.lock_key.as_str())
            .unwrap_or_default();
        out.push(Transition {
            warning: false,
            reason: Reason::WaitingForLock,
            action: "Lock",
            note: format!("advisory lock {key} is{holder}; waiting"),
        });
    }
    let (old_ready, new_ready) = (ready(before), ready(Some(after)));
    if let Some((status, reason, message)) = new_ready {
        let changed = old_ready
            .as_ref()
            .is_none_or(|(s, r, _)| s != &status || r != &reason);
        if changed && let Ok(reason) = reason.parse::<Reason>() {
            // Waiting is covered by the lock event above; UpToDate is news only after a failure.
            let was_ready = old_ready.as_ref().is_some_and(|(s, _, _)| s == "True");
            let noteworthy = match reason {
                Reason::WaitingForLock | Reason::Migrating => false,
                Reason::UpToDate => old_ready.is_some() && !was_ready,
                _ => true,
            };
            if noteworthy {
                out.push(Transition {
                    warning: (status != "True"
                        && !matches!(
                            reason,
                            Reason::Suspended | Reason::Deleting | Reason::Cancelled
                        ))
                        || reason.warns_when_ready(),
                    reason,
                    action: action_for(reason),
                    note: message,
                });
            }
        }
    }
    out
}

/// The Warning for a migration that committed although the advisory lock was already gone when
/// it was released: the table is at its version (Ready), but something ended the lock early (a
/// pooler, an `pg_advisory_unlock_all`, a killed and reused backend) and deserves a look.
pub fn lock_lost_after_commit(plan: &Plan, outcome: &Outcome) -> Transition {
    let key = plan.lock();
    Transition {
        warning: true,
        reason: Reason::LockLost,
        action: "Lock",
        note: format!(
            "{} is at version {}, committed, but advisory lock {} was no longer held by the operator's session when it released it",
            plan.table(),
            outcome.to_version,
            key.lock_key()
        ),
    }
}

/// The Warning for a run after un-suspending that did something else than the pending plan
/// showed, because the table (or the target) changed in between.
pub fn replanned(plan: &Plan, note: String) -> Transition {
    Transition {
        warning: true,
        reason: Reason::Replanned,
        action: "Migrate",
        note: format!("{}: {note}", plan.table()),
    }
}

fn action_for(reason: Reason) -> &'static str {
    match reason {
        Reason::LockTimeout | Reason::LockLost | Reason::WaitingForLock => "Lock",
        Reason::Migrated | Reason::MigrationFailed | Reason::Migrating => "Migrate",
        Reason::Deleting | Reason::DropFailed | Reason::DropBlocked => "Drop",
        _ => "Reconcile",
    }
}

/// Publishes `transitions` for `bt`; failures are logged, never fatal.
pub async fn publish(recorder: &Recorder, bt: &BoxTable, transitions: Vec<Transition>) {
    let reference = bt.object_ref(&());
    for t in transitions {
        let event = Event {
            type_: if t.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: t.reason.as_str().to_owned(),
            note: Some(crate::report::truncate(&t.note, EVENT_NOTE_MAX_BYTES)),
            action: t.action.to_owned(),
            secondary: None,
        };
        if let Err(error) = recorder.publish(&event, &reference).await {
            tracing::warn!(error = %crate::report::chain(&error), reason = %t.reason, "publishing event failed");
        }
    }
}
