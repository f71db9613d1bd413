//! The resync after a restart, on the real kube-apiserver: the BoxTables that are already current
//! (Ready at their target) get their pass at the point of the resync interval their uid fixes,
//! spread over the interval instead of all at once, while work that is due (a BoxTable created
//! at that moment, one whose spec changed while no operator ran) runs at once.

use std::time::{Duration, Instant};

use boxtable_operator::controller::schedule::spread;
use kube::ResourceExt;
use serde_json::json;

use crate::support::controller::*;

/// The BoxTables that are current when the operator restarts.
const FLEET: usize = 12;
/// The resync interval of both operators (long enough that the spread is plain to see).
const RESYNC: Duration = Duration::from_secs(40);
/// How late a timer-driven pass may come on a busy machine.
const LATE: Duration = Duration::from_secs(10);
/// How soon work that is due must be done after the restart (well under the interval).
const DUE_AT_ONCE: Duration = Duration::from_secs(10);
/// Passes beyond one per BoxTable that a restart may bring: the new BoxTable and the changed one
/// (due at once), and one more for each of those two when the first sight of their Secret comes
/// after their pass (the operator then takes it for a change).
const EXTRA: u64 = 4;

fn name(i: usize) -> String {
    format!("fleet-{i:02}")
}

#[tokio::test]
async fn after_a_restart_current_boxtables_are_passed_over_the_interval_and_new_work_at_once() {
    let mut h = Harness::builder().resync(RESYNC).start().await;
    for i in 0..FLEET {
        h.apply(boxtable(&name(i)).table(&format!("fleet_{i:02}")))
            .await;
    }
    let mut uids = Vec::new();
    for i in 0..FLEET {
        uids.push(h.wait_ready(&name(i)).await.uid().unwrap());
    }
    h.stop().await;
    // While no operator runs, one spec changes: that object is due, not current.
    let changed = h.patch_spec(&name(0), json!({"targetVersion": 7})).await;
    let changed_generation = changed.metadata.generation;
    let current: Vec<Duration> = uids[1..].iter().map(|uid| spread(uid, RESYNC)).collect();

    let before = h.reconciles();
    h.restart();
    let restarted = Instant::now();
    h.apply_ready(boxtable("newcomer").table("newcomer")).await;
    h.wait_for(&name(0), "the changed spec Ready", |bt| {
        bt.status.as_ref().and_then(|s| s.observed_generation) == changed_generation && is_ready(bt)
    })
    .await;
    let due_done = restarted.elapsed();
    assert!(
        due_done < DUE_AT_ONCE,
        "the new BoxTable and the changed one took {due_done:?} after the restart"
    );

    // Until every current one has had its pass: never more passes than the due work and the
    // current ones whose point of the interval has come.
    let all = 2 + current.len() as u64;
    let deadline = restarted + RESYNC + LATE;
    loop {
        let elapsed = restarted.elapsed();
        let passes = h.reconciles() - before;
        let come = current.iter().filter(|s| **s <= elapsed).count() as u64;
        assert!(
            passes <= EXTRA + come,
            "{passes} passes {elapsed:?} after the restart, when the points of only {come} of \
             the {} current BoxTables had come: their passes were not spread over the interval",
            current.len()
        );
        if passes >= all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {passes} of {all} passes {elapsed:?} after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
