//! A pass that starts before the watch cache has seen the status this process last wrote (the
//! write's watch event still on its way, or the watch reconnecting) compares with what it wrote,
//! not with the older copy in the cache: a status and its Event are written once.

use std::time::Duration;

use boxtable_operator::crd::BoxTable;

use crate::support::Sql;
use crate::support::controller::*;
use crate::support::fault_proxy::Rule;

/// How long the operator's next BoxTable watch is held back: longer than the passes below take.
const HOLD: Duration = Duration::from_secs(60);
/// Resync passes that run from the stale cache after the one that found the drift.
const STALE_PASSES: u64 = 3;

fn drifted(bt: &BoxTable) -> bool {
    bt.status
        .as_ref()
        .and_then(|s| condition(s, "Drifted"))
        .is_some_and(|c| c.status == "True")
}

#[tokio::test]
async fn passes_from_a_cache_behind_the_last_status_write_do_not_write_it_again() {
    let h = Harness::builder().faults().start().await;
    h.apply_ready(boxtable("orders").outbox()).await;

    // Freeze the operator's copy of the BoxTable: its watch ends, and the next one is held back.
    let held = h
        .api
        .add(Rule::stall(HOLD).watch(true).path_contains("/boxtables"));
    h.api.drop_watches();
    wait_until("the BoxTable watch held back", || async {
        held.hits() >= 1
    })
    .await;
    let status_writes = h.api.add(
        Rule::count()
            .method("PATCH")
            .path_contains("/boxtables/orders/status"),
    );

    // Drift for the resync to find: it writes Drifted=True, which the cache does not see.
    h.sql()
        .await
        .batch("DROP INDEX public.idx_outbox_causationid")
        .await;
    h.wait_for("orders", "Drifted=True", drifted).await;
    h.wait_for_passes(STALE_PASSES).await;

    assert_eq!(
        held.hits(),
        1,
        "the cache stayed behind for the whole test (one watch held, none started since)"
    );
    assert_eq!(
        status_writes.hits(),
        1,
        "one status write for the drift, none from the {STALE_PASSES} passes that found the \
         same drift while the cache still held the status from before it"
    );
    let warnings = h
        .events("orders")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Drifted"))
        .count();
    assert_eq!(warnings, 1, "the drift is announced once");
}
