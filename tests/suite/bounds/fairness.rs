//! Fairness between namespaces on the real control plane: one operator watching namespaces
//! `quiet` and `noisy` (one pool of 4 workers for both). Twenty BoxTables in `quiet` alone set the
//! baseline; then eight BoxTables in `noisy` point at a black hole on loopback (a listener that
//! accepts and never answers, so each of their passes waits up to its budget) and hold every
//! worker, and twenty fresh BoxTables in `quiet` must still be Ready within 1.5 x the baseline
//! + 2 s: the noisy passes give workers back down to their share while `quiet` has work waiting.

use std::time::{Duration, Instant};

use boxtable_operator::crd::BoxTable;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::black_hole::BlackHole;
use crate::support::controller::*;

const QUIET: usize = 20;
const NOISY: usize = 8;
/// The harness's `--concurrency`.
const WORKERS: usize = 4;

/// Creates `QUIET` BoxTables named `<round>-<i>` (tables `<round>_<i>`) in the quiet namespace
/// and returns how long it took until all were Ready.
async fn quiet_round(h: &Harness, round: &str) -> Duration {
    let started = Instant::now();
    for i in 0..QUIET {
        h.apply(boxtable(&format!("{round}-{i}")).table(&format!("{round}_{i}")))
            .await;
    }
    let prefix = format!("{round}-");
    wait_until(
        &format!("the {QUIET} {round} BoxTables to be Ready"),
        || async {
            let ready = h
                .boxtables()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|bt| {
                    bt.metadata
                        .name
                        .as_deref()
                        .unwrap_or("")
                        .starts_with(&prefix)
                })
                .filter(|bt| is_ready(bt))
                .count();
            ready == QUIET
        },
    )
    .await;
    started.elapsed()
}

/// Eight BoxTables in `namespace` whose Secret points at `hole`.
async fn noisy_neighbours(h: &Harness, namespace: &str, hole: &BlackHole) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": namespace},
        "stringData": {"connectionString": hole.url("noisy-neighbour-pw")},
    }))
    .unwrap();
    Api::<Secret>::namespaced(h.client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let api = Api::<BoxTable>::namespaced(h.client.clone(), namespace);
    for i in 0..NOISY {
        let mut bt = boxtable(&format!("stuck-{i}"))
            .table(&format!("stuck_{i}"))
            .build();
        bt.metadata.namespace = Some(namespace.to_owned());
        api.create(&PostParams::default(), &bt).await.unwrap();
    }
}

#[tokio::test]
async fn a_noisy_namespace_cannot_hold_every_worker_from_a_quiet_one() {
    // A long resync: only the BoxTables created here start passes.
    let h = Harness::builder()
        .namespaces(&["quiet", "noisy"])
        .resync(Duration::from_secs(600))
        .start()
        .await;
    let baseline = quiet_round(&h, "alone").await;

    let hole = BlackHole::start().await;
    noisy_neighbours(&h, &h.others[0], &hole).await;
    // Nothing else waits, so the noisy namespace may take every worker; it does.
    wait_until("the noisy BoxTables to hold every worker", || async {
        hole.accepted() >= WORKERS
    })
    .await;
    let beside_noisy = quiet_round(&h, "beside").await;

    let bound = baseline.mul_f64(1.5) + Duration::from_secs(2);
    println!(
        "{QUIET} quiet BoxTables Ready: alone {baseline:?}; beside {NOISY} stuck noisy ones \
         {beside_noisy:?} (bound {bound:?}); black-hole connections {}",
        hole.accepted()
    );
    assert!(
        beside_noisy <= bound,
        "the quiet namespace took {beside_noisy:?} beside the noisy one, more than {bound:?} \
         (1.5 x {baseline:?} + 2s)"
    );
}
