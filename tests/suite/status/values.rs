//! The desired status for every kind of pass, compared as values: no API server, no database.

use std::time::Duration;

use boxtable_operator::crd::{BoxKind, BoxTableSpec, BoxTableStatus, DeletionPolicy, LockState};
use boxtable_operator::lock::{AcquireReport, Holder};
use boxtable_operator::migrate::{Outcome, Plan, RunPath};
use boxtable_operator::reason::Reason;
use boxtable_operator::status::{
    LockObservation, MAX_MESSAGE_BYTES, Observed, desired_status, same_ignoring_timestamps,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

// ---- fixtures -------------------------------------------------------------------------------

/// A BoxTable spec builder: `boxtable().inbox().table("Orders").plan()`.
struct SpecBuilder(BoxTableSpec);

fn boxtable() -> SpecBuilder {
    SpecBuilder(BoxTableSpec::new(BoxKind::Outbox, "shop-db"))
}

impl SpecBuilder {
    fn inbox(mut self) -> Self {
        self.0.box_kind = BoxKind::Inbox;
        self
    }
    fn table(mut self, table: &str) -> Self {
        self.0.table = Some(table.to_owned());
        self
    }
    fn plan(&self) -> Plan {
        boxtable_operator::pass::plan::plan(&self.0).unwrap()
    }
}

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_796_000_000 + seconds).unwrap()
}

fn holder(pid: i32, application_name: &str) -> Holder {
    Holder {
        pid,
        application_name: application_name.to_owned(),
        client_addr: Some("10.0.0.5".to_owned()),
        since: Some(t(-60)),
    }
}

fn outcome(path: RunPath, from: u32, to: u32) -> Outcome {
    Outcome {
        path,
        from_version: from,
        to_version: to,
        target_version: to,
        known_latest: 8,
        lock_lost_after_commit: false,
        lock: Some(AcquireReport {
            attempts: 1,
            waited: Duration::ZERO,
        }),
        blocked: boxtable_operator::lock::Blocked::default(),
        started: t(0),
        duration: Duration::from_millis(41),
        drift: None,
    }
}

fn succeeded(path: RunPath, from: u32, to: u32) -> Observed {
    Observed::Succeeded(outcome(path, from, to))
}

fn failed(reason: Reason, message: &str) -> Observed {
    Observed::Failed {
        reason,
        message: message.to_owned(),
        lock: None,
    }
}

fn waiting_for(holder: Option<Holder>) -> Observed {
    Observed::Waiting(LockObservation::waiting(
        3,
        Duration::from_millis(700),
        holder,
    ))
}

/// One observation of each kind, for properties that must hold whatever happened.
fn every_observation() -> Vec<Observed> {
    let mut all = vec![
        waiting_for(Some(holder(4242, "orders-api"))),
        Observed::Migrating(LockObservation::acquired(1, Duration::ZERO, t(0))),
        succeeded(RunPath::Fresh, 0, 8),
        succeeded(RunPath::Bootstrap, 2, 8),
        succeeded(RunPath::Normal, 6, 8),
        succeeded(RunPath::UpToDate, 8, 8),
        Observed::Suspended {
            applied_version: Some(6),
            would: None,
        },
        Observed::Deleting {
            policy: DeletionPolicy::Drop,
            managed_elsewhere: false,
        },
        Observed::Deleting {
            policy: DeletionPolicy::Drop,
            managed_elsewhere: true,
        },
        Observed::Deleting {
            policy: DeletionPolicy::Retain,
            managed_elsewhere: false,
        },
        Observed::Conflict {
            other: "shop/legacy-outbox".to_owned(),
        },
    ];
    all.extend(
        Reason::ALL
            .iter()
            .map(|r| failed(*r, "something went wrong")),
    );
    all
}

fn status_of(observed: &Observed) -> BoxTableStatus {
    desired_status(None, 1, Some(&boxtable().plan()), observed, t(0))
}

/// The status a pass at `generation` that observed `observed` at `now` writes over `previous`.
fn status_after(
    previous: &BoxTableStatus,
    generation: i64,
    observed: &Observed,
    now: Timestamp,
) -> BoxTableStatus {
    desired_status(
        Some(previous),
        generation,
        Some(&boxtable().plan()),
        observed,
        now,
    )
}

