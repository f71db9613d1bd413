//! The real `boxtable-operator run`'s memory over many BoxTables that come and go, on the real
//! control plane: each cycle creates a 1 MiB Secret and a BoxTable with a large annotation that
//! reads it, waits for Ready, and deletes both. After a warm-up (the baseline) and the cycles,
//! the operator keeps no entry for any of them (`boxtable_cache_entries` all 0) and its resident
//! memory is within 10% of the baseline.
//!
//! The suite runs a short version; `BOXTABLE_MEMORY_WARM_UP` and `BOXTABLE_MEMORY_CYCLES` set the
//! counts (the README reports a run of 50 and 1,000).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use boxtable_operator::crd::{BoxKind, BoxTable, BoxTableSpec, RECONCILE_REQUESTED_ANNOTATION};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};

use crate::support::e2e::{Cluster, scrape};

/// Cycles before the baseline, unless `BOXTABLE_MEMORY_WARM_UP` says otherwise.
const WARM_UP: usize = 20;
/// Cycles measured, unless `BOXTABLE_MEMORY_CYCLES` says otherwise.
const CYCLES: usize = 40;
/// The API server's limit on a Secret's data, less room for the connection string.
const PADDING: usize = 1024 * 1024 - 4096;
/// The annotation's size (the API server allows 256 KiB of annotations in all).
const ANNOTATION: usize = 200 * 1024;

fn count(var: &str, default: usize) -> usize {
    std::env::var(var).ok().map_or(default, |v| {
        v.parse().unwrap_or_else(|_| panic!("{var}={v}"))
    })
}

/// The `boxtable_cache_entries` series of a scrape, by cache.
fn cache_entries(metrics: &str) -> BTreeMap<String, u64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("boxtable_cache_entries{cache=\""))
        .filter_map(|rest| {
            let (cache, value) = rest.split_once("\"} ")?;
            Some((cache.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

struct Cycles<'a> {
    cluster: &'a Cluster,
    boxtables: Api<BoxTable>,
    secrets: Api<Secret>,
    padding: Vec<u8>,
    done: usize,
}

impl Cycles<'_> {
    /// One cycle: a 1 MiB Secret and a BoxTable with a large annotation reading it, Ready, then
    /// both deleted.
    async fn run(&mut self) {
        let i = self.done;
        self.done += 1;
        let secret_name = format!("db-{i}");
        let mut secret = Secret::default();
        secret.metadata.name = Some(secret_name.clone());
        secret.data = Some(BTreeMap::from([
            (
                "connectionString".to_owned(),
                ByteString(self.cluster.db.url.clone().into_bytes()),
            ),
            ("padding".to_owned(), ByteString(self.padding.clone())),
        ]));
        self.secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let mut spec = BoxTableSpec::new(BoxKind::Outbox, &secret_name);
        spec.table = Some("cycled_outbox".to_owned());
        let mut bt = BoxTable::new("cycled", spec);
        bt.metadata.annotations = Some(BTreeMap::from([(
            RECONCILE_REQUESTED_ANNOTATION.to_owned(),
            format!("{i}-{}", "r".repeat(ANNOTATION)),
        )]));
        self.boxtables
            .create(&PostParams::default(), &bt)
            .await
            .unwrap();
        self.cluster
            .eventually(
                &format!("cycle {i}: the BoxTable to be Ready"),
                Duration::from_secs(120),
                || async {
                    let bt = self.boxtables.get("cycled").await.ok()?;
                    let status = bt.status?;
                    status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                        .then_some(())
                },
            )
            .await;
        self.boxtables
            .delete("cycled", &DeleteParams::default())
            .await
            .unwrap();
        self.secrets
            .delete(&secret_name, &DeleteParams::default())
            .await
            .unwrap();
        self.cluster
            .eventually(
                &format!("cycle {i}: the BoxTable to be gone"),
                Duration::from_secs(60),
                || async {
                    self.boxtables
                        .get_opt("cycled")
                        .await
                        .unwrap()
                        .is_none()
                        .then_some(())
                },
            )
            .await;
    }
}

/// Waits (up to 30 s) until the operator keeps no entry for any BoxTable or Secret; returns the
/// entries last scraped, zero or not.
async fn settled(addr: std::net::SocketAddr) -> BTreeMap<String, u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let entries = cache_entries(&scrape(addr).await);
        if (entries.len() == 4 && entries.values().all(|n| *n == 0)) || Instant::now() > deadline {
            return entries;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_delete_cycles_of_1_mib_secrets_and_large_annotations_leave_rss_within_10_percent() {
    let warm_up = count("BOXTABLE_MEMORY_WARM_UP", WARM_UP);
    let cycles = count("BOXTABLE_MEMORY_CYCLES", CYCLES);
    let cluster = Cluster::start().await;
    let plane = cluster.plane.unwrap();
    let ns = plane.create_namespace("memory");
    let client = plane.admin_client().await;
    let operator = cluster.operator(&ns, "e2e-memory");
    let addr = operator.metrics_address(&cluster).await;
    let mut run = Cycles {
        cluster: &cluster,
        boxtables: Api::namespaced(client.clone(), &ns),
        secrets: Api::namespaced(client, &ns),
        // Bytes that do not repeat, as a certificate bundle's would not.
        padding: (0..PADDING)
            .map(|i| u8::try_from((i * 7919 + i / 251) % 251).unwrap())
            .collect(),
        done: 0,
    };

    let started = Instant::now();
    for _ in 0..warm_up {
        run.run().await;
    }
    let warm_entries = settled(addr).await;
    let baseline = operator.rss_kib();
    let warmed = started.elapsed();
    let mut peak = baseline;
    for _ in 0..cycles {
        run.run().await;
        peak = peak.max(operator.rss_kib());
    }
    let entries = settled(addr).await;
    let after = operator.rss_kib();
    let growth = (after as f64 - baseline as f64) / baseline as f64 * 100.0;
    println!(
        "memory: {warm_up} warm-up cycles in {warmed:.0?}, then {cycles} cycles in {:.0?} \
         (1 MiB Secret, {} KiB annotation each); operator RSS {baseline} KiB after the warm-up, \
         {peak} KiB at most during the cycles, {after} KiB after them ({growth:+.1}%); \
         cache entries after the warm-up: {warm_entries:?}, after the cycles: {entries:?}",
        started.elapsed() - warmed,
        ANNOTATION / 1024
    );
    assert!(
        after * 10 <= baseline * 11,
        "RSS grew from {baseline} KiB to {after} KiB ({growth:+.1}%) over {cycles} cycles"
    );
    assert!(
        entries.len() == 4 && entries.values().all(|n| *n == 0),
        "the operator still keeps entries for deleted objects: {entries:?}"
    );
    plane
        .kubectl_admin(&["delete", "namespace", &ns, "--wait=false"], None)
        .unwrap();
}
