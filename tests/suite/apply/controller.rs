//! The controller end to end, in-process: BoxTables on the real kube-apiserver, tables in a real
//! PostgreSQL, and `controller::run` reconciling between them.

use std::time::Duration;

use boxtable_operator::crd::LockState;
use boxtable_operator::migrate::BoxKind;
use serde_json::json;

use crate::support;
use crate::support::Sql;
use crate::support::controller::*;

/// The history rows of an outbox at V5 once the operator has migrated it to V8.
const V5_TO_V8: [i32; 4] = [5, 6, 7, 8];

/// A Harness where an application (`orders-api`) holds Brighter's lock on `public.outbox` and
/// the BoxTable `orders`, waiting up to `lock_timeout` for it, has just been created.
async fn orders_behind_an_applications_lock(lock_timeout: &str) -> (Harness, LockHolder) {
    let h = Harness::start().await;
    let holder = h.hold_lock("orders-api", "public", "outbox").await;
    h.apply(boxtable("orders").lock_timeout(lock_timeout)).await;
    (h, holder)
}

#[tokio::test]
async fn a_new_boxtable_becomes_ready_with_the_lock_identity_and_one_history_row() {
    let h = Harness::start().await;

    let bt = h.apply_ready(boxtable("orders").outbox()).await;

    let status = bt.status.clone().unwrap();
    assert_eq!(status.observed_generation, bt.metadata.generation);
    for c in &status.conditions {
        assert_eq!(c.observed_generation, bt.metadata.generation, "{}", c.type_);
    }
    assert!(has(&status, "Reconciling", "False") && has(&status, "Stalled", "False"));
    assert_eq!(status.table.as_deref(), Some("public.outbox"));
    assert_eq!(status.applied_version, Some(8));
    let raw = h.raw("orders").await;
    let lock = &raw["status"]["lock"];
    assert_eq!(lock["lockKey"], json!("BrighterMigration_public.outbox"));
    assert_eq!(
        lock["key"],
        json!("-5469556670739463647"),
        "the key is a string"
    );
    assert_eq!(lock["keyHex"], json!("b4183b2fd9b4c221"));
    assert_eq!(
        lock["pgLocks"],
        json!({"classid": 3021486895u32, "objid": 3652502049u32, "objsubid": 1})
    );
    assert_eq!(lock["state"], json!("Released"));
    assert_eq!(raw["status"]["appliedVersion"], json!(8));
    assert!(h.table_exists("public.outbox").await);
    assert_eq!(h.history_versions("public", "outbox").await, vec![8]);
}

#[tokio::test]
async fn raising_the_target_version_migrates_the_table_up_to_it() {
    let h = Harness::start().await;
    let bt = h
        .apply_ready(boxtable("orders").outbox().table("Outbox").target(5))
        .await;
    assert_eq!(bt.status.unwrap().applied_version, Some(5));
    assert_eq!(h.history_versions("public", "outbox").await, vec![5]);

    h.patch_spec("orders", json!({"targetVersion": 8})).await;
    let bt = h
        .wait_for("orders", "version 8 at generation 2", |bt| {
            is_ready(bt) && bt.status.as_ref().unwrap().applied_version == Some(8)
        })
        .await;

    assert_eq!(bt.metadata.generation, Some(2));
    let last_run = bt.status.unwrap().last_run.unwrap();
    assert_eq!((last_run.from_version, last_run.to_version), (5, 8));
    assert_eq!(h.history_versions("public", "outbox").await, V5_TO_V8);
}

