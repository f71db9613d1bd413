//! Events (events.k8s.io/v1) on transitions only: a status that did not change its Ready reason
//! or lock state publishes nothing.

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, Resource};

use super::context::CONTROLLER_NAME;

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

/// The Normal event for a table taken over from an owner that is gone (or that the user asked to
/// adopt from), naming that owner.
pub fn taken_over(plan: &Plan, from: &crate::migrate::ownership::OwnerRecord) -> Transition {
    Transition {
        warning: false,
        reason: Reason::TakenOver,
        action: "Adopt",
        note: format!(
            "{} taken over from BoxTable {} (uid {}), the owner its ownership record named",
            plan.table(),
            from.boxtable,
            from.uid
        ),
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

/// Publishes the operator's events: one `create` per event, as `boxtable-operator` and this
/// replica's instance name.
///
/// It keeps nothing. kube-runtime's `Recorder` keeps every event it published for six minutes, to
/// count a repeat into the first event's series; its key is the object reference, resourceVersion
/// included. An event here comes with a status write, which gives the object a new
/// resourceVersion, or is a deletion's last word (the table dropped or kept, just before the
/// finalizer goes), so no key ever matched twice: the cache only held one event per BoxTable
/// (10,000 of them at scale) and was scanned on every publish.
#[derive(Clone)]
pub struct Publisher {
    client: Client,
    instance: String,
}

impl Publisher {
    /// A publisher reporting as `instance` (the replica's name).
    pub fn new(client: Client, instance: String) -> Self {
        Self { client, instance }
    }

    async fn publish_one(&self, bt: &BoxTable, t: &Transition) -> Result<(), kube::Error> {
        let regarding = bt.object_ref(&());
        let namespace = regarding.namespace.clone().unwrap_or_default();
        let now = jiff::Timestamp::now();
        // Unique per object and moment, as the API server needs a name for every create.
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(CONTROLLER_NAME),
            now.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(if t.warning { "Warning" } else { "Normal" }.to_owned()),
            reason: Some(t.reason.as_str().to_owned()),
            action: Some(t.action.to_owned()),
            note: Some(crate::report::truncate(&t.note, EVENT_NOTE_MAX_BYTES)),
            regarding: Some(regarding),
            reporting_controller: Some(CONTROLLER_NAME.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await
            .map(drop)
    }
}

/// Publishes `transitions` for `bt`; failures are logged, never fatal.
pub async fn publish(events: &Publisher, bt: &BoxTable, transitions: Vec<Transition>) {
    for t in transitions {
        if let Err(error) = events.publish_one(bt, &t).await {
            tracing::warn!(error = %crate::report::chain(&error), reason = %t.reason, "publishing event failed");
        }
    }
}
