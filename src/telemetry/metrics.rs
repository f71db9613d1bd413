//! The operator's Prometheus metrics. Every label comes from a closed set (enums and
//! [`Reason::as_str`]), never from object names, so cardinality stays bounded.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use super::caches::{CacheEntries, CacheGauges, CacheSource};
use super::objects::{ObjectGauges, ObjectSource};
use crate::db::pool::{Closed, Opened, PoolEvents};
use crate::lock::Blocked;
use crate::migrate::BoxKind;
use crate::reason::Reason;

/// This build's version (from Cargo) and revision (from git at build time, see `build.rs`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git revision this binary was built from, `unknown` when built outside a git checkout
/// without `BOXTABLE_REVISION` set.
pub const REVISION: &str = env!("BOXTABLE_REVISION");

/// How a reconcile pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// Ready: nothing left to do until the next resync.
    Success,
    /// Failed and will be retried with backoff.
    Retry,
    /// Failed and given up on until something changes.
    Stalled,
}

/// How one advisory-lock wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockOutcome {
    /// The lock was taken.
    Acquired,
    /// The wait reached its timeout.
    TimedOut,
    /// The session no longer held the lock at release.
    Lost,
    /// Shutdown abandoned the wait.
    Cancelled,
}

/// How one drop attempt (`deletionPolicy: Drop`) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropResult {
    /// The table and its history rows were dropped.
    Dropped,
    /// There was no table any more; its history rows were removed.
    AlreadyGone,
    /// The table is not this BoxTable's; it was left alone.
    Kept,
    /// The drop waits for the user (consent, or `suspend`).
    Blocked,
    /// The drop failed (Secret, database, lock); retried with backoff.
    Failed,
}

impl DropResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropResult::Dropped => "dropped",
            DropResult::AlreadyGone => "already_gone",
            DropResult::Kept => "kept",
            DropResult::Blocked => "blocked",
            DropResult::Failed => "failed",
        }
    }
}

impl ReconcileResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Retry => "retry",
            ReconcileResult::Stalled => "stalled",
        }
    }
}

impl LockOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LockOutcome::Acquired => "acquired",
            LockOutcome::TimedOut => "timed_out",
            LockOutcome::Lost => "lost",
            LockOutcome::Cancelled => "cancelled",
        }
    }
}

