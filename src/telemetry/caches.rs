//! `boxtable_cache_entries`: how many entries the controller's per-object and per-Secret state
//! holds, counted at each scrape. Each entry goes when its object goes, so with no BoxTables left
//! every series reads 0; one that keeps growing is a leak.

use std::sync::{Arc, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// How many entries each kind of state holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheEntries {
    /// Secrets with a connection read from them (label `secret_reads`).
    pub secret_reads: usize,
    /// Secrets known to carry a `drop.brighter.dev/<uid>` finalizer (`secret_finalizers`).
    pub secret_finalizers: usize,
    /// BoxTables with a due time, a pending Secret change, a released finalizer, or a status
    /// write the watch cache has not seen yet (`schedule`).
    pub schedule: usize,
    /// BoxTables with failures counted for their retry backoff (`backoff`).
    pub backoff: usize,
}

impl CacheEntries {
    /// Each count with its `cache` label value.
    pub fn labelled(&self) -> [(&'static str, usize); 4] {
        [
            ("secret_reads", self.secret_reads),
            ("secret_finalizers", self.secret_finalizers),
            ("schedule", self.schedule),
            ("backoff", self.backoff),
        ]
    }

    /// All the entries together.
    pub fn total(&self) -> usize {
        self.labelled().iter().map(|(_, n)| n).sum()
    }
}

impl std::ops::Add for CacheEntries {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            secret_reads: self.secret_reads + other.secret_reads,
            secret_finalizers: self.secret_finalizers + other.secret_finalizers,
            schedule: self.schedule + other.schedule,
            backoff: self.backoff + other.backoff,
        }
    }
}

/// Something that holds counted state (the controller's state of one watch scope).
pub trait CacheSource: Send + Sync {
    /// The entries it holds now.
    fn entries(&self) -> CacheEntries;
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CacheLabels {
    cache: &'static str,
}

/// The gauge and the sources it counts.
#[derive(Default)]
pub(super) struct CacheGauges {
    sources: RwLock<Vec<Arc<dyn CacheSource>>>,
    entries: Family<CacheLabels, Gauge>,
}

impl std::fmt::Debug for CacheGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheGauges").finish_non_exhaustive()
    }
}

impl CacheGauges {
    /// Registers `boxtable_cache_entries` in `registry`, every series at 0.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let gauges = Self::default();
        gauges.set(CacheEntries::default());
        registry.register(
            "cache_entries",
            "Entries the controller keeps per BoxTable or per Secret, by cache (secret_reads, secret_finalizers, schedule, backoff); each goes when its object goes",
            gauges.entries.clone(),
        );
        gauges
    }

    /// Counts `source` too from now on.
    pub(super) fn add_source(&self, source: Arc<dyn CacheSource>) {
        if let Ok(mut sources) = self.sources.write() {
            sources.push(source);
        }
    }

    /// The entries of every source together.
    pub(super) fn total(&self) -> CacheEntries {
        self.sources.read().map_or_else(
            |_| CacheEntries::default(),
            |sources| {
                sources
                    .iter()
                    .fold(CacheEntries::default(), |sum, s| sum + s.entries())
            },
        )
    }

    /// Recounts from the sources.
    pub(super) fn refresh(&self) {
        self.set(self.total());
    }

    fn set(&self, entries: CacheEntries) {
        for (cache, n) in entries.labelled() {
            self.entries
                .get_or_create(&CacheLabels { cache })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}
