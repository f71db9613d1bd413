//! The desired `BoxTable` status, computed from what a pass observed: a pure function of values, so
//! tests compare statuses without an API server or a database.
//!
//! Conditions follow kstatus: in progress is Ready=False, Reconciling=True, Stalled=False; done is
//! Ready=True with the other two False; given up (a [`Reason::is_stalled`] reason) is Ready=False,
//! Reconciling=False, Stalled=True. Reconciling and Stalled are never both True. A condition's
//! `lastTransitionTime` moves only when its status flips, and [`same_ignoring_timestamps`] tells the
//! caller whether a write is needed at all.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::{BoxTableStatus, DeletionPolicy, LastRun, LockStatus, PendingPlan};
use crate::migrate::{Outcome, Plan, RunPath};
use crate::reason::Reason;

mod drift;
mod lock;
mod messages;
mod pending;

pub use drift::{DRIFTED, last_found as last_drift_found};
pub use pending::{pending_plan, replanned};

pub use lock::LockObservation;
use lock::{carried_lock, observed_lock, succeeded_lock, time};
use messages::{last_run_of, success_message, truncate, version_text, waiting_message};

pub use crate::crd::{READY, RECONCILING, STALLED};

/// Condition messages are cut to this many bytes, so a long error chain cannot bloat the object.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// What a pass observed, the only input besides the plan that decides the status.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// Another session holds the advisory lock; the operator is polling. In progress.
    Waiting(LockObservation),
    /// The lock is held and the migration transaction is running. In progress.
    Migrating(LockObservation),
    /// The run finished: the table is at its target version. Done.
    Succeeded(Outcome),
    /// The pass failed. In progress (retried) unless `reason.is_stalled()`, then given up.
    Failed {
        /// The bounded reason.
        reason: Reason,
        /// What happened, without secrets (an error chain from `report::chain`).
        message: String,
        /// What happened to the lock, if the pass got that far.
        lock: Option<LockObservation>,
    },
    /// `suspend: true`: the table was looked at, nothing was changed.
    Suspended {
        /// The version found (`None` when the table does not exist).
        applied_version: Option<u32>,
        /// What a run would do now (shown as `status.pending`).
        would: Option<crate::migrate::Decision>,
    },
    /// The object is being deleted and its finalizer is running. In progress.
    Deleting {
        /// What deletion does to the table.
        policy: DeletionPolicy,
        /// With `Drop`: the BoxTable's last pass found its table managed by another BoxTable
        /// (`TableConflict`), so the deletion announces that it keeps the table rather than
        /// that it drops it (the drop still decides under the lock, from the table's record).
        managed_elsewhere: bool,
    },
    /// Another BoxTable (`namespace/name`) already manages the same table. Given up.
    Conflict {
        /// The BoxTable that owns the table.
        other: String,
    },
}

impl Observed {
    /// What the pass saw of the lock, when this observation carries it.
    pub fn into_lock(self) -> Option<LockObservation> {
        match self {
            Observed::Waiting(lock) | Observed::Migrating(lock) => Some(lock),
            Observed::Failed { lock, .. } => lock,
            _ => None,
        }
    }
}

/// How the three kstatus conditions read for one status.
struct Verdict {
    ready: bool,
    reconciling: bool,
    stalled: bool,
    reason: Reason,
    message: String,
}