/// The status of generation 2 of a Drop BoxTable for `scratch_outbox` being deleted.
fn dropping_scratch_outbox(managed_elsewhere: bool) -> BoxTableStatus {
    let plan = boxtable().table("scratch_outbox").plan();
    let observed = Observed::Deleting {
        policy: DeletionPolicy::Drop,
        managed_elsewhere,
    };
    desired_status(None, 2, Some(&plan), &observed, t(0))
}

/// An up-to-date check at version 8 that started at `started`.
fn up_to_date_check(started: Timestamp) -> Outcome {
    let mut check = outcome(RunPath::UpToDate, 8, 8);
    check.started = started;
    check
}

fn condition<'a>(status: &'a BoxTableStatus, type_: &str) -> &'a Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"))
}

/// (Ready, Reconciling, Stalled) statuses.
fn kstatus(status: &BoxTableStatus) -> [&str; 3] {
    ["Ready", "Reconciling", "Stalled"].map(|c| condition(status, c).status.as_str())
}

fn ready(status: &BoxTableStatus) -> (&str, &str) {
    let c = condition(status, "Ready");
    (c.reason.as_str(), c.message.as_str())
}

/// Asserts that `status` is done (kstatus Current) with Ready saying `reason` and `message`.
fn assert_done_saying(status: &BoxTableStatus, reason: &str, message: &str) {
    assert_eq!(kstatus(status), DONE);
    assert_eq!(ready(status), (reason, message));
}

const IN_PROGRESS: [&str; 3] = ["False", "True", "False"];
const DONE: [&str; 3] = ["True", "False", "False"];
const GIVEN_UP: [&str; 3] = ["False", "False", "True"];

// ---- in progress ----------------------------------------------------------------------------

#[test]
fn waiting_for_the_lock_names_the_lock_and_the_holder_pid() {
    let status = status_of(&waiting_for(Some(holder(4242, "orders-api"))));
    assert_eq!(kstatus(&status), IN_PROGRESS);
    assert_eq!(
        ready(&status),
        (
            "WaitingForLock",
            "waiting for lock BrighterMigration_public.outbox held by pid 4242 (orders-api)"
        )
    );
    let lock = status.lock.unwrap();
    assert_eq!(lock.state, LockState::Waiting);
    assert_eq!(lock.attempts, Some(3));
    assert_eq!(lock.waited_milliseconds, Some(700));
    let shown = lock.holder.unwrap();
    assert_eq!(
        (shown.pid, shown.application_name.as_str()),
        (4242, "orders-api")
    );
    assert_eq!(shown.client_addr.as_deref(), Some("10.0.0.5"));
}

#[test]
fn waiting_without_a_visible_holder_still_names_the_lock() {
    let status = status_of(&waiting_for(None));
    assert_eq!(
        ready(&status).1,
        "waiting for lock BrighterMigration_public.outbox"
    );
    assert_eq!(status.lock.unwrap().holder, None);
}

#[test]
fn migrating_holds_the_lock_and_is_in_progress() {
    let status = status_of(&Observed::Migrating(LockObservation::acquired(
        1,
        Duration::ZERO,
        t(0),
    )));
    assert_eq!(kstatus(&status), IN_PROGRESS);
    assert_eq!(
        ready(&status),
        ("Migrating", "migrating public.outbox to version 8")
    );
    let lock = status.lock.unwrap();
    assert_eq!(lock.state, LockState::Acquired);
    assert!(lock.last_acquired_time.is_some());
}

#[test]
fn a_transient_failure_is_retried_and_reconciling_says_so() {
    let status = status_of(&failed(
        Reason::ConnectionFailed,
        "connection to postgres.shop.svc:5432 refused",
    ));
    assert_eq!(kstatus(&status), IN_PROGRESS);
    assert_eq!(
        ready(&status),
        (
            "ConnectionFailed",
            "connection to postgres.shop.svc:5432 refused"
        )
    );
    assert_eq!(
        condition(&status, "Reconciling").message,
        "retrying: connection to postgres.shop.svc:5432 refused"
    );
}

#[test]
fn deleting_with_drop_is_in_progress_and_names_the_table() {
    let status = dropping_scratch_outbox(false);
    assert_eq!(kstatus(&status), IN_PROGRESS);
    assert_eq!(
        ready(&status),
        ("Deleting", "dropping public.scratch_outbox")
    );
}

