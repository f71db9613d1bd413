//! Deleting BoxTables through the controller, in-process against the real kube-apiserver (through
//! a fault-injecting proxy where the test needs slow reads and cut watches) and a real PostgreSQL: a Drop destroys only what its BoxTable owns, asks before destroying data, never
//! silently becomes a Retain, runs once, and never spins.

use std::time::Duration;

use boxtable_operator::crd::{BoxTable, FINALIZER, LockState};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support;
use crate::support::Sql;
use crate::support::controller::*;
use crate::support::fault_proxy::Rule;

const CONFIRM: &str = "brighter.dev/confirm-drop";

async fn insert_messages(h: &Harness, table: &str, undispatched: u32, dispatched: u32) {
    h.sql()
        .await.batch(&format!(
            "INSERT INTO {table} (messageid, topic, body, dispatched) \
             SELECT gen_random_uuid()::text, 't', 'b', NULL FROM generate_series(1, {undispatched}); \
             INSERT INTO {table} (messageid, topic, body, dispatched) \
             SELECT gen_random_uuid()::text, 't', 'b', now() FROM generate_series(1, {dispatched})"
        )).await;
}

async fn rows(h: &Harness, table: &str) -> i64 {
    h.sql()
        .await
        .value(&format!("SELECT count(*) FROM {table}"), &[])
        .await
}

fn has_finalizer(bt: &BoxTable) -> bool {
    bt.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// The value of the series `series` (like `boxtable_drops_total{result="failed"}`), 0 when absent.
fn metric(h: &Harness, series: &str) -> f64 {
    h.metrics
        .encode()
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn event_reasons(h: &Harness, name: &str) -> Vec<(String, String, String)> {
    h.events(name)
        .await
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until an event of `name` matches `matches` (events are published after the status write
/// that a test waits on, so reading them at once can miss the newest); returns all of them.
async fn wait_for_event(
    h: &Harness,
    name: &str,
    what: &str,
    matches: impl Fn(&str, &str, &str) -> bool,
) -> Vec<(String, String, String)> {
    wait_for_value(
        &format!("an event: {what}"),
        DEADLINE,
        || event_reasons(h, name),
        |events| events.iter().any(|(r, t, n)| matches(r, t, n)),
    )
    .await
}

#[tokio::test]
async fn deleting_the_loser_of_a_conflict_keeps_the_winners_table_and_its_rows() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("shared-outbox").table("shared_outbox"))
        .await;
    insert_messages(&h, "public.shared_outbox", 1, 0).await;
    h.apply_stalled(
        boxtable("dup-outbox").table("shared_outbox").drop_policy(),
        "TableConflict",
    )
    .await;

    h.delete("dup-outbox").await;
    h.wait_gone("dup-outbox").await;

    assert!(h.table_exists("public.shared_outbox").await);
    assert_eq!(rows(&h, "public.shared_outbox").await, 1);
    let events = wait_for_event(
        &h,
        "dup-outbox",
        "the deletion says the table was kept, and whose it is",
        |r, t, n| {
            r == "TableKept"
                && t == "Warning"
                && n.contains(&format!("{}/shared-outbox", h.namespace))
        },
    )
    .await;
    // Said from the start: the deletion never announced a drop it was not going to make.
    assert!(
        !events.iter().any(|(_, _, n)| n.contains("dropping")),
        "{events:#?}"
    );
    assert!(
        events.iter().any(|(r, t, n)| r == "Deleting"
            && t == "Normal"
            && n.starts_with("keeping public.shared_outbox: another BoxTable manages it")),
        "{events:#?}"
    );
    h.wait_for_passes(2).await;
    assert!(is_ready(&h.get("shared-outbox").await));
}

#[tokio::test]
async fn consent_names_the_table_exactly_as_the_status_shows_it() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("scratch").table("scratch_outbox").drop_policy())
        .await;
    insert_messages(&h, "public.scratch_outbox", 3, 0).await;
    h.delete("scratch").await;
    h.wait_stalled("scratch", "DropBlocked").await;

    // Only the table's name as status.table shows it consents: not another case, not with spaces.
    for resembling in [
        "public.Scratch_Outbox",
        "PUBLIC.SCRATCH_OUTBOX",
        " public.scratch_outbox",
        "public.scratch_outbox ",
    ] {
        h.annotate("scratch", CONFIRM, resembling).await;
        // Two passes, or the object gone: a consent that was taken ends the deletion.
        let target = h.reconciles() + 2;
        wait_until("two more passes, or the BoxTable gone", || async {
            h.reconciles() >= target || h.boxtables().get_opt("scratch").await.unwrap().is_none()
        })
        .await;
        assert!(
            h.boxtables().get_opt("scratch").await.unwrap().is_some(),
            "{resembling:?} consented: the table was dropped"
        );
        assert!(
            is_stalled_with(&h.get("scratch").await, "DropBlocked"),
            "{resembling:?} consented"
        );
        assert_eq!(
            rows(&h, "public.scratch_outbox").await,
            3,
            "{resembling:?} consented"
        );
    }

    h.annotate("scratch", CONFIRM, "public.scratch_outbox")
        .await;
    h.wait_gone("scratch").await;
    assert!(!h.table_exists("public.scratch_outbox").await);
}