/// Computes the status to write after a pass.
///
/// Longer than most: every field of the status is decided here, in one place, so that what is
/// carried over and what this pass sets can be checked against each other.
///
/// `plan` is `None` when the spec could not be planned (then the table, versions and lock are
/// carried over from `previous`). Everything not decided by this pass is carried over from
/// `previous`; timestamps that did not change keep their old value.
pub fn desired_status(
    previous: Option<&BoxTableStatus>,
    generation: i64,
    plan: Option<&Plan>,
    observed: &Observed,
    now: Timestamp,
) -> BoxTableStatus {
    let prev = previous.cloned().unwrap_or_default();
    let table = plan.map(|p| p.table().to_string()).or(prev.table.clone());
    let shown = table.clone().unwrap_or_else(|| "the table".to_owned());
    let target = plan.map(Plan::target).or(prev.target_version);
    let applied = prev.applied_version;
    let last_run = prev.last_run.clone();
    // Without a plan the identity cannot be recomputed, but the table is immutable: what was
    // known about its lock stays as it was.
    let lock = match plan {
        Some(p) => carried_lock(p, prev.lock.as_ref()),
        None => prev.lock.clone(),
    };
    // A suspended BoxTable's plan stays shown while its run waits for the lock and migrates, so
    // the run's outcome can be compared with it; anything else ends it.
    let pending = match observed {
        Observed::Suspended {
            would: Some(decision),
            ..
        } => plan.map(|p| Box::new(pending_plan(p, *decision))),
        Observed::Waiting(_) | Observed::Migrating(_) => prev.pending.clone(),
        _ => None,
    };
    let unchecked;
    let drift_check = match observed {
        Observed::Succeeded(Outcome {
            drift: Some(report),
            ..
        }) => drift::Check::Done(report),
        observed => {
            unchecked = why_not_checked(observed);
            drift::Check::NotDone(&unchecked)
        }
    };

    let mut carried = Carried {
        target,
        applied,
        last_run,
        lock,
    };
    let verdict = Judge {
        previous,
        prev: &prev,
        generation,
        plan,
        shown: &shown,
        pending: pending.as_deref(),
    }
    .verdict(observed, &mut carried);
    let Carried {
        target,
        applied,
        last_run,
        lock,
    } = carried;

    BoxTableStatus {
        observed_generation: Some(generation),
        table,
        applied_version: applied,
        target_version: target,
        lock,
        last_run,
        pending,
        conditions: conditions(&verdict, generation, &prev.conditions, now)
            .into_iter()
            .chain(drift::drifted_condition(
                drift_check,
                generation,
                &prev.conditions,
                now,
            ))
            .collect(),
    }
}

/// What a status carries over from the previous one unless this pass decides it anew.
struct Carried {
    target: Option<u32>,
    applied: Option<u32>,
    last_run: Option<LastRun>,
    lock: Option<LockStatus>,
}

/// What the verdict of one pass is judged from, besides what it observed.
struct Judge<'a> {
    /// The status before this pass, as the caller has it.
    previous: Option<&'a BoxTableStatus>,
    /// The same, or the default status when there is none.
    prev: &'a BoxTableStatus,
    generation: i64,
    plan: Option<&'a Plan>,
    /// The table as messages name it.
    shown: &'a str,
    /// The plan a suspended status shows.
    pending: Option<&'a PendingPlan>,
}