#[test]
fn deleting_a_table_another_boxtable_manages_says_keeping_from_the_start() {
    let status = dropping_scratch_outbox(true);
    assert_eq!(kstatus(&status), IN_PROGRESS);
    let (reason, message) = ready(&status);
    assert_eq!(reason, "Deleting");
    assert!(
        message.starts_with("keeping public.scratch_outbox: another BoxTable manages it"),
        "{message}"
    );
    assert!(!message.contains("dropping"), "{message}");
}

// ---- done -----------------------------------------------------------------------------------

#[test]
fn a_fresh_install_is_ready_and_records_the_run() {
    let status = status_of(&succeeded(RunPath::Fresh, 0, 8));
    assert_done_saying(&status, "Migrated", "public.outbox created at version 8");
    assert_eq!(
        (status.applied_version, status.target_version),
        (Some(8), Some(8))
    );
    assert_eq!(status.table.as_deref(), Some("public.outbox"));
    let run = status.last_run.unwrap();
    assert_eq!(run.path, RunPath::Fresh);
    assert_eq!(
        (run.from_version, run.to_version, run.duration_milliseconds),
        (0, 8, 41)
    );
    assert_eq!(run.start_time.0, t(0));
    let lock = status.lock.unwrap();
    assert_eq!(lock.state, LockState::Released);
    assert_eq!(
        (lock.attempts, lock.waited_milliseconds),
        (Some(1), Some(0))
    );
    assert_eq!(lock.timeout_seconds, Some(30.0));
    assert_eq!(lock.last_acquired_time.unwrap().0, t(0));
    // Released 41 ms later; metav1.Time keeps whole seconds, and status says what the wire keeps.
    assert_eq!(lock.last_released_time.unwrap().0, t(0));
}

#[test]
fn an_up_to_date_table_is_ready_with_its_version_in_the_message() {
    let status = status_of(&succeeded(RunPath::UpToDate, 8, 8));
    assert_done_saying(&status, "UpToDate", "public.outbox is at version 8");
}

#[test]
fn a_migration_names_both_versions() {
    let status = status_of(&succeeded(RunPath::Normal, 2, 8));
    assert_eq!(
        ready(&status),
        ("Migrated", "public.outbox migrated from version 2 to 8")
    );
}

#[test]
fn an_inbox_aims_at_version_2() {
    let status = desired_status(
        None,
        1,
        Some(&boxtable().inbox().plan()),
        &succeeded(RunPath::Fresh, 0, 2),
        t(0),
    );
    assert_eq!(status.target_version, Some(2));
    assert_eq!(status.table.as_deref(), Some("public.inbox"));
}

#[test]
fn an_up_to_date_check_does_not_replace_the_last_real_run() {
    let migrated = status_of(&succeeded(RunPath::Normal, 2, 8));
    let mut check = up_to_date_check(t(300));
    check.duration = Duration::from_millis(3);
    let later = status_after(&migrated, 1, &Observed::Succeeded(check), t(300));
    assert_eq!(later.last_run, migrated.last_run);
}

#[test]
fn the_lock_identity_matches_the_published_vector() {
    let lock = status_of(&succeeded(RunPath::Fresh, 0, 8)).lock.unwrap();
    assert_eq!(lock.lock_key, "BrighterMigration_public.outbox");
    assert_eq!(lock.key, "-5469556670739463647");
    assert_eq!(lock.key_hex, "b4183b2fd9b4c221");
    assert_eq!(
        (
            lock.pg_locks.classid,
            lock.pg_locks.objid,
            lock.pg_locks.objsubid
        ),
        (3021486895, 3652502049, 1)
    );
}

// ---- given up -------------------------------------------------------------------------------

#[test]
fn every_stalled_reason_gives_up_with_its_message() {
    for reason in Reason::ALL.into_iter().filter(|r| r.is_stalled()) {
        let status = status_of(&failed(reason, "it cannot work"));
        assert_eq!(kstatus(&status), GIVEN_UP, "{reason}");
        assert_eq!(
            ready(&status),
            (reason.as_str(), "it cannot work"),
            "{reason}"
        );
        assert_eq!(
            condition(&status, "Stalled").message,
            "it cannot work",
            "{reason}"
        );
    }
}

#[test]
fn every_other_failure_reason_is_retried() {
    for reason in Reason::ALL.into_iter().filter(|r| !r.is_stalled()) {
        assert_eq!(
            kstatus(&status_of(&failed(reason, "boom"))),
            IN_PROGRESS,
            "{reason}"
        );
    }
}

