//! A pass's waits are bounded, on the real control plane: connecting, the reads before the lock
//! and the lock wait together get `lock.timeout` plus 15 s, after which the pass ends with reason
//! `DeadlineExceeded` (a Warning event, retried with backoff), the statement in flight is
//! cancelled on the server, and nothing in the status, the event or the logs shows the password.

use std::time::{Duration, Instant};

use boxtable_operator::crd::{BoxTable, RECONCILE_REQUESTED_ANNOTATION};

use crate::support::Sql;
use crate::support::black_hole::BlackHole;
use crate::support::controller::*;

/// How much later than its budget a pass may be reported on a busy machine.
const SLACK: Duration = Duration::from_secs(10);

fn deadline_exceeded(bt: &BoxTable) -> bool {
    bt.status
        .as_ref()
        .is_some_and(|s| reason(s) == "DeadlineExceeded")
}

/// Checks the Ready message and the Warning event of a `DeadlineExceeded` BoxTable.
async fn assert_reported(h: &Harness, bt: &BoxTable, must_say: &[&str], password: &str) {
    let status = bt.status.clone().unwrap();
    assert!(
        has(&status, "Reconciling", "True") && has(&status, "Stalled", "False"),
        "a pass past its budget is retried, not given up: {status:?}"
    );
    let message = condition(&status, "Ready").unwrap().message.clone();
    println!("Ready message: {message}");
    for part in must_say {
        assert!(message.contains(part), "{part:?} missing from {message:?}");
    }
    assert!(!message.contains(password), "{message}");
    let name = bt.metadata.name.clone().unwrap();
    wait_until("a DeadlineExceeded Warning event", || async {
        h.events(&name).await.iter().any(|e| {
            e.reason.as_deref() == Some("DeadlineExceeded") && e.type_.as_deref() == Some("Warning")
        })
    })
    .await;
    for event in h.events(&name).await {
        let note = event.note.unwrap_or_default();
        assert!(!note.contains(password), "{note}");
    }
    assert!(!h.logs().contains(password), "the password is in the logs");
}

#[tokio::test]
async fn a_database_that_never_answers_ends_the_pass_deadline_exceeded_within_its_budget() {
    let password = "never-shown-deadline-pw";
    let hole = BlackHole::start().await;
    // connect_timeout=60: without the pass's budget, connecting alone would take 60 s.
    let h = Harness::builder()
        .connection_string(&hole.url(password))
        .start()
        .await;
    let started = Instant::now();
    h.apply(boxtable("orders").lock_timeout("2s")).await;
    let bt = h
        .wait_for("orders", "DeadlineExceeded", deadline_exceeded)
        .await;
    let took = started.elapsed();
    println!("black hole: DeadlineExceeded {took:?} after the BoxTable was created (budget 17s)");
    assert!(
        hole.accepted() >= 1,
        "the pass never reached the black hole"
    );
    let budget = Duration::from_secs(17);
    assert!(took >= budget, "cut before its budget: {took:?}");
    assert!(took < budget + SLACK, "reported {took:?} after creation");
    let at = format!("127.0.0.1:{}", hole.port);
    let must_say = [
        "while connecting to PostgreSQL at",
        at.as_str(),
        "budget of 17s (spec.lock.timeout 2s + 15s for connecting and reading)",
        "retried with backoff",
        "raise spec.lock.timeout",
    ];
    assert_reported(&h, &bt, &must_say, password).await;
}

#[tokio::test]
async fn a_read_stuck_behind_a_table_lock_is_cancelled_on_the_server_at_the_deadline() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders").lock_timeout("1s")).await;
    // A long transaction holds the history table: the pass's read before the lock queues behind it.
    let blocker = h.sql().await;
    blocker
        .batch("BEGIN; LOCK TABLE public.\"__BrighterMigrationHistory\" IN ACCESS EXCLUSIVE MODE")
        .await;
    let started = Instant::now();
    h.annotate("orders", RECONCILE_REQUESTED_ANNOTATION, "stuck-read")
        .await;
    wait_until("the operator's read to wait for the table lock", || async {
        h.operator_backends_waiting_for_a_lock().await > 0
    })
    .await;
    let bt = h
        .wait_for("orders", "DeadlineExceeded", deadline_exceeded)
        .await;
    let took = started.elapsed();
    println!(
        "locked history table: DeadlineExceeded {took:?} after the pass was requested (budget 16s)"
    );
    let budget = Duration::from_secs(16);
    assert!(took >= budget, "cut before its budget: {took:?}");
    assert!(took < budget + SLACK, "reported {took:?} after the request");
    // Cancelled on the server, not just abandoned: no backend of the operator still queues for
    // the lock (one that did would block every later reader of the table behind it).
    let cancelled = Instant::now();
    while h.operator_backends_waiting_for_a_lock().await > 0 {
        assert!(
            cancelled.elapsed() < Duration::from_secs(5),
            "the operator's read still waits for the table lock on the server"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let must_say = [
        "before it held advisory lock",
        "budget of 16s (spec.lock.timeout 1s + 15s for connecting and reading)",
        "no long transaction holds locks on the table or its history table",
    ];
    assert_reported(&h, &bt, &must_say, "never-in-this-test").await;
    // Once the transaction ends, the retry (with backoff) makes it Ready again.
    blocker.batch("ROLLBACK").await;
    h.wait_ready("orders").await;
}