#[tokio::test]
async fn a_boxtable_reaching_an_owned_table_through_another_secret_conflicts_and_its_drop_keeps_it()
{
    let h = Harness::start().await;
    h.create_secret_named("other-db").await;
    h.apply_ready(boxtable("team-a")).await;
    insert_messages(&h, "public.outbox", 1, 0).await;

    let stalled = h
        .apply_stalled(
            boxtable("team-b").secret("other-db").drop_policy(),
            "TableConflict",
        )
        .await;
    let message = ready_message(&stalled);
    assert!(
        message.contains(&format!("{}/team-a", h.namespace)) && message.contains("public.outbox"),
        "the conflict names the owner from the database: {message}"
    );

    h.delete("team-b").await;
    h.wait_gone("team-b").await;
    assert!(h.table_exists("public.outbox").await);
    assert_eq!(rows(&h, "public.outbox").await, 1);
    h.wait_for_passes(2).await;
    assert!(is_ready(&h.get("team-a").await));
}

#[tokio::test]
async fn an_adopted_table_holding_messages_is_dropped_only_after_consent_naming_it() {
    let h = Harness::start().await;
    let client = h.sql().await;
    support::migrate::outbox_at(&client, "public.legacy_outbox", 2, 0).await;
    client
        .batch(
            "INSERT INTO public.legacy_outbox (MessageId, Topic, Body) \
             SELECT gen_random_uuid(), 't', 'b' FROM generate_series(1, 1000)",
        )
        .await;
    h.apply_ready(boxtable("legacy").table("legacy_outbox").drop_policy())
        .await;

    h.delete("legacy").await;
    let blocked = h.wait_stalled("legacy", "DropBlocked").await;

    let message = ready_message(&blocked);
    for needed in [
        "1000 rows, 1000 of them undispatched",
        "adopted",
        "brighter.dev/confirm-drop=public.legacy_outbox",
        "Retain",
    ] {
        assert!(
            message.contains(needed),
            "{needed:?} missing from: {message}"
        );
    }
    assert!(has_finalizer(&blocked));
    let lock = blocked.status.as_ref().unwrap().lock.as_ref().unwrap();
    assert_eq!(
        lock.state,
        LockState::Released,
        "the blocked drop took the lock to look and let it go: {lock:?}"
    );
    assert!(metric(&h, "boxtable_drops_total{result=\"blocked\"}") >= 1.0);
    assert_eq!(
        metric(&h, "boxtable_failures_total{reason=\"DropBlocked\"}"),
        0.0,
        "waiting for consent is no failure"
    );
    wait_for_event(
        &h,
        "legacy",
        "a Warning event says what to do",
        |r, t, n| r == "DropBlocked" && t == "Warning" && n.contains("confirm-drop"),
    )
    .await;
    // A resync later it is still waiting, and the data is still there.
    h.wait_for_passes(1).await;
    assert!(is_stalled_with(&h.get("legacy").await, "DropBlocked"));
    assert_eq!(rows(&h, "public.legacy_outbox").await, 1000);

    // Consent for another table is no consent.
    h.annotate("legacy", CONFIRM, "public.outbox").await;
    h.wait_for_passes(1).await;
    assert_eq!(rows(&h, "public.legacy_outbox").await, 1000);

    h.annotate("legacy", CONFIRM, "public.legacy_outbox").await;
    h.wait_gone("legacy").await;
    assert!(!h.table_exists("public.legacy_outbox").await);
    wait_for_event(
        &h,
        "legacy",
        "the drop says what it destroyed",
        |r, _t, n| r == "Dropped" && n.contains("it held 1000 rows, 1000 of them undispatched"),
    )
    .await;
}