#[test]
fn a_lock_timeout_records_the_holder_and_the_timed_out_state() {
    let observed = Observed::Failed {
        reason: Reason::LockTimeout,
        message: "timed out after 30s waiting for advisory lock BrighterMigration_public.outbox; held by pid 4242"
            .to_owned(),
        lock: Some(LockObservation::timed_out(
            12,
            Duration::from_secs(30),
            Some(holder(4242, "orders-api")),
        )),
    };
    let status = status_of(&observed);
    assert_eq!(kstatus(&status), GIVEN_UP);
    let lock = status.lock.unwrap();
    assert_eq!(lock.state, LockState::TimedOut);
    assert_eq!(
        (lock.attempts, lock.waited_milliseconds),
        (Some(12), Some(30_000))
    );
    assert_eq!(lock.holder.unwrap().pid, 4242);
}

#[test]
fn a_conflict_names_the_other_boxtable_and_gives_up() {
    let status = status_of(&Observed::Conflict {
        other: "shop/legacy-outbox".to_owned(),
    });
    assert_eq!(kstatus(&status), GIVEN_UP);
    assert_eq!(
        ready(&status),
        (
            "TableConflict",
            "public.outbox is already managed by BoxTable shop/legacy-outbox; only one BoxTable manages a table: delete one of the two (with deletionPolicy Retain the table stays) or point it at another table"
        )
    );
}

#[test]
fn an_invalid_spec_keeps_what_was_known_about_the_table() {
    let before = status_of(&succeeded(RunPath::Fresh, 0, 8));
    let observed = failed(Reason::InvalidSpec, "spec.lock.timeout is invalid");
    let status = desired_status(Some(&before), 2, None, &observed, t(60));
    assert_eq!(kstatus(&status), GIVEN_UP);
    assert_eq!(status.table, before.table);
    assert_eq!(status.applied_version, Some(8));
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(
        status.lock, before.lock,
        "the lock identity and last state stay known (the LOCK and KEY columns stay filled)"
    );
    assert!(status.lock.is_some());
}

// ---- neither --------------------------------------------------------------------------------

#[test]
fn suspended_reports_the_version_and_neither_reconciles_nor_stalls() {
    let status = status_of(&Observed::Suspended {
        applied_version: Some(6),
        would: None,
    });
    assert_eq!(kstatus(&status), ["False", "False", "False"]);
    assert_eq!(
        ready(&status),
        (
            "Suspended",
            "suspended; public.outbox is at version 6, target 8"
        )
    );
    assert_eq!(status.applied_version, Some(6));
}

// ---- properties -----------------------------------------------------------------------------

#[test]
fn reconciling_and_stalled_are_never_true_together() {
    for observed in every_observation() {
        let status = status_of(&observed);
        let [_, reconciling, stalled] = kstatus(&status);
        assert!(
            !(reconciling == "True" && stalled == "True"),
            "{observed:?}"
        );
        assert_eq!(status.conditions.len(), 3, "{observed:?}");
    }
}

#[test]
fn every_condition_carries_the_generation_and_a_reason() {
    for observed in every_observation() {
        let status = desired_status(None, 7, Some(&boxtable().plan()), &observed, t(0));
        assert_eq!(status.observed_generation, Some(7));
        for c in &status.conditions {
            assert_eq!(c.observed_generation, Some(7), "{observed:?}");
            assert!(!c.reason.is_empty(), "{observed:?}");
        }
    }
}

#[test]
fn no_condition_carries_a_reason_without_a_message() {
    for observed in every_observation() {
        let status = status_of(&observed);
        for c in &status.conditions {
            assert!(
                !c.message.is_empty(),
                "{} {} with reason {} has no message, after {observed:?}",
                c.type_,
                c.status,
                c.reason
            );
        }
    }
}

#[test]
fn a_given_up_status_says_in_reconciling_that_it_is_not_retrying() {
    let status = status_of(&failed(
        Reason::SchemaNotFound,
        "schema sales does not exist",
    ));
    let reconciling = condition(&status, "Reconciling");
    assert_eq!(reconciling.status, "False");
    assert_eq!(
        reconciling.message,
        "given up until something changes: schema sales does not exist"
    );
}

