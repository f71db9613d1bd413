//! The `Drifted` detail condition: whether the table still has the shape of its recorded version
//! (pure). Only a pass that checked the shape changes it; any other pass keeps it as it was.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::lock::time;
use super::messages::truncate;
use crate::migrate::drift::DriftReport;
use crate::reason::Reason;

/// The detail condition that says the table's shape differs from its recorded version's. It
/// never changes Ready.
pub const DRIFTED: &str = "Drifted";

/// The `Drifted` condition for this pass: from `report` when the shape was checked, else the
/// previous one unchanged (absent until a first check).
pub(super) fn drifted_condition(
    report: Option<&DriftReport>,
    generation: i64,
    previous: &[Condition],
    now: Timestamp,
) -> Option<Condition> {
    let before = previous.iter().find(|c| c.type_ == DRIFTED);
    let Some(report) = report else {
        return before.cloned();
    };
    let (status, reason) = if report.drifted() {
        ("True", Reason::Drifted)
    } else {
        ("False", Reason::NoDrift)
    };
    let last_transition_time = before
        .filter(|c| c.status == status)
        .map_or_else(|| time(now), |c| c.last_transition_time.clone());
    Some(Condition {
        type_: DRIFTED.to_owned(),
        status: status.to_owned(),
        reason: reason.as_str().to_owned(),
        message: truncate(&report.message()),
        observed_generation: Some(generation),
        last_transition_time,
    })
}