#[tokio::test]
async fn a_suspended_boxtable_blocks_its_drop_until_it_is_resumed() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").drop_policy()).await;
    h.patch_spec("orders", json!({"suspend": true})).await;
    h.wait_for_reason("orders", "Suspended").await;

    h.delete("orders").await;
    let blocked = h.wait_stalled("orders", "DropBlocked").await;

    assert!(
        ready_message(&blocked).contains("suspend"),
        "{}",
        ready_message(&blocked)
    );
    assert!(h.table_exists("public.outbox").await);
    h.patch_spec("orders", json!({"suspend": false})).await;
    h.wait_gone("orders").await;
    assert!(!h.table_exists("public.outbox").await);
}

#[tokio::test]
async fn a_suspended_boxtable_that_never_touched_its_table_leaves_it_alone() {
    let h = Harness::start().await;
    support::migrate::outbox_at(&h.sql().await, "public.outbox", 2, 0).await;
    h.apply(boxtable("orders").drop_policy().suspended()).await;
    h.wait_for_reason("orders", "Suspended").await;

    h.delete("orders").await;
    h.wait_gone("orders").await;

    assert!(h.table_exists("public.outbox").await);
    wait_for_event(&h, "orders", "TableKept", |r, _t, _n| r == "TableKept").await;
}

#[tokio::test]
async fn a_drop_waiting_for_the_lock_shows_the_holder_and_survives_an_operator_shutdown() {
    let mut h = Harness::start().await;
    h.apply_ready(boxtable("orders").drop_policy()).await;
    let holder = h.hold_lock("orders-api", "public", "outbox").await;

    h.delete("orders").await;
    let waiting = h.wait_for_lock("orders", LockState::Waiting).await;
    let status = waiting.status.unwrap();
    assert_eq!(reason(&status), "WaitingForLock");
    let seen = status.lock.unwrap().holder.expect("the holder is shown");
    assert_eq!(
        (seen.pid, seen.application_name.as_str()),
        (holder.pid, "orders-api")
    );
    wait_for_event(&h, "orders", "WaitingForLock", |r, _t, _n| {
        r == "WaitingForLock"
    })
    .await;

    // A rolling update: this replica stops in the middle of the wait.
    h.stop().await;
    let after_stop = h.get("orders").await;
    assert!(
        has_finalizer(&after_stop),
        "the finalizer stays for the next replica"
    );
    let status = after_stop.status.unwrap();
    assert_eq!(reason(&status), "Cancelled", "{status:?}");
    assert_ne!(
        status.lock.map(|l| l.state),
        Some(LockState::Waiting),
        "nothing waits once the operator has stopped"
    );
    assert!(h.table_exists("public.outbox").await);

    h.restart();
    holder.release().await;
    h.wait_gone("orders").await;
    assert!(!h.table_exists("public.outbox").await);
}

/// Where the `duration()` rule of `lock.timeout` sits in the CRD.
const LOCK_TIMEOUT_RULES: &str = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/\
    properties/lock/properties/timeout/x-kubernetes-validations";

/// The installed CRD without the rule that caps `lock.timeout` at 1h, as an older release of the
/// CRD was: objects written meanwhile keep a timeout the current CRD refuses. The rule is put back
/// when this is dropped (also when the test fails).
struct OlderCrd {
    plane: &'static support::control_plane::ControlPlane,
    rules: serde_json::Value,
}

impl OlderCrd {
    fn install(plane: &'static support::control_plane::ControlPlane) -> OlderCrd {
        let crd: serde_json::Value = serde_json::from_str(
            &plane
                .kubectl_admin(
                    &["get", "crd", "boxtables.brighter.dev", "-o", "json"],
                    None,
                )
                .unwrap(),
        )
        .unwrap();
        let rules = crd.pointer(LOCK_TIMEOUT_RULES).cloned().unwrap();
        assert!(rules.to_string().contains("duration(self)"), "{rules}");
        Self::patch(
            plane,
            &json!([{"op": "remove", "path": LOCK_TIMEOUT_RULES}]),
        );
        OlderCrd { plane, rules }
    }

    fn patch(plane: &support::control_plane::ControlPlane, patch: &serde_json::Value) {
        plane
            .kubectl_admin(
                &[
                    "patch",
                    "crd",
                    "boxtables.brighter.dev",
                    "--type=json",
                    "-p",
                    &patch.to_string(),
                ],
                None,
            )
            .unwrap();
    }
}

