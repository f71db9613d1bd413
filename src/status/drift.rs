//! The `Drifted` detail condition: whether the table still has the shape of its recorded version
//! (pure). A pass that compared the shape sets it True or False; any other pass (one that failed,
//! stalled, waited, was suspended or is deleting) sets it Unknown with reason `NotChecked`,
//! saying why and what the last comparison found, so the condition never claims a finding that
//! this pass did not make.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::lock::time;
use super::messages::truncate;
use crate::migrate::drift::DriftReport;
use crate::reason::Reason;

pub use crate::crd::DRIFTED;

/// What an Unknown message says before the last comparison's message when that found drift.
const LAST_DRIFTED: &str = "; the last check found drift: ";
/// What an Unknown message says before the last comparison's message when that found none.
const LAST_CLEAN: &str = "; the last check found no drift: ";

/// Whether this pass compared the table's shape.
#[derive(Debug, Clone, Copy)]
pub(super) enum Check<'a> {
    /// It did, and found this.
    Done(&'a DriftReport),
    /// It did not, for this reason (a clause: "the pass stopped at PayloadMismatch").
    NotDone(&'a str),
}

/// The `Drifted` condition for this pass: from the report when the shape was compared; else
/// Unknown, saying why, once a first comparison has been made (absent until then).
pub(super) fn drifted_condition(
    check: Check<'_>,
    generation: i64,
    previous: &[Condition],
    now: Timestamp,
) -> Option<Condition> {
    let before = previous.iter().find(|c| c.type_ == DRIFTED);
    let (status, reason, message) = match check {
        Check::Done(report) => {
            let (status, reason) = if report.drifted() {
                ("True", Reason::Drifted)
            } else {
                ("False", Reason::NoDrift)
            };
            (status, reason, report.message())
        }
        Check::NotDone(why) => {
            let before = before?;
            let last = match last_found(before) {
                Some((true, message)) => format!("{LAST_DRIFTED}{message}"),
                Some((false, message)) => format!("{LAST_CLEAN}{message}"),
                None => String::new(),
            };
            (
                "Unknown",
                Reason::NotChecked,
                format!("the table's shape was not checked in the last pass: {why}{last}"),
            )
        }
    };
    let last_transition_time = before
        .filter(|c| c.status == status)
        .map_or_else(|| time(now), |c| c.last_transition_time.clone());
    Some(Condition {
        type_: DRIFTED.to_owned(),
        status: status.to_owned(),
        reason: reason.as_str().to_owned(),
        message: truncate(&message),
        observed_generation: Some(generation),
        last_transition_time,
    })
}

/// What the last comparison of the shape found, as a `Drifted` condition records it: whether
/// the table had drifted, and the comparison's message. An Unknown condition carries the finding
/// of the comparison before it; `None` when there is none to tell.
pub fn last_found(condition: &Condition) -> Option<(bool, &str)> {
    match condition.status.as_str() {
        "True" => Some((true, condition.message.as_str())),
        "False" => Some((false, condition.message.as_str())),
        _ => {
            let message = condition.message.as_str();
            message
                .split_once(LAST_DRIFTED)
                .map(|(_, found)| (true, found))
                .or_else(|| {
                    message
                        .split_once(LAST_CLEAN)
                        .map(|(_, found)| (false, found))
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ident::QualifiedName;
    use crate::migrate::drift::Difference;

    fn report(differences: Vec<Difference>) -> DriftReport {
        DriftReport {
            table: QualifiedName::parse(None, "outbox").unwrap().to_string(),
            version: 8,
            differences,
        }
    }

    fn missing_index() -> Vec<Difference> {
        vec![Difference::MissingIndex {
            name: "idx_outbox_causationid".to_owned(),
            columns: "causationid",
        }]
    }

    fn after(check: Check<'_>, previous: Option<Condition>) -> Option<Condition> {
        let previous: Vec<Condition> = previous.into_iter().collect();
        drifted_condition(check, 1, &previous, Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_pass_that_did_not_check_says_unknown_with_why_and_the_last_finding_never_no_drift() {
        let clean = after(Check::Done(&report(Vec::new())), None).unwrap();
        assert_eq!(
            (clean.status.as_str(), clean.reason.as_str()),
            ("False", "NoDrift")
        );

        let unchecked = after(
            Check::NotDone("the pass stopped at PayloadMismatch"),
            Some(clean.clone()),
        )
        .unwrap();
        assert_eq!(unchecked.status, "Unknown");
        assert_eq!(unchecked.reason, "NotChecked");
        assert_eq!(
            unchecked.message,
            format!(
                "the table's shape was not checked in the last pass: the pass stopped at PayloadMismatch; the last check found no drift: {}",
                clean.message
            )
        );
        assert_eq!(
            last_found(&unchecked),
            Some((false, clean.message.as_str()))
        );
    }

    #[test]
    fn the_last_finding_survives_several_passes_that_did_not_check() {
        let drifted = after(Check::Done(&report(missing_index())), None).unwrap();
        assert_eq!(drifted.status, "True");
        let once = after(
            Check::NotDone("waiting for the lock"),
            Some(drifted.clone()),
        )
        .unwrap();
        let twice = after(
            Check::NotDone("the pass stopped at LockTimeout"),
            Some(once),
        )
        .unwrap();
        assert_eq!(last_found(&twice), Some((true, drifted.message.as_str())));
        assert!(twice.message.contains("LockTimeout"), "{}", twice.message);
    }

    #[test]
    fn no_condition_appears_before_a_first_check() {
        assert_eq!(after(Check::NotDone("suspended"), None), None);
    }
}