#[tokio::test]
async fn a_migration_stuck_behind_a_table_lock_shows_acquired_and_migrating_until_it_finishes() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").outbox().target(5)).await;

    // An application transaction reads the table: the upgrade's ALTER TABLE waits behind it
    // while the operator holds Brighter's lock.
    let app = h.sql().await;
    app.batch("BEGIN; LOCK TABLE public.outbox IN ACCESS SHARE MODE")
        .await;
    h.patch_spec("orders", json!({"targetVersion": 8})).await;
    let bt = h
        .wait_for("orders", "lock Acquired, reason Migrating", |bt| {
            bt.status.as_ref().is_some_and(|s| {
                s.lock
                    .as_ref()
                    .is_some_and(|l| l.state == LockState::Acquired)
                    && has(s, "Ready", "False")
                    && reason(s) == "Migrating"
            })
        })
        .await;
    let status = bt.status.unwrap();
    assert!(
        has(&status, "Reconciling", "True") && has(&status, "Stalled", "False"),
        "{status:?}"
    );
    let lock = status.lock.unwrap();
    assert!(lock.last_acquired_time.is_some(), "{lock:?}");
    assert_eq!(status.applied_version, Some(5), "nothing is committed yet");
    assert_eq!(h.history_versions("public", "outbox").await, vec![5]);

    app.batch("COMMIT").await;
    let bt = h
        .wait_for("orders", "version 8", |bt| {
            is_ready(bt) && bt.status.as_ref().unwrap().applied_version == Some(8)
        })
        .await;
    let status = bt.status.unwrap();
    assert_eq!(reason(&status), "Migrated");
    assert_eq!(status.lock.unwrap().state, LockState::Released);
    assert_eq!(h.history_versions("public", "outbox").await, V5_TO_V8);
}

#[tokio::test]
async fn a_table_brighter_left_at_version_five_is_migrated_to_eight() {
    let h = Harness::start().await;
    let client = h.sql().await;
    support::migrate::outbox_at(&client, "sales.outbox", 5, 2).await;
    for version in BoxKind::Outbox.versions().iter().filter(|v| v.number <= 5) {
        support::migrate::write_history(
            &client,
            "public",
            "sales",
            "outbox",
            version.number as i32,
            version.description,
        )
        .await;
    }

    let bt = h
        .apply_ready(boxtable("orders").outbox().schema("sales"))
        .await;

    let status = bt.status.unwrap();
    assert_eq!(status.applied_version, Some(8));
    let last_run = status.last_run.unwrap();
    assert_eq!((last_run.from_version, last_run.to_version), (5, 8));
    assert_eq!(
        h.history_versions("sales", "outbox").await,
        vec![1, 2, 3, 4, 5, 6, 7, 8]
    );
    let rows: i64 = client.value("SELECT count(*) FROM sales.outbox", &[]).await;
    assert_eq!(rows, 2, "the messages in the table survive");
}

#[tokio::test]
async fn a_missing_secret_stalls_until_the_secret_is_created() {
    // A resync far beyond the deadline: only the watch on the Secret can bring the table up.
    let h = Harness::builder()
        .without_secret()
        .resync(Duration::from_secs(600))
        .start()
        .await;

    let bt = h.apply_stalled(boxtable("orders"), "SecretNotFound").await;
    let status = bt.status.unwrap();
    assert!(has(&status, "Reconciling", "False") && has(&status, "Ready", "False"));
    assert!(
        condition(&status, "Stalled")
            .unwrap()
            .message
            .contains(SECRET),
        "the message names the secret: {status:?}"
    );
    assert!(!h.table_exists("public.outbox").await);

    h.create_secret().await;
    h.wait_ready("orders").await;
    assert!(h.table_exists("public.outbox").await);
}

#[tokio::test]
async fn a_held_lock_shows_its_holder_then_times_out_then_migrates_once_released() {
    let (h, holder) = orders_behind_an_applications_lock("3s").await;
    let waiting = h
        .wait_for_lock("orders", LockState::Waiting)
        .await
        .status
        .unwrap();
    let lock = waiting.lock.as_ref().unwrap();
    let seen = lock
        .holder
        .as_ref()
        .expect("the holder is shown while waiting");
    assert_eq!(seen.pid, holder.pid);
    assert_eq!(seen.application_name, "orders-api");
    assert_eq!(reason(&waiting), "WaitingForLock");
    assert!(has(&waiting, "Reconciling", "True") && has(&waiting, "Stalled", "False"));

    let timed_out = h
        .wait_stalled("orders", "LockTimeout")
        .await
        .status
        .unwrap();
    let message = &condition(&timed_out, "Ready").unwrap().message;
    assert!(
        message.contains(&holder.pid.to_string()) && message.contains("orders-api"),
        "the timeout names the holder: {message}"
    );
    let lock = timed_out.lock.as_ref().unwrap();
    assert_eq!(lock.state, LockState::TimedOut);
    assert_eq!(lock.holder.as_ref().map(|h| h.pid), Some(holder.pid));
    assert!(!h.table_exists("public.outbox").await);

    holder.release().await;
    let ready = h.wait_ready("orders").await.status.unwrap();
    assert_eq!(ready.applied_version, Some(8));
    assert!(ready.lock.unwrap().holder.is_none());
}