#[test]
fn the_lock_once_known_survives_every_kind_of_pass_with_or_without_a_plan() {
    let known = status_of(&waiting_for(Some(holder(4242, "orders-api"))));
    assert!(known.lock.is_some());
    for observed in every_observation() {
        for plan in [Some(boxtable().plan()), None] {
            let status = desired_status(Some(&known), 2, plan.as_ref(), &observed, t(60));
            let lock = status
                .lock
                .unwrap_or_else(|| panic!("the lock went after {observed:?} (plan: {plan:?})"));
            assert_eq!(lock.key, known.lock.as_ref().unwrap().key, "{observed:?}");
        }
    }
}

#[test]
fn timestamps_alone_do_not_cause_a_write() {
    let first = status_of(&succeeded(RunPath::UpToDate, 8, 8));
    let again = up_to_date_check(t(600));
    let second = status_after(&first, 1, &Observed::Succeeded(again), t(600));
    assert_ne!(first, second, "the lock times moved");
    assert!(same_ignoring_timestamps(&first, &second));
}

#[test]
fn a_changed_reason_or_generation_causes_a_write() {
    let migrated = status_of(&succeeded(RunPath::Normal, 2, 8));
    let failing = status_after(
        &migrated,
        1,
        &failed(Reason::ConnectionFailed, "could not open a session"),
        t(0),
    );
    assert!(!same_ignoring_timestamps(&migrated, &failing));
    let next_generation = status_after(&migrated, 2, &succeeded(RunPath::UpToDate, 8, 8), t(0));
    assert!(!same_ignoring_timestamps(&migrated, &next_generation));
    assert_eq!(
        ready(&next_generation),
        ("UpToDate", "public.outbox is at version 8")
    );
}

#[test]
fn a_check_with_nothing_to_do_after_a_migration_keeps_the_status_as_it_was() {
    let migrated = status_of(&succeeded(RunPath::Normal, 2, 8));
    let mut check = up_to_date_check(t(300));
    check.lock = Some(AcquireReport {
        attempts: 1,
        waited: Duration::from_millis(3),
    });
    let later = status_after(&migrated, 1, &Observed::Succeeded(check), t(300));
    assert_eq!(ready(&later), ready(&migrated));
    assert!(same_ignoring_timestamps(&migrated, &later), "{later:?}");
}

#[test]
fn last_transition_time_is_kept_until_the_condition_flips() {
    let waiting = status_of(&waiting_for(None));
    let still_waiting = status_after(&waiting, 1, &waiting_for(None), t(10));
    for c in &still_waiting.conditions {
        assert_eq!(c.last_transition_time.0, t(0), "{} did not flip", c.type_);
    }
    let done = status_after(&still_waiting, 1, &succeeded(RunPath::Fresh, 0, 8), t(20));
    assert_eq!(
        condition(&done, "Ready").last_transition_time.0,
        t(20),
        "Ready flipped"
    );
    assert_eq!(
        condition(&done, "Reconciling").last_transition_time.0,
        t(20),
        "Reconciling flipped"
    );
    assert_eq!(
        condition(&done, "Stalled").last_transition_time.0,
        t(0),
        "Stalled stayed False"
    );
}

#[test]
fn long_messages_are_cut_on_a_character_boundary() {
    let long = "é".repeat(MAX_MESSAGE_BYTES);
    let status = status_of(&failed(Reason::MigrationFailed, &long));
    for c in &status.conditions {
        assert!(c.message.len() <= MAX_MESSAGE_BYTES, "{}", c.type_);
    }
    assert!(ready(&status).1.ends_with("..."));
}

#[test]
fn status_serialises_with_the_contract_names_and_the_key_as_a_string() {
    let status = status_of(&succeeded(RunPath::Fresh, 0, 8));
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["observedGeneration"], 1);
    assert_eq!(json["appliedVersion"], 8);
    assert_eq!(json["lock"]["key"], "-5469556670739463647");
    assert_eq!(json["lock"]["keyHex"], "b4183b2fd9b4c221");
    assert_eq!(json["lock"]["pgLocks"]["objsubid"], 1);
    assert_eq!(json["lock"]["state"], "Released");
    assert_eq!(json["lastRun"]["path"], "Fresh");
    assert_eq!(json["lastRun"]["durationMilliseconds"], 41);
    assert_eq!(json["conditions"][0]["type"], "Ready");
    let back: BoxTableStatus = serde_json::from_value(json).unwrap();
    assert_eq!(back, status);
}