impl Judge<'_> {
    /// How the conditions read for `observed`, updating what the pass decides anew in `carried`.
    fn verdict(&self, observed: &Observed, carried: &mut Carried) -> Verdict {
        let (plan, prev, shown) = (self.plan, self.prev, self.shown);
        match observed {
            Observed::Waiting(obs) => {
                carried.lock = plan
                    .map(|p| observed_lock(p, prev.lock.as_ref(), obs))
                    .or(carried.lock.take());
                in_progress(
                    Reason::WaitingForLock,
                    waiting_message(plan, obs.holder.as_ref()),
                )
            }
            Observed::Migrating(obs) => {
                carried.lock = plan
                    .map(|p| observed_lock(p, prev.lock.as_ref(), obs))
                    .or(carried.lock.take());
                let message = format!(
                    "migrating {shown} to version {}",
                    version_text(carried.target)
                );
                in_progress(Reason::Migrating, message)
            }
            Observed::Succeeded(outcome) => self.succeeded(outcome, carried),
            Observed::Failed {
                reason,
                message,
                lock: obs,
            } => {
                if let (Some(plan), Some(obs)) = (plan, obs) {
                    carried.lock = Some(observed_lock(plan, prev.lock.as_ref(), obs));
                }
                if reason.is_stalled() {
                    stalled(*reason, message.clone())
                } else {
                    in_progress(*reason, message.clone())
                }
            }
            Observed::Suspended {
                applied_version, ..
            } => {
                carried.applied = *applied_version;
                let now_at = match applied_version {
                    Some(v) => format!("{shown} is at version {v}"),
                    None => format!("{shown} does not exist"),
                };
                Verdict {
                    ready: false,
                    reconciling: false,
                    stalled: false,
                    reason: Reason::Suspended,
                    message: format!(
                        "suspended; {now_at}, target {}{}",
                        version_text(carried.target),
                        pending_note(self.pending)
                    ),
                }
            }
            Observed::Deleting {
                policy,
                managed_elsewhere,
            } => in_progress(
                Reason::Deleting,
                deleting_message(shown, *policy, *managed_elsewhere),
            ),
            Observed::Conflict { other } => {
                stalled(Reason::TableConflict, conflict_message(plan, other))
            }
        }
    }

    /// A run that finished: Ready, with the versions, the lock and the last run it brought.
    fn succeeded(&self, outcome: &Outcome, carried: &mut Carried) -> Verdict {
        carried.applied = Some(outcome.to_version);
        carried.target = Some(outcome.target_version);
        if let Some(plan) = self.plan {
            carried.lock =
                succeeded_lock(plan, self.prev.lock.as_ref(), outcome).or(carried.lock.take());
        }
        if outcome.path != RunPath::UpToDate || carried.last_run.is_none() {
            carried.last_run = Some(last_run_of(outcome));
        }
        let (reason, mut message) = kept_ready(self.prev, self.generation, outcome)
            .unwrap_or_else(|| success_message(self.shown, outcome));
        if let Some(note) = replanned(self.previous, outcome) {
            message = format!("{message}; {note}");
        }
        Verdict {
            ready: true,
            reconciling: false,
            stalled: false,
            reason,
            message,
        }
    }
}

/// What a deleting status says deletion does to the table.
fn deleting_message(shown: &str, policy: DeletionPolicy, managed_elsewhere: bool) -> String {
    match policy {
        DeletionPolicy::Drop if managed_elsewhere => format!(
            "keeping {shown}: another BoxTable manages it (this one stalled with {}), so this deletion does not drop it",
            Reason::TableConflict
        ),
        DeletionPolicy::Drop => format!("dropping {shown}"),
        DeletionPolicy::Retain => {
            format!("releasing {shown}; deletionPolicy Retain keeps the table")
        }
    }
}

/// Why a pass that observed `observed` did not compare the table with the shape of its version
/// (the `Drifted` condition says it, rather than keeping an older finding as if it were new).
fn why_not_checked(observed: &Observed) -> String {
    match observed {
        Observed::Waiting(_) => "the pass is waiting for the advisory lock".to_owned(),
        Observed::Migrating(_) => "the table is being migrated".to_owned(),
        Observed::Succeeded(_) => "reading the table's shape after the run failed".to_owned(),
        Observed::Failed { reason, .. } => format!("the pass stopped at {reason}"),
        Observed::Suspended { .. } => {
            "the BoxTable is suspended, and a suspended pass only reads the version".to_owned()
        }
        Observed::Deleting { .. } => "the BoxTable is being deleted".to_owned(),
        Observed::Conflict { .. } => format!("the pass stopped at {}", Reason::TableConflict),
    }
}

/// What a suspended status adds about its pending plan.
fn pending_note(pending: Option<&crate::crd::PendingPlan>) -> String {
    let Some(pending) = pending.filter(|p| !p.versions.is_empty()) else {
        return String::new();
    };
    let versions: Vec<String> = pending
        .versions
        .iter()
        .map(|v| v.version.to_string())
        .collect();
    format!(
        "; setting suspend: false applies version{} {} (status.pending)",
        if versions.len() == 1 { "" } else { "s" },
        versions.join(", ")
    )
}

/// What a conflict says: the table, and the BoxTable (`namespace/name`) that already manages it.
pub fn conflict_message(plan: Option<&Plan>, other: &str) -> String {
    let shown = plan.map_or_else(|| "the table".to_owned(), |p| p.table().to_string());
    format!(
        "{shown} is already managed by BoxTable {other}; only one BoxTable manages a table: delete one of the two (with deletionPolicy Retain the table stays) or point it at another table"
    )
}