#[tokio::test]
async fn deleting_with_retain_keeps_the_table_and_removes_the_object() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders")).await;

    h.delete("orders").await;
    h.wait_gone("orders").await;

    assert!(h.table_exists("public.outbox").await);
    assert_eq!(h.history_versions("public", "outbox").await, vec![8]);
}

#[tokio::test]
async fn deleting_with_drop_removes_the_table_and_its_history_then_the_object() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").schema("sales").drop_policy())
        .await;
    assert!(h.table_exists("sales.outbox").await);

    h.delete("orders").await;
    h.wait_gone("orders").await;

    assert!(!h.table_exists("sales.outbox").await);
    assert_eq!(
        h.history_versions("sales", "outbox").await,
        Vec::<i32>::new()
    );
    // The event may be published after the finalizer went: wait for it rather than read once.
    wait_until("a Drop event is published", || async {
        h.events("orders")
            .await
            .iter()
            .any(|e| e.action.as_deref() == Some("Drop"))
    })
    .await;
}

#[tokio::test]
async fn a_suspended_boxtable_changes_nothing_and_reports_suspended() {
    let h = Harness::start().await;

    h.apply(boxtable("orders").suspended()).await;
    let bt = h.wait_for_reason("orders", "Suspended").await;

    let status = bt.status.unwrap();
    assert!(has(&status, "Ready", "False"));
    assert!(has(&status, "Stalled", "False"));
    assert!(has(&status, "Reconciling", "False"));
    assert_eq!(status.applied_version, None);
    assert!(!h.table_exists("public.outbox").await);
    assert_eq!(
        h.history_versions("public", "outbox").await,
        Vec::<i32>::new()
    );
}

#[tokio::test]
async fn a_second_boxtable_for_the_same_table_reports_the_conflict_and_does_not_migrate() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").target(5)).await;

    // Sorts before "orders" by name, so only its later creation can make it the one that yields.
    let bt = h
        .apply_stalled(boxtable("a-copy-of-orders"), "TableConflict")
        .await;

    let status = bt.status.unwrap();
    let message = &condition(&status, "Stalled").unwrap().message;
    assert!(
        message.contains("orders") && message.contains("public.outbox"),
        "{message}"
    );
    assert!(has(&status, "Reconciling", "False"));
    // The copy asked for version 8 but must not have migrated the table.
    assert_eq!(h.history_versions("public", "outbox").await, vec![5]);
    h.wait_for_passes(2).await;
    assert!(
        is_ready(&h.get("orders").await),
        "the first keeps the table"
    );
    assert_eq!(h.history_versions("public", "outbox").await, vec![5]);
}

#[tokio::test]
async fn an_invalid_connection_string_stalls_without_revealing_the_password() {
    const PASSWORD: &str = "hunter2-unique-Zq9";
    let h = Harness::builder()
        .connection_string(&format!("Host=db;Password={PASSWORD};Port=notaport"))
        .start()
        .await;

    h.apply_stalled(boxtable("orders"), "InvalidConnectionString")
        .await;
    h.wait_for_passes(1).await;

    let raw = h.raw("orders").await.to_string();
    assert!(
        !raw.contains(PASSWORD),
        "status reveals the password: {raw}"
    );
    let events = h.events("orders").await;
    assert!(!events.is_empty(), "the failure is published as an event");
    let events = serde_json::to_string(&events).unwrap();
    assert!(
        !events.contains(PASSWORD),
        "events reveal the password: {events}"
    );
    let logs = h.logs();
    assert!(
        logs.contains("InvalidConnectionString") || logs.contains("invalid connection string"),
        "the logs were captured"
    );
    assert!(!logs.contains(PASSWORD), "logs reveal the password: {logs}");
}