#[test]
fn a_table_a_newer_brighter_migrated_is_ready_ahead_of_the_operator() {
    let mut ahead = outcome(RunPath::UpToDate, 9, 9);
    ahead.target_version = 8;

    let status = status_of(&Observed::Succeeded(ahead));

    assert_eq!(kstatus(&status), DONE);
    let (reason, message) = ready(&status);
    assert_eq!(reason, "AheadOfOperator");
    assert!(
        message.contains("version 9") && message.contains("up to 8"),
        "{message}"
    );
    assert_eq!(status.applied_version, Some(9));
}

#[test]
fn a_table_above_its_target_but_known_to_the_operator_is_plainly_up_to_date() {
    let mut above = outcome(RunPath::UpToDate, 8, 8);
    above.target_version = 5;

    let status = status_of(&Observed::Succeeded(above));

    assert_eq!(ready(&status).0, "UpToDate");
}

// ---- pending plan and drift -----------------------------------------------------------------

#[test]
fn a_suspended_status_shows_the_pending_plan_until_the_run_after_it_ends() {
    use boxtable_operator::migrate::Decision;
    let suspended = status_of(&Observed::Suspended {
        applied_version: Some(6),
        would: Some(Decision::Normal { from: 6, to: 8 }),
    });
    let pending = suspended.pending.clone().unwrap();
    assert_eq!(pending.path, RunPath::Normal);
    let versions: Vec<u32> = pending.versions.iter().map(|v| v.version).collect();
    assert_eq!(versions, [7, 8]);
    assert!(
        condition(&suspended, "Ready")
            .message
            .ends_with("setting suspend: false applies versions 7, 8 (status.pending)")
    );

    let waiting = status_after(
        &suspended,
        2,
        &Observed::Waiting(LockObservation::waiting(1, Duration::ZERO, None)),
        t(1),
    );
    assert_eq!(
        waiting.pending, suspended.pending,
        "kept while the run waits"
    );

    let as_planned = status_after(&waiting, 2, &succeeded(RunPath::Normal, 6, 8), t(2));
    assert_eq!(as_planned.pending, None);
    assert!(
        !condition(&as_planned, "Ready")
            .message
            .contains("re-planned")
    );

    let other = status_after(&waiting, 2, &succeeded(RunPath::Normal, 7, 8), t(2));
    assert!(
        condition(&other, "Ready").message.contains(
            "re-planned: the table or the target changed since the pending plan was shown (it said: migrate from version 6 to 8; the run found version 7 and did: migrate from version 7 to 8)"
        ),
        "{other:?}"
    );
}

#[test]
fn a_drift_check_sets_the_drifted_condition_and_other_passes_say_they_did_not_check() {
    use boxtable_operator::migrate::drift::{Difference, DriftReport};
    let mut outcome = outcome(RunPath::UpToDate, 8, 8);
    outcome.drift = Some(DriftReport {
        table: "public.outbox".into(),
        version: 8,
        differences: vec![Difference::MissingColumn {
            column: "causationid",
        }],
    });
    let drifted = status_of(&Observed::Succeeded(outcome.clone()));
    let c = condition(&drifted, "Drifted");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Drifted"));
    assert_eq!(
        condition(&drifted, "Ready").status,
        "True",
        "Ready is unaffected"
    );

    let failed = status_after(
        &drifted,
        1,
        &Observed::Failed {
            reason: Reason::ConnectionFailed,
            message: "down".into(),
            lock: None,
        },
        t(5),
    );
    let unchecked = condition(&failed, "Drifted");
    assert_eq!(
        (unchecked.status.as_str(), unchecked.reason.as_str()),
        ("Unknown", "NotChecked"),
        "a pass without a check claims no finding"
    );
    assert_eq!(
        unchecked.message,
        format!(
            "the table's shape was not checked in the last pass: the pass stopped at ConnectionFailed; the last check found drift: {}",
            c.message
        )
    );
    assert_eq!(unchecked.last_transition_time.0, t(5));

    outcome.drift.as_mut().unwrap().differences.clear();
    let clean = status_after(&failed, 1, &Observed::Succeeded(outcome), t(9));
    let c = condition(&clean, "Drifted");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "NoDrift"));
    assert_eq!(c.last_transition_time.0, t(9));
}
