//! The human side of the status: condition messages and the last-run record.

use crate::crd::LastRun;
use crate::lock::Holder;
use crate::migrate::{Outcome, Plan, RunPath};
use crate::reason::Reason;

use super::MAX_MESSAGE_BYTES;
use super::lock::{millis, time};

/// `message` cut to [`MAX_MESSAGE_BYTES`] (with `...` when cut).
pub(super) fn truncate(message: &str) -> String {
    crate::report::truncate(message, MAX_MESSAGE_BYTES)
}

pub(super) fn version_text(version: Option<u32>) -> String {
    version.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

pub(super) fn waiting_message(plan: Option<&Plan>, holder: Option<&Holder>) -> String {
    let lock_key = plan.map_or_else(
        || "the migration lock".to_owned(),
        |p| p.lock().lock_key().to_owned(),
    );
    match holder {
        Some(h) if h.application_name.is_empty() => {
            format!("waiting for lock {lock_key} held by pid {}", h.pid)
        }
        Some(h) => format!(
            "waiting for lock {lock_key} held by pid {} ({})",
            h.pid, h.application_name
        ),
        None => format!("waiting for lock {lock_key}"),
    }
}

pub(super) fn success_message(shown: &str, outcome: &Outcome) -> (Reason, String) {
    let (from, to) = (outcome.from_version, outcome.to_version);
    match outcome.path {
        RunPath::UpToDate if to > outcome.known_latest => (
            Reason::AheadOfOperator,
            format!(
                "{shown} is at version {to}, recorded by a newer Brighter; this operator knows versions up to {} and leaves the table as it is",
                outcome.known_latest
            ),
        ),
        RunPath::UpToDate if to > outcome.target_version => (
            Reason::UpToDate,
            format!(
                "{shown} is at version {to}, above target {}; tables are never downgraded",
                outcome.target_version
            ),
        ),
        RunPath::UpToDate => (Reason::UpToDate, format!("{shown} is at version {to}")),
        RunPath::Fresh => (Reason::Migrated, format!("{shown} created at version {to}")),
        RunPath::Bootstrap | RunPath::Normal if from == to => {
            (Reason::Migrated, format!("{shown} is at version {to}"))
        }
        RunPath::Bootstrap | RunPath::Normal => (
            Reason::Migrated,
            format!("{shown} migrated from version {from} to {to}"),
        ),
    }
}

pub(super) fn last_run_of(outcome: &Outcome) -> LastRun {
    LastRun {
        path: outcome.path,
        from_version: outcome.from_version,
        to_version: outcome.to_version,
        start_time: time(outcome.started),
        duration_milliseconds: millis(outcome.duration),
    }
}