#[tokio::test]
async fn a_create_publishes_one_migrated_event_and_a_no_op_resync_publishes_none() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders")).await;
    h.wait_for_passes(1).await;
    let before = h.events("orders").await;

    h.wait_for_passes(2).await;

    let after = h.events("orders").await;
    let migrated: Vec<_> = after
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Migrated"))
        .collect();
    assert_eq!(migrated.len(), 1, "{after:?}");
    assert!(
        migrated[0].series.is_none(),
        "Migrated was published more than once: {:?}",
        migrated[0].series
    );
    assert_eq!(before, after, "a no-op resync publishes no event");
}

#[tokio::test]
async fn every_migration_publishes_an_event_naming_the_table_and_its_versions() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").target(3)).await;
    let migrated = |note: &'static str| {
        let h = &h;
        move || async move {
            h.events("orders").await.iter().any(|e| {
                e.reason.as_deref() == Some("Migrated")
                    && e.type_.as_deref() == Some("Normal")
                    && e.note.as_deref() == Some(note)
            })
        }
    };
    wait_until(
        "a Migrated event for the creation",
        migrated("public.outbox created at version 3"),
    )
    .await;

    // An upgrade keeps the Ready reason (Migrated), and is an event of its own.
    h.patch_spec("orders", json!({"targetVersion": 6})).await;
    h.wait_for("orders", "version 6", |bt| {
        is_ready(bt) && bt.status.as_ref().unwrap().applied_version == Some(6)
    })
    .await;
    wait_until(
        "a Migrated event for the upgrade",
        migrated("public.outbox migrated from version 3 to 6"),
    )
    .await;

    // Passes that change nothing publish nothing.
    let before = h.events("orders").await;
    h.wait_for_passes(2).await;
    let after = h.events("orders").await;
    assert_eq!(before.len(), after.len(), "{after:#?}");
    let migrations = after
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Migrated"))
        .count();
    assert_eq!(migrations, 2, "{after:#?}");
}

#[tokio::test]
async fn a_no_op_resync_does_not_rewrite_the_status() {
    let h = Harness::start().await;
    let ready = h.apply_ready(boxtable("orders")).await;

    h.wait_for_passes(3).await;

    let later = h.get("orders").await;
    assert_eq!(
        later.metadata.resource_version, ready.metadata.resource_version,
        "status was rewritten: {:?} became {:?}",
        ready.status, later.status
    );
}

/// A rollout of the operator stops whatever periodic checks the old leader has in flight. A check
/// of a Ready table stopped before it found anything leaves the status as it was: writing
/// `Cancelled` would turn Ready False on healthy BoxTables at every rollout (and make the next
/// leader's restart resync write each of them back).
#[tokio::test]
async fn shutdown_during_a_check_of_a_ready_table_leaves_its_status_alone() {
    let mut h = Harness::start().await;
    let ready = h.apply_ready(boxtable("orders")).await;
    // The next periodic check's read before the lock queues behind this transaction.
    let blocker = h.sql().await;
    blocker
        .batch("BEGIN; LOCK TABLE public.\"__BrighterMigrationHistory\" IN ACCESS EXCLUSIVE MODE")
        .await;
    wait_until("the periodic check to wait for the table lock", || async {
        h.operator_backends_waiting_for_a_lock().await > 0
    })
    .await;

    h.stop().await;

    let after = h.get("orders").await;
    assert_eq!(
        after.metadata.resource_version, ready.metadata.resource_version,
        "the status was rewritten: {:?} became {:?}",
        ready.status, after.status
    );
    assert!(has(after.status.as_ref().unwrap(), "Ready", "True"));
    blocker.batch("ROLLBACK").await;
}