impl Drop for OlderCrd {
    fn drop(&mut self) {
        let restore = json!([{"op": "add", "path": LOCK_TIMEOUT_RULES, "value": self.rules}]);
        Self::patch(self.plane, &restore);
    }
}

#[tokio::test]
async fn a_drop_still_runs_when_the_spec_no_longer_plans() {
    // The CRD refuses `lock.timeout: 2h` at apply time; a spec that no longer plans comes from an
    // object stored under an older CRD that did not. The real server keeps such an object
    // writable (validation ratcheting leaves an unchanged field alone), so the finalizer can go.
    let h = Harness::start().await;
    h.apply(boxtable("orders").drop_policy()).await;
    let known = h.wait_ready("orders").await.status.unwrap().lock.unwrap();
    let older = OlderCrd::install(h.plane);
    // The API server takes up a CRD change a moment later: try until the old CRD admits 2h.
    let two_hours = json!({"spec": {"lock": {"timeout": "2h"}}});
    wait_until("the older CRD to admit lock.timeout: 2h", || async {
        h.boxtables()
            .patch("orders", &PatchParams::default(), &Patch::Merge(&two_hours))
            .await
            .is_ok()
    })
    .await;
    drop(older);
    wait_until(
        "the current CRD to refuse lock.timeout: 2h again",
        || async {
            let probe = PatchParams {
                dry_run: true,
                ..PatchParams::default()
            };
            let longer = json!({"spec": {"lock": {"timeout": "3h"}}});
            h.boxtables()
                .patch("orders", &probe, &Patch::Merge(&longer))
                .await
                .is_err_and(|e| {
                    e.to_string().contains("at most 1h") || e.to_string().contains("maximum of 1h")
                })
        },
    )
    .await;
    let refused = h
        .wait_stalled("orders", "InvalidSpec")
        .await
        .status
        .unwrap();
    let kept = refused
        .lock
        .expect("status.lock survives a pass that refuses the spec");
    assert_eq!((kept.key, kept.lock_key), (known.key, known.lock_key));

    h.delete("orders").await;
    h.wait_gone("orders").await;

    assert!(!h.table_exists("public.outbox").await);
}

#[tokio::test]
async fn a_stuck_drop_makes_one_pass_per_backoff_step_and_says_so_in_its_conditions() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").drop_policy()).await;
    h.delete_secret(SECRET).await;

    h.delete("orders").await;
    let failed = h.wait_for_reason("orders", "DropFailed").await;
    assert!(
        ready_message(&failed).contains(SECRET),
        "{}",
        ready_message(&failed)
    );

    // The measurement window the check is about: what a stuck deletion costs over 30 s.
    let before = h.api_requests();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let requests = h.api_requests() - before;

    println!("API requests during 30 s of a stuck Drop: {requests}");
    // Backoff from 0.5 s doubling: about 6 passes in 30 s, each one Secret read.
    assert!(
        requests <= 30,
        "a stuck deletion must not spin: {requests} API requests in 30 s"
    );
    let still = h.get("orders").await;
    assert_eq!(reason(still.status.as_ref().unwrap()), "DropFailed");
    assert!(h.table_exists("public.outbox").await);
}

#[tokio::test]
async fn every_drop_runs_exactly_once_even_when_a_pass_is_queued_behind_it_on_a_stale_cache() {
    // Slow reads and cut watches come from the fault-injecting proxy in front of the server.
    let h = Harness::builder().faults().start().await;
    h.apply_ready(boxtable("orders").drop_policy()).await;
    let holder = h.hold_lock("orders-api", "public", "outbox").await;
    h.delete("orders").await;
    // The status, not a count of sessions: the pass before kept its session open in the pool.
    h.wait_for_lock("orders", LockState::Waiting).await;
    // Another trigger arrives while the drop waits, and from here the operator's cache stops
    // seeing changes for a while (its BoxTable watch is cut and re-watching is slow), so the
    // queued pass will run on the object as it was before the finalizer went.
    h.annotate("orders", "example.com/touched", "yes").await;
    let slowed = h.api.add(
        Rule::stall(Duration::from_secs(3))
            .method("GET")
            .path_prefix("/apis/brighter.dev"),
    );
    h.api.drop_watches();

    holder.release().await;
    h.wait_gone("orders").await;
    // The queued pass runs as soon as the drop's pass ends; wait until nothing is in flight, and
    // for the cache to catch up.
    let in_flight_zero = || async {
        h.metrics
            .encode()
            .unwrap()
            .lines()
            .any(|l| l == "boxtable_reconciles_in_flight 0")
    };
    wait_until("no reconcile in flight", in_flight_zero).await;
    assert!(slowed.hits() > 0, "the cache was never slowed down");
    h.api.clear();
    h.apply_ready(boxtable("sentinel")).await;
    wait_until("no reconcile in flight", in_flight_zero).await;

    let dropped: Vec<_> = event_reasons(&h, "orders")
        .await
        .into_iter()
        .filter(|(r, _, _)| r == "Dropped")
        .collect();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    let logs = h.logs();
    assert!(!logs.contains("already gone"), "a second drop ran");
    let twice: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("finalizer") && l.contains("failed"))
        .collect();
    assert!(
        twice.is_empty(),
        "the finalizer was removed twice: {twice:?}"
    );
}

