//! The plan a suspended BoxTable shows (`status.pending`), and whether the run after
//! un-suspending did what that plan said (pure).

use crate::crd::{BoxTableStatus, PendingPlan, PendingVersion};
use crate::migrate::Decision;
use crate::migrate::statements::history_rows;
use crate::migrate::{Outcome, Plan, RunPath};

/// What a run would do now, as `status.pending` shows it.
pub fn pending_plan(plan: &Plan, decision: Decision) -> PendingPlan {
    PendingPlan {
        path: decision.path(),
        from_version: decision.from_version(),
        to_version: decision.to_version(),
        versions: history_rows(plan, decision)
            .into_iter()
            .map(|(version, description)| PendingVersion {
                version,
                description,
            })
            .collect(),
    }
}

fn describe(path: RunPath, from: u32, to: u32) -> String {
    match path {
        RunPath::UpToDate => format!("nothing to apply at version {from}"),
        RunPath::Fresh => format!("create at version {to}"),
        RunPath::Bootstrap => format!("adopt at version {from} and bring to {to}"),
        RunPath::Normal => format!("migrate from version {from} to {to}"),
    }
}

/// When the previous status showed a pending plan (the BoxTable was suspended) and the run just
/// made did something else, because the table (or the target) changed in between: what was
/// shown and what was done. `None` when the run did exactly what was shown, or nothing was.
pub fn replanned(previous: Option<&BoxTableStatus>, outcome: &Outcome) -> Option<String> {
    let shown = previous?.pending.as_ref()?;
    let done = (outcome.path, outcome.from_version, outcome.to_version);
    if (shown.path, shown.from_version, shown.to_version) == done {
        return None;
    }
    Some(format!(
        "re-planned: the table or the target changed since the pending plan was shown (it said: {}; the run found version {} and did: {})",
        describe(shown.path, shown.from_version, shown.to_version),
        outcome.from_version,
        describe(done.0, done.1, done.2)
    ))
}