/// Whether two statuses differ only in timestamps (condition transition times, lock and run
/// times). When they do, the caller skips the write: a write triggers a watch event, and writing
/// fresh timestamps on every pass makes a loop that never settles.
pub fn same_ignoring_timestamps(a: &BoxTableStatus, b: &BoxTableStatus) -> bool {
    without_timestamps(a) == without_timestamps(b)
}

/// Whether the live status already says what `desired` says, looking only at what the operator
/// writes. `conditions` is a list map keyed by `type`: server-side apply merges the operator's
/// three conditions into it and keeps conditions other field managers own, so those are left out
/// of the comparison (counting them would make every pass write the status again).
pub fn up_to_date(live: &BoxTableStatus, desired: &BoxTableStatus) -> bool {
    let mut ours = live.clone();
    ours.conditions
        .retain(|c| [READY, RECONCILING, STALLED, DRIFTED].contains(&c.type_.as_str()));
    same_ignoring_timestamps(&ours, desired)
}

fn without_timestamps(status: &BoxTableStatus) -> BoxTableStatus {
    let epoch = Time(Timestamp::UNIX_EPOCH);
    let mut out = status.clone();
    for condition in &mut out.conditions {
        condition.last_transition_time = epoch.clone();
    }
    if let Some(lock) = &mut out.lock {
        lock.last_acquired_time = None;
        lock.last_released_time = None;
        if let Some(holder) = &mut lock.holder {
            holder.since = None;
        }
    }
    if let Some(run) = &mut out.last_run {
        run.start_time = epoch;
    }
    out
}

/// The previous Ready condition's reason and message, when a check that found nothing to do
/// follows a success for the same generation at the same version: the migration's `Migrated`
/// stays until something changes, so a no-op resync does not rewrite the status.
fn kept_ready(
    prev: &BoxTableStatus,
    generation: i64,
    outcome: &Outcome,
) -> Option<(Reason, String)> {
    if outcome.path != RunPath::UpToDate
        || prev.observed_generation != Some(generation)
        || prev.applied_version != Some(outcome.to_version)
    {
        return None;
    }
    let ready = prev.ready().filter(|ready| ready.is_true())?;
    Some((ready.reason?, ready.message.to_owned()))
}

fn in_progress(reason: Reason, message: String) -> Verdict {
    Verdict {
        ready: false,
        reconciling: true,
        stalled: false,
        reason,
        message,
    }
}

fn stalled(reason: Reason, message: String) -> Verdict {
    Verdict {
        ready: false,
        reconciling: false,
        stalled: true,
        reason,
        message,
    }
}

/// The three conditions. Each carries the verdict's reason and a message saying why it has the
/// status it has, so no condition shows a failure reason with nothing to explain it.
fn conditions(
    verdict: &Verdict,
    generation: i64,
    previous: &[Condition],
    now: Timestamp,
) -> Vec<Condition> {
    let message = truncate(&verdict.message);
    let reconciling_message = match (verdict.reconciling, verdict.reason) {
        (true, Reason::WaitingForLock | Reason::Migrating | Reason::Deleting) => message.clone(),
        (true, _) => truncate(&format!("retrying: {}", verdict.message)),
        (false, _) if verdict.stalled => truncate(&format!(
            "given up until something changes: {}",
            verdict.message
        )),
        (false, _) => message.clone(),
    };
    let stalled_message = message.clone();
    [
        (READY, verdict.ready, message),
        (RECONCILING, verdict.reconciling, reconciling_message),
        (STALLED, verdict.stalled, stalled_message),
    ]
    .into_iter()
    .map(|(type_, status, message)| {
        let status = if status { "True" } else { "False" }.to_owned();
        let last_transition_time = previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(|| time(now), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.to_owned(),
            status,
            reason: verdict.reason.as_str().to_owned(),
            message,
            observed_generation: Some(generation),
            last_transition_time,
        }
    })
    .collect()
}