/// The `box` label value of a kind.
fn box_label(kind: BoxKind) -> &'static str {
    match kind {
        BoxKind::Outbox => "outbox",
        BoxKind::Inbox => "inbox",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BoxLabels {
    r#box: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    revision: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// A family's name and help text, as `/metrics` shows them.
type Described = (&'static str, &'static str);

const RECONCILES: Described = ("reconciles", "Reconcile passes by result");
const RECONCILE_DURATION: Described = (
    "reconcile_duration_seconds",
    "Duration of one reconcile pass",
);
const LOCK_WAIT: Described = (
    "lock_wait_seconds",
    "Time spent waiting for the Brighter migration advisory lock",
);
const LOCK_OUTCOMES: Described = ("lock_outcomes", "Advisory lock waits by outcome");
const LOCK_LOST_AFTER_COMMIT: Described = (
    "lock_lost_after_commit",
    "Migrations that committed although the advisory lock was already gone at unlock",
);
const MIGRATIONS_APPLIED: Described = (
    "migrations_applied",
    "Schema migration steps applied, by box kind",
);
const FAILURES: Described = ("failures", "Failed passes by reason");
const DROPS: Described = (
    "drops",
    "Drop attempts of deletionPolicy Drop BoxTables, by result",
);
const IN_FLIGHT: Described = ("reconciles_in_flight", "Reconcile passes running now");
const BUILD_INFO: Described = (
    "build_info",
    "Always 1; the labels name the running version and git revision",
);
const LEADER: Described = (
    "leader",
    "1 while this replica reconciles (holds the leader-election Lease, or runs without leader election), else 0",
);
const LOCK_HELD: Described = (
    "lock_held",
    "Brighter advisory locks this process holds now",
);
const LOCK_BLOCKED_SESSIONS: Described = (
    "lock_blocked_sessions",
    "Other sessions found waiting in pg_advisory_lock on a lock this process held, just before it released it",
);
const LOCK_BLOCKED_WAIT: Described = (
    "lock_blocked_wait_seconds",
    "At each release that found sessions blocked on the lock: how long the longest of them had waited",
);
const SESSIONS_OPENED: Described = (
    "db_sessions_opened",
    "PostgreSQL sessions opened, by reason (none_idle: no idle session for the database; replaced_broken: the idle one failed its check)",
);
const SESSIONS_CLOSED: Described = (
    "db_sessions_closed",
    "PostgreSQL sessions closed, by reason (not_clean, broken, idle_timeout, idle_cap, superseded, shutdown)",
);
const SESSIONS_OPEN: Described = (
    "db_sessions_open",
    "PostgreSQL sessions open now, lent to a pass or idle",
);
const SESSIONS_IDLE: Described = (
    "db_sessions_idle",
    "PostgreSQL sessions open now and idle, kept for the next pass",
);

const RECONCILE_BUCKETS: [f64; 11] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
const LOCK_WAIT_BUCKETS: [f64; 12] = [
    0.0, 0.1, 0.3, 0.7, 1.5, 3.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
const LOCK_BLOCKED_BUCKETS: [f64; 10] = [0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// Registers `metric` in `registry` as `described` says, and hands it back.
fn registered<M: Metric + Clone>(registry: &mut Registry, described: Described, metric: M) -> M {
    let (name, help) = described;
    registry.register(name, help, metric.clone());
    metric
}

/// A counter family with a series at zero for each of `labels`, so every series shows from the
/// first scrape.
fn zeroed<L>(labels: impl IntoIterator<Item = L>) -> Family<L, Counter>
where
    L: Clone + std::hash::Hash + Eq,
{
    let family = Family::<L, Counter>::default();
    for label in labels {
        family.get_or_create(&label).inc_by(0);
    }
    family
}

const RECONCILE_RESULTS: [ReconcileResult; 3] = [
    ReconcileResult::Success,
    ReconcileResult::Retry,
    ReconcileResult::Stalled,
];
const LOCK_OUTCOMES_ALL: [LockOutcome; 4] = [
    LockOutcome::Acquired,
    LockOutcome::TimedOut,
    LockOutcome::Lost,
    LockOutcome::Cancelled,
];
const BOXES: [BoxKind; 2] = [BoxKind::Outbox, BoxKind::Inbox];
const DROP_RESULTS: [DropResult; 5] = [
    DropResult::Dropped,
    DropResult::AlreadyGone,
    DropResult::Kept,
    DropResult::Blocked,
    DropResult::Failed,
];

/// The `result` labels of `names`.
fn results(names: impl IntoIterator<Item = &'static str>) -> impl Iterator<Item = ResultLabels> {
    names.into_iter().map(|result| ResultLabels { result })
}

impl OutcomeLabels {
    fn of(outcome: LockOutcome) -> Self {
        Self {
            outcome: outcome.as_str(),
        }
    }
}

impl BoxLabels {
    fn of(kind: BoxKind) -> Self {
        Self {
            r#box: box_label(kind),
        }
    }
}

/// The `reason` labels of `names`.
fn reasons(names: impl IntoIterator<Item = &'static str>) -> impl Iterator<Item = ReasonLabels> {
    names.into_iter().map(|reason| ReasonLabels { reason })
}

/// A histogram with `buckets`.
fn histogram(buckets: &[f64]) -> Histogram {
    Histogram::new(buckets.iter().copied())
}

/// `boxtable_build_info`: always 1, labelled with the version and revision.
fn build_info() -> Family<BuildLabels, Gauge> {
    let family = Family::<BuildLabels, Gauge>::default();
    family
        .get_or_create(&BuildLabels {
            version: VERSION,
            revision: REVISION,
        })
        .set(1);
    family
}

/// The registry and every `boxtable_` metric. Share it as `Arc<Metrics>`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    reconcile_duration: Histogram,
    lock_wait: Histogram,
    lock_outcomes: Family<OutcomeLabels, Counter>,
    lock_lost_after_commit: Counter,
    migrations_applied: Family<BoxLabels, Counter>,
    failures: Family<ReasonLabels, Counter>,
    drops: Family<ResultLabels, Counter>,
    in_flight: Gauge,
    leader: Gauge,
    lock_held: Gauge,
    lock_blocked_sessions: Counter,
    lock_blocked_wait: Histogram,
    sessions_opened: Family<ReasonLabels, Counter>,
    sessions_closed: Family<ReasonLabels, Counter>,
    sessions_open: Gauge,
    sessions_idle: Gauge,
    objects: std::sync::RwLock<ObjectGauges>,
    caches: CacheGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `boxtable_` prefix, with every label value present at 0
    /// so dashboards and alerts see the series before the first event.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("boxtable");
        let r = &mut registry;
        let reconciles = registered(
            r,
            RECONCILES,
            zeroed(results(RECONCILE_RESULTS.map(ReconcileResult::as_str))),
        );
        let reconcile_duration = registered(r, RECONCILE_DURATION, histogram(&RECONCILE_BUCKETS));
        let lock_wait = registered(r, LOCK_WAIT, histogram(&LOCK_WAIT_BUCKETS));
        let lock_outcomes = registered(
            r,
            LOCK_OUTCOMES,
            zeroed(LOCK_OUTCOMES_ALL.map(OutcomeLabels::of)),
        );
        let lock_lost_after_commit = registered(r, LOCK_LOST_AFTER_COMMIT, Counter::default());
        let migrations_applied =
            registered(r, MIGRATIONS_APPLIED, zeroed(BOXES.map(BoxLabels::of)));
        let failures = registered(
            r,
            FAILURES,
            zeroed(reasons(
                Reason::ALL
                    .into_iter()
                    .filter(|r| r.is_failure())
                    .map(Reason::as_str),
            )),
        );
        let drops = registered(
            r,
            DROPS,
            zeroed(results(DROP_RESULTS.map(DropResult::as_str))),
        );
        let in_flight = registered(r, IN_FLIGHT, Gauge::default());
        registered(r, BUILD_INFO, build_info());
        let leader = registered(r, LEADER, Gauge::default());
        let lock_held = registered(r, LOCK_HELD, Gauge::default());
        let lock_blocked_sessions = registered(r, LOCK_BLOCKED_SESSIONS, Counter::default());
        let lock_blocked_wait = registered(r, LOCK_BLOCKED_WAIT, histogram(&LOCK_BLOCKED_BUCKETS));
        let sessions_opened = registered(
            r,
            SESSIONS_OPENED,
            zeroed(reasons(Opened::ALL.into_iter().map(Opened::as_str))),
        );
        let sessions_closed = registered(
            r,
            SESSIONS_CLOSED,
            zeroed(reasons(Closed::ALL.into_iter().map(Closed::as_str))),
        );
        let sessions_open = registered(r, SESSIONS_OPEN, Gauge::default());
        let sessions_idle = registered(r, SESSIONS_IDLE, Gauge::default());
        let objects = ObjectGauges::register(r);
        let caches = CacheGauges::register(r);
        Self {
            registry,
            reconciles,
            reconcile_duration,
            lock_wait,
            lock_outcomes,
            lock_lost_after_commit,
            migrations_applied,
            failures,
            drops,
            in_flight,
            leader,
            lock_held,
            lock_blocked_sessions,
            lock_blocked_wait,
            sessions_opened,
            sessions_closed,
            sessions_open,
            sessions_idle,
            objects: std::sync::RwLock::new(objects),
            caches,
        }
    }

    /// Counts the BoxTables of `source` in `boxtable_objects` at every scrape from now on.
    pub fn count_objects(&self, source: std::sync::Arc<dyn ObjectSource>) {
        if let Ok(mut objects) = self.objects.write() {
            objects.add_source(source);
        }
    }

    /// Counts the entries `source` holds in `boxtable_cache_entries` at every scrape from now on.
    pub fn count_cache_entries(&self, source: std::sync::Arc<dyn CacheSource>) {
        self.caches.add_source(source);
    }

    /// The entries every source of `boxtable_cache_entries` holds now, together.
    pub fn cache_entries(&self) -> CacheEntries {
        self.caches.total()
    }

    /// Sets `boxtable_leader`: whether this replica reconciles now.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Records the sessions a release found blocked on the lock (nothing when there were none).
    pub fn record_blocked(&self, blocked: Blocked) {
        if blocked.sessions == 0 {
            return;
        }
        self.lock_blocked_sessions
            .inc_by(u64::from(blocked.sessions));
        self.lock_blocked_wait
            .observe(blocked.longest.as_secs_f64());
    }

    /// Counts one reconcile pass and observes its duration.
    pub fn record_reconcile(&self, result: ReconcileResult, duration: Duration) {
        self.reconciles
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
        self.reconcile_duration.observe(duration.as_secs_f64());
    }

    /// Counts a failure by its bounded reason; a reason that is no failure
    /// ([`Reason::is_failure`]) is not counted.
    pub fn record_failure(&self, reason: Reason) {
        if !reason.is_failure() {
            return;
        }
        self.failures
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// Counts how a lock wait ended and observes how long it waited.
    pub fn record_lock(&self, outcome: LockOutcome, waited: Duration) {
        self.lock_outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            })
            .inc();
        self.lock_wait.observe(waited.as_secs_f64());
    }

    /// Counts how one drop attempt ended.
    pub fn record_drop(&self, result: DropResult) {
        self.drops
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
    }

    /// Counts a migration that committed although its session had lost the lock by unlock time.
    pub fn record_lock_lost_after_commit(&self) {
        self.lock_lost_after_commit.inc();
    }

    /// Counts `steps` migration steps applied to a box of kind `kind`.
    pub fn record_migrations(&self, kind: BoxKind, steps: u64) {
        self.migrations_applied
            .get_or_create(&BoxLabels {
                r#box: box_label(kind),
            })
            .inc_by(steps);
    }

    /// Marks a reconcile pass as running until the returned guard drops.
    pub fn reconcile_started(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// The metrics in the Prometheus/OpenMetrics text format.
    ///
    /// # Errors
    /// Only if formatting into a `String` fails.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        self.lock_held
            .set(i64::try_from(crate::lock::held_now()).unwrap_or(i64::MAX));
        if let Ok(objects) = self.objects.read() {
            objects.refresh();
        }
        self.caches.refresh();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

impl PoolEvents for Metrics {
    fn opened(&self, why: Opened) {
        self.sessions_opened
            .get_or_create(&ReasonLabels {
                reason: why.as_str(),
            })
            .inc();
    }

    fn closed(&self, why: Closed) {
        self.sessions_closed
            .get_or_create(&ReasonLabels {
                reason: why.as_str(),
            })
            .inc();
    }

    fn sizes(&self, open: usize, idle: usize) {
        self.sessions_open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
        self.sessions_idle
            .set(i64::try_from(idle).unwrap_or(i64::MAX));
    }
}

/// Decrements the in-flight gauge when dropped.
#[derive(Debug)]
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
