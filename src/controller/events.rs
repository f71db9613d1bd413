//! Events (events.k8s.io/v1) on transitions only: a status that did not change its Ready reason,
//! its lock state or its last run publishes nothing.

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, Resource};

use crate::crd::{BoxTable, BoxTableStatus, CONTROLLER_NAME, DRIFTED, LockState, Reported};
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

fn ready(status: Option<&BoxTableStatus>) -> Option<Reported<'_>> {
    status?.ready()
}

/// What the `Drifted` condition says the last comparison of the shape found (an Unknown one
/// carries the finding before it; see [`crate::status::last_drift_found`]).
fn drifted(status: Option<&BoxTableStatus>) -> Option<(bool, String)> {
    let cond = status?.conditions.iter().find(|c| c.type_ == DRIFTED)?;
    crate::status::last_drift_found(cond).map(|(drifted, message)| (drifted, message.to_owned()))
}

/// Whether the `Drifted` condition in `status` is a comparison made by its pass (True or False),
/// not an Unknown left by a pass that did not compare.
fn drift_checked(status: &BoxTableStatus) -> bool {
    status.condition(DRIFTED).is_some_and(|c| !c.is_unknown())
}

fn lock_state(status: Option<&BoxTableStatus>) -> Option<LockState> {
    status?.lock.as_ref().map(|l| l.state)
}

/// Whether `after` records a migration run that `before` did not: Ready says `Migrated` and the
/// last run is a new one. An upgrade of a table that was already `Migrated` keeps its reason, so
/// the reason alone would say nothing; a pass that changed nothing keeps the last run as it was.
fn migrated_anew(before: Option<&BoxTableStatus>, after: &BoxTableStatus) -> bool {
    let migrated = after.ready_reason() == Some(Reason::Migrated);
    migrated
        && after.last_run.is_some()
        && before.and_then(|b| b.last_run.as_ref()) != after.last_run.as_ref()
}

/// The transitions between `before` and `after`: lock contended or acquired after a wait, a
/// change of the Ready condition's reason (migrated, failed, timed out, dropped, ...), every new
/// migration run (also one that keeps the reason `Migrated`), and the `Drifted` condition turning
/// True (a Warning) or back to False.
pub fn transitions(before: Option<&BoxTableStatus>, after: &BoxTableStatus) -> Vec<Transition> {
    let mut out = Vec::new();
    // A pass that did not compare the shape announces nothing; one that did is compared with the
    // last finding, also across passes that did not (so a failure in between repeats nothing).
    let was_drifted = drifted(before).is_some_and(|(d, _)| d);
    match drifted(Some(after)).filter(|_| drift_checked(after)) {
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
    if let Some(new) = new_ready {
        let changed = old_ready
            .as_ref()
            .is_none_or(|old| old.status != new.status || old.reason != new.reason)
            || migrated_anew(before, after);
        if changed && let Some(reason) = new.reason {
            // Waiting is covered by the lock event above; UpToDate is news only after a failure.
            let was_ready = old_ready.as_ref().is_some_and(Reported::is_true);
            let noteworthy = match reason {
                Reason::WaitingForLock | Reason::Migrating => false,
                Reason::UpToDate => old_ready.is_some() && !was_ready,
                _ => true,
            };
            if noteworthy {
                out.push(Transition {
                    warning: (!new.is_true()
                        && !matches!(
                            reason,
                            Reason::Suspended | Reason::Deleting | Reason::Cancelled
                        ))
                        || reason.warns_when_ready(),
                    reason,
                    action: action_for(reason),
                    note: new.message.to_owned(),
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;
    use crate::crd::LastRun;
    use crate::migrate::RunPath;

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation: Some(1),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        }
    }

    fn status(ready: (&str, &str, &str), drifted: Option<(&str, &str)>) -> BoxTableStatus {
        let mut conditions = vec![condition("Ready", ready.0, ready.1, ready.2)];
        if let Some((status, message)) = drifted {
            let reason = match status {
                "True" => "Drifted",
                "False" => "NoDrift",
                _ => "NotChecked",
            };
            conditions.push(condition("Drifted", status, reason, message));
        }
        BoxTableStatus {
            conditions,
            ..BoxTableStatus::default()
        }
    }

    fn run(from: u32, to: u32, at: i64) -> Option<LastRun> {
        Some(LastRun {
            path: RunPath::Normal,
            from_version: from,
            to_version: to,
            start_time: Time(jiff::Timestamp::from_second(at).unwrap()),
            duration_milliseconds: 5,
        })
    }

    fn reasons(before: &BoxTableStatus, after: &BoxTableStatus) -> Vec<(Reason, bool, String)> {
        transitions(Some(before), after)
            .into_iter()
            .map(|t| (t.reason, t.warning, t.note))
            .collect()
    }

    #[test]
    fn an_upgrade_that_keeps_the_reason_migrated_is_an_event_and_a_no_op_pass_is_none() {
        let ready = ("True", "Migrated", "public.outbox created at version 3");
        let mut created = status(ready, None);
        created.last_run = run(0, 3, 10);
        let upgraded_ready = (
            "True",
            "Migrated",
            "public.outbox migrated from version 3 to 6",
        );
        let mut upgraded = status(upgraded_ready, None);
        upgraded.last_run = run(3, 6, 20);
        assert_eq!(
            reasons(&created, &upgraded),
            [(
                Reason::Migrated,
                false,
                "public.outbox migrated from version 3 to 6".to_owned()
            )]
        );
        assert_eq!(reasons(&upgraded, &upgraded.clone()), []);
    }

    #[test]
    fn drift_is_announced_against_the_last_finding_across_passes_that_did_not_check() {
        let ready = ("True", "Migrated", "public.outbox created at version 8");
        let drifted = status(ready, Some(("True", "index missing")));
        let unchecked = status(
            ("False", "ConnectionFailed", "down"),
            Some((
                "Unknown",
                "the table's shape was not checked in the last pass: the pass stopped at ConnectionFailed; the last check found drift: index missing",
            )),
        );
        let still = status(ready, Some(("True", "index missing")));
        let fixed = status(ready, Some(("False", "matches")));
        let drift_events = |before: &BoxTableStatus, after: &BoxTableStatus| {
            reasons(before, after)
                .into_iter()
                .filter(|(r, _, _)| matches!(r, Reason::Drifted | Reason::NoDrift))
                .collect::<Vec<_>>()
        };
        assert_eq!(drift_events(&drifted, &unchecked), []);
        assert_eq!(drift_events(&unchecked, &still), [], "no second Warning");
        assert_eq!(
            drift_events(&unchecked, &fixed),
            [(Reason::NoDrift, false, "matches".to_owned())]
        );
    }
}