/// The exception above is only for a check that found nothing: one of a Ready table that went to
/// the locked path (here its ownership record is gone) and wrote `Waiting` says `Cancelled` when
/// stopped, so the status never claims a wait nobody is doing.
#[tokio::test]
async fn shutdown_during_a_check_that_waits_for_the_lock_says_cancelled() {
    let mut h = Harness::start().await;
    h.apply_ready(boxtable("orders")).await;
    let _holder = h.hold_lock("orders-api", "public", "outbox").await;
    h.sql()
        .await
        .batch("COMMENT ON TABLE public.outbox IS NULL")
        .await;
    h.wait_for_lock("orders", LockState::Waiting).await;

    h.stop().await;

    let after = h.status("orders").await;
    assert_ne!(
        after.lock.as_ref().map(|l| l.state),
        Some(LockState::Waiting),
        "the status claims a wait after the operator stopped: {after:?}"
    );
    assert_eq!(reason(&after), "Cancelled", "{after:?}");
}

#[tokio::test]
async fn shutdown_abandons_a_lock_wait_promptly_and_leaves_no_session_behind() {
    let (mut h, _holder) = orders_behind_an_applications_lock("30s").await;
    h.wait_for_lock("orders", LockState::Waiting).await;
    assert_eq!(h.operator_sessions().await, 1);

    let took = h.stop().await;

    // Against a 30 s lock timeout: it abandoned the wait instead of sitting it out.
    assert!(
        took < Duration::from_secs(10),
        "run took {took:?} to return"
    );
    let after = h.status("orders").await;
    assert_ne!(
        after.lock.as_ref().map(|l| l.state),
        Some(LockState::Waiting),
        "the status does not claim a wait once the operator has stopped: {after:?}"
    );
    assert_eq!(reason(&after), "Cancelled");
    wait_until("the operator's session to end", || async {
        h.operator_sessions().await == 0
    })
    .await;
}

#[tokio::test]
async fn readiness_turns_true_once_the_boxtable_cache_has_synced() {
    let h = Harness::start().await;
    wait_until("/readyz to become ready", || async {
        h.readiness.is_ready()
    })
    .await;
}

const REQUESTED: &str = "brighter.dev/reconcile-requested-at";

#[tokio::test]
async fn a_stalled_boxtable_says_when_it_retries_and_retries_at_once_when_a_reconcile_is_requested()
{
    // A resync far beyond the test's deadline: only the request can bring the retry forward.
    let h = Harness::without_resync().await;
    let stalled = h
        .apply_stalled(boxtable("orders").schema("billing"), "SchemaNotFound")
        .await;
    let status = stalled.status.unwrap();
    let message = &condition(&status, "Ready").unwrap().message;
    println!("Stalled message: {message}");
    assert!(
        message.starts_with("schema billing does not exist"),
        "nothing was attempted, so nothing says a migration failed: {message}"
    );
    assert!(
        message.contains("next retry in 10m") && message.contains(REQUESTED),
        "the message says when the next retry is and what brings it forward: {message}"
    );
    let reconciling = condition(&status, "Reconciling").unwrap();
    assert!(
        reconciling.status == "False" && !reconciling.message.is_empty(),
        "{reconciling:?}"
    );

    h.sql().await.batch("CREATE SCHEMA billing").await;
    h.annotate("orders", REQUESTED, "2026-12-01T12:00:00Z")
        .await;

    // Within the harness deadline (60 s), far before the 10 min resync.
    let ready = h.wait_ready("orders").await.status.unwrap();
    assert_eq!(ready.applied_version, Some(8));
    assert!(h.table_exists("billing.outbox").await);
}

