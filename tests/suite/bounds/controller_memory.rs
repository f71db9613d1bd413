//! What the controller keeps per BoxTable and per Secret (`boxtable_cache_entries`), on the real
//! kube-apiserver: every entry goes when its object goes, whatever the object was doing: a
//! Retain BoxTable deleted (no finalizer, so no pass sees its deletion), a Drop BoxTable whose
//! drop finished, one deleted while its passes failed, and a Secret deleted while a BoxTable
//! still names it.

use std::time::Duration;

use boxtable_operator::telemetry::CacheEntries;

use crate::support::controller::*;

/// Well under the periodic sweep (a minute): the entries go on the events, not on the sweep.
const FORGOTTEN_WITHIN: Duration = Duration::from_secs(20);

/// Waits until the entries are `expected`, failing after `within` with the last ones seen.
async fn wait_entries(
    h: &Harness,
    what: &str,
    within: Duration,
    expected: impl Fn(CacheEntries) -> bool,
) -> CacheEntries {
    wait_for_value(
        what,
        within,
        || async { h.cache_entries() },
        |entries| expected(*entries),
    )
    .await
}

#[tokio::test]
async fn every_cache_entry_goes_when_its_boxtable_or_secret_is_deleted_retain_or_drop() {
    let h = Harness::without_resync().await;
    h.create_secret_named("drop-db").await;
    h.create_secret_named("gone-db").await;
    h.create_secret_data(
        "unreachable-db",
        &[(
            "connectionString",
            b"postgres://app:pw@127.0.0.1:1/shop?connect_timeout=1",
        )],
    )
    .await;
    // A large reconcile request: the schedule keeps its value per object.
    h.apply(boxtable("kept").table("kept_outbox")).await;
    h.annotate(
        "kept",
        "brighter.dev/reconcile-requested-at",
        &"r".repeat(100 * 1024),
    )
    .await;
    h.apply(
        boxtable("dropped")
            .table("dropped_outbox")
            .secret("drop-db")
            .drop_policy(),
    )
    .await;
    h.apply(
        boxtable("failing")
            .table("failing_outbox")
            .secret("unreachable-db"),
    )
    .await;
    h.apply(
        boxtable("orphaned")
            .table("orphaned_outbox")
            .secret("gone-db"),
    )
    .await;
    h.wait_ready("kept").await;
    h.wait_ready("dropped").await;
    h.wait_ready("orphaned").await;
    let held = wait_entries(
        &h,
        "entries for the four BoxTables, their four Secrets, the failures and the finalizer",
        DEADLINE,
        |e| e.secret_reads == 4 && e.schedule >= 4 && e.backoff == 1 && e.secret_finalizers == 1,
    )
    .await;

    // A Secret deleted while its BoxTable stays: what was read from it goes.
    h.delete_secret("gone-db").await;
    wait_entries(
        &h,
        "the deleted Secret's entry to go",
        FORGOTTEN_WITHIN,
        |e| e.secret_reads == 3,
    )
    .await;

    for name in ["kept", "dropped", "failing", "orphaned"] {
        h.delete(name).await;
    }
    for name in ["kept", "dropped", "failing", "orphaned"] {
        h.wait_gone(name).await;
    }
    assert!(
        !h.table_exists("public.dropped_outbox").await,
        "the drop ran"
    );
    assert!(
        h.table_exists("public.kept_outbox").await,
        "Retain kept its table"
    );
    let after_boxtables = wait_entries(
        &h,
        "every BoxTable's entries to go",
        FORGOTTEN_WITHIN,
        |e| e.schedule == 0 && e.backoff == 0 && e.secret_reads == 0,
    )
    .await;

    for name in [SECRET, "drop-db", "unreachable-db"] {
        h.delete_secret(name).await;
    }
    let after = wait_entries(&h, "no entry at all", FORGOTTEN_WITHIN, |e| {
        e == CacheEntries::default()
    })
    .await;
    let scraped = h.metrics.encode().unwrap();
    for cache in ["secret_reads", "secret_finalizers", "schedule", "backoff"] {
        let series = format!("boxtable_cache_entries{{cache=\"{cache}\"}} 0");
        assert!(scraped.contains(&series), "{series} in:\n{scraped}");
    }
    println!(
        "cache entries: with 4 BoxTables {held:?}; after deleting them {after_boxtables:?}; \
         after deleting their Secrets {after:?}"
    );
}