#[tokio::test]
async fn a_drop_that_times_out_on_the_lock_names_the_holder_in_its_conditions_and_counts_as_a_failed_drop()
 {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").drop_policy().lock_timeout("1s"))
        .await;
    let holder = h.hold_lock("orders-api", "public", "outbox").await;

    h.delete("orders").await;
    let failed = h
        .wait_for("orders", "DropFailed after a lock timeout", |bt| {
            bt.status.as_ref().is_some_and(|s| {
                reason(s) == "DropFailed"
                    && s.lock
                        .as_ref()
                        .is_some_and(|l| l.state == LockState::TimedOut)
            })
        })
        .await;
    let status = failed.status.unwrap();
    let message = &condition(&status, "Ready").unwrap().message;
    println!("DropFailed message: {message}");
    assert!(
        message.contains(&holder.pid.to_string()) && message.contains("orders-api"),
        "the condition names the holder: {message}"
    );
    assert!(!message.contains("drop failed:"), "{message}");
    let lock = status.lock.as_ref().unwrap();
    assert_eq!(lock.holder.as_ref().map(|h| h.pid), Some(holder.pid));
    assert!(has(&status, "Reconciling", "True"));

    // The pass counts its outcome after it has written the status the test just saw.
    for series in [
        "boxtable_failures_total{reason=\"DropFailed\"}",
        "boxtable_drops_total{result=\"failed\"}",
        "boxtable_lock_outcomes_total{outcome=\"timed_out\"}",
    ] {
        wait_until(series, || async { metric(&h, series) >= 1.0 }).await;
    }
    for not_a_failure in ["Deleting", "Suspended"] {
        assert_eq!(
            metric(
                &h,
                &format!("boxtable_failures_total{{reason=\"{not_a_failure}\"}}")
            ),
            0.0
        );
    }

    holder.release().await;
    h.wait_gone("orders").await;
    assert_eq!(metric(&h, "boxtable_drops_total{result=\"dropped\"}"), 1.0);
    assert!(!h.table_exists("public.outbox").await);
}

#[tokio::test]
async fn a_run_waiting_for_the_lock_creates_nothing_once_its_boxtable_went_without_the_operator() {
    let h = Harness::start().await;
    let holder = h.hold_lock("orders-api", "public", "outbox").await;
    h.apply(boxtable("orders").drop_policy()).await;
    // The pass has put the finalizer on and waits for the table's lock.
    wait_until("the run's session waiting for the lock", || async {
        h.operator_sessions().await == 1
    })
    .await;
    assert!(
        h.get("orders")
            .await
            .finalizers()
            .contains(&FINALIZER.to_owned())
    );
    // Someone strips the finalizer by hand and deletes the BoxTable: it goes at once, and the
    // operator never sees a deletion to clean up after.
    h.boxtables()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    h.delete("orders").await;
    h.wait_gone("orders").await;

    holder.release().await;
    wait_until("the run's session gone", || async {
        h.operator_sessions().await == 0
    })
    .await;
    assert!(
        !h.table_exists("public.outbox").await,
        "a table was created for a BoxTable that no longer exists, and nothing would ever drop it"
    );
    assert!(
        h.logs().contains("the BoxTable is gone"),
        "the run did not say why it changed nothing"
    );
    assert_eq!(
        support::advisory_locks(&h.sql().await).await,
        0,
        "an advisory lock was left held"
    );
}