#[tokio::test]
async fn a_long_lock_wait_shows_its_tries_and_time_waited_growing() {
    let (h, holder) = orders_behind_an_applications_lock("50s").await;

    let waiting = |at_least_ms: u64| {
        move |bt: &boxtable_operator::crd::BoxTable| {
            bt.status
                .as_ref()
                .and_then(|s| s.lock.as_ref())
                .is_some_and(|l| {
                    l.state == LockState::Waiting
                        && l.waited_milliseconds.is_some_and(|w| w >= at_least_ms)
                })
        }
    };
    let first = h.wait_for("orders", "a wait of 5 s", waiting(5_000)).await;
    let lock = first.status.unwrap().lock.unwrap();
    println!(
        "after 5 s: attempts {:?}, waitedMilliseconds {:?}",
        lock.attempts, lock.waited_milliseconds
    );
    assert!(lock.attempts.unwrap() >= 8, "{lock:?}");
    assert_eq!(lock.holder.as_ref().map(|h| h.pid), Some(holder.pid));

    let later = h
        .wait_for("orders", "a wait of 10 s", waiting(10_000))
        .await;
    let later = later.status.unwrap().lock.unwrap();
    println!(
        "after 10 s: attempts {:?}, waitedMilliseconds {:?}",
        later.attempts, later.waited_milliseconds
    );
    assert!(later.attempts > lock.attempts, "{later:?}");
    let writes = h.status_writes("orders");
    assert!(
        writes <= 6,
        "the wait is refreshed at a bounded rate, not on every try: {writes} status writes"
    );

    holder.release().await;
    h.wait_ready("orders").await;
}

#[tokio::test]
async fn only_a_drop_boxtable_carries_the_finalizer_and_it_follows_the_policy() {
    let mut h = Harness::start().await;
    let finalizers =
        |bt: &boxtable_operator::crd::BoxTable| bt.metadata.finalizers.clone().unwrap_or_default();
    let ready = h.apply_ready(boxtable("orders")).await;
    assert!(finalizers(&ready).is_empty(), "{:?}", finalizers(&ready));

    h.patch_spec("orders", json!({"deletionPolicy": "Drop"}))
        .await;
    h.wait_for("orders", "the finalizer on a Drop BoxTable", |bt| {
        finalizers(bt).iter().any(|f| f == "brighter.dev/cleanup") && is_ready(bt)
    })
    .await;

    h.patch_spec("orders", json!({"deletionPolicy": "Retain"}))
        .await;
    h.wait_for("orders", "no finalizer once Retain again", |bt| {
        finalizers(bt).is_empty() && is_ready(bt)
    })
    .await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(h.client.clone(), &h.namespace);
    let secret = secrets.get(SECRET).await.unwrap();
    assert!(
        secret.metadata.finalizers.unwrap_or_default().is_empty(),
        "the Secret is let go before the object can go without the operator"
    );

    // With the operator gone, a Retain BoxTable is deleted at once.
    h.stop().await;
    h.delete("orders").await;
    h.wait_gone("orders").await;
    assert!(h.table_exists("public.outbox").await);
}

#[tokio::test]
async fn a_table_whose_replay_index_name_another_table_holds_stalls_naming_both_and_creates_nothing()
 {
    let h = Harness::start().await;
    // 61-byte names: Brighter's idx_<table>_causationid is cut by PostgreSQL to the same 63 bytes.
    let stem = "order_events_of_the_shop_for_every_tenant_and_every_regions";
    let (first, second) = (format!("{stem}_a"), format!("{stem}_b"));
    h.apply_ready(boxtable("first").table(&first)).await;

    let bt = h
        .apply_stalled(boxtable("second").table(&second), "IndexNameConflict")
        .await;

    let message = &condition(bt.status.as_ref().unwrap(), "Ready")
        .unwrap()
        .message;
    assert!(
        message.contains(&format!("replay index of public.{second}"))
            && message.contains(&format!("of table public.{first}")),
        "the message names both tables: {message}"
    );
    assert!(!h.table_exists(&format!("public.{second}")).await);
    assert!(h.history_versions("public", &second).await.is_empty());
    wait_until("a Warning event naming the conflict", || async {
        h.events("second").await.iter().any(|e| {
            e.reason.as_deref() == Some("IndexNameConflict")
                && e.type_.as_deref() == Some("Warning")
        })
    })
    .await;
    assert!(is_ready(&h.get("first").await));
}
