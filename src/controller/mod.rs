//! The controller: the only module that talks to both Kubernetes and PostgreSQL.
//!
//! `run` watches BoxTables (and the Secrets they reference) in the configured namespaces and
//! reconciles each through [`reconcile`]: finalizer glue around `apply` and `cleanup`, status by
//! server-side apply only when it changed, events on transitions.

mod adoption;
pub mod backoff;
pub mod cache;
mod cleanup;
pub mod conflicts;
mod context;
mod error;
pub mod events;
mod finalizer;
pub mod leader;
pub mod lean;
pub mod memory;
mod own_writes;
pub mod reconcile;
pub mod schedule;
mod secret_guard;
mod secret_orphans;
pub mod secrets;
mod target;
mod wording;
pub mod workers;
mod write;

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::crd::BoxTable;
use crate::telemetry::{Metrics, Readiness};

pub use context::{CONTROLLER_NAME, Context};
pub use error::ReconcileError;

/// How often readiness asks whether the BoxTable cache has synced.
const READINESS_POLL: Duration = Duration::from_millis(250);

/// Reconciles in flight in one scope beyond the passes on workers. A reconcile that finds its
/// object not due, or queues it for a worker, ends when first polled, so a few dozen slots drain
/// the burst after a start (every object triggered at once) as fast as unlimited ones. Without a
/// limit, kube-runtime's table of reconciles in flight grew to the whole fleet in that burst
/// and kept that size (hash tables do not shrink): 8.8 MiB of a 51.6 MiB heap peak at 10,000
/// BoxTables, by heaptrack (BENCHMARKS.md).
const RECONCILE_SLOTS_BEYOND_WORKERS: u16 = 64;

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespaces to watch; empty means all namespaces.
    pub namespaces: Vec<String>,
    /// Reconciles running at once, in all watched namespaces together (see [`workers`]).
    pub concurrency: u16,
    /// Drift check interval for Ready tables (and retry interval for stalled ones).
    pub resync: Duration,
    /// First retry delay after a transient failure (doubling per failure, capped at 5 min).
    pub retry_base: Duration,
    /// This replica's identity (pod name) for events and leader election.
    pub instance: String,
    /// The namespace holding the leader-election Lease; `None` disables leader election.
    pub leader_election_namespace: Option<String>,
    /// Lease duration, renew deadline and retry period of the leader election.
    pub leader_timing: leader::Timing,
    /// Watch (and read) only the Secrets with these labels (`--secret-label-selector`); a
    /// referenced Secret without them is reported as `SecretNotSelected`.
    pub secret_label_selector: Option<String>,
    /// How many PostgreSQL sessions are kept, per database target and in all, and for how long
    /// (`--db-sessions-per-target`, `--db-session-idle-timeout`, `--db-max-idle-sessions`).
    pub sessions: crate::db::PoolSettings,
    /// This cluster's name in ownership records (`--cluster-name`, see
    /// [`crate::migrate::ownership`]).
    pub cluster_name: String,
}

/// Why the controller stopped before shutdown was asked for.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Another replica holds the Lease now.
    #[error("leadership lost: {holder} holds the lease")]
    TakenOver {
        /// The new holder.
        holder: String,
    },
    /// No renewal succeeded within the renew deadline.
    #[error("leadership given up: the lease was not renewed within the renew deadline")]
    NotRenewed(#[source] Option<leader::LeaderError>),
}

/// Runs the controller until `shutdown` fires (SIGTERM) or leadership is lost. With leader
/// election, a standby waits for the Lease and reports ready while it can read it; the leader
/// reports ready once its BoxTable cache has synced.
///
/// # Errors
/// [`RunError`] when leadership was lost (the process should exit and rejoin as a standby).
///
/// # Cancel safety
/// On `shutdown`, lock waits are abandoned and running migrations are cancelled on the server,
/// rolled back and unlocked, and the leader hands its Lease back, before this returns.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let lost_leadership = CancellationToken::new();
    let ended = Arc::new(std::sync::Mutex::new(None));
    let leadership = match &settings.leader_election_namespace {
        Some(namespace) => {
            let lead = Leadership {
                client: &client,
                namespace,
                settings: &settings,
                metrics: &metrics,
                readiness: &readiness,
            };
            match lead.acquire(&shutdown, &lost_leadership, &ended).await {
                Some(keeper) => Some(keeper),
                None => return Ok(()),
            }
        }
        None => {
            // Without leader election this replica is the one that reconciles.
            metrics.set_leader(true);
            None
        }
    };
    let stop = stop_on_either(&shutdown, &lost_leadership);
    let publisher = events::Publisher::new(client.clone(), settings.instance.clone());
    // One pool for every namespace scope: passes of all scopes share a database's sessions.
    let sessions = Arc::new(crate::db::SessionPool::with_events(
        settings.sessions,
        metrics.clone(),
    ));
    let expiry = {
        let sessions = sessions.clone();
        let stop = stop.clone();
        tokio::spawn(async move { sessions.expire_idle_until(&stop).await })
    };
    // One pool of workers for every namespace scope, shared out fairly between namespaces.
    let workers = workers::Workers::new(usize::from(settings.concurrency));
    let scopes: Vec<Option<String>> = if settings.namespaces.is_empty() {
        vec![None]
    } else {
        settings.namespaces.iter().cloned().map(Some).collect()
    };
    let shared = Shared {
        client: &client,
        settings: &settings,
        metrics: &metrics,
        readiness: &readiness,
        publisher: &publisher,
        sessions: &sessions,
        workers: &workers,
        stop: &stop,
    };
    let controllers: Vec<_> = scopes
        .into_iter()
        .map(|scope| shared.controller(scope.as_deref()))
        .collect();
    futures::future::join_all(controllers).await;
    // Every pass has ended: close the idle sessions now rather than when the process exits.
    stop.cancel();
    let _ = expiry.await;
    sessions.close();
    metrics.set_leader(false);
    // On shutdown the elector hands the Lease back (bounded by its request timeouts); wait for
    // it, or the process could exit first and leave standbys waiting for the Lease to expire.
    if let Some(leadership) = leadership {
        let _ = leadership.await;
    }
    tracing::info!("controller stopped");
    match ended.lock().ok().and_then(|mut e| e.take()) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// A token that fires when `shutdown` does or leadership is lost.
fn stop_on_either(shutdown: &CancellationToken, lost: &CancellationToken) -> CancellationToken {
    let stop = CancellationToken::new();
    let (fire, shutdown, lost) = (stop.clone(), shutdown.clone(), lost.clone());
    tokio::spawn(async move {
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = lost.cancelled() => {}
        }
        fire.cancel();
    });
    stop
}

/// Why the controller stopped, once leadership ended other than by shutdown.
type Ended = Arc<std::sync::Mutex<Option<RunError>>>;

/// Leader election for this replica: the Lease in `namespace`.
struct Leadership<'a> {
    client: &'a Client,
    namespace: &'a str,
    settings: &'a Settings,
    metrics: &'a Arc<Metrics>,
    readiness: &'a Readiness,
}

impl Leadership<'_> {
    /// Waits for the Lease (ready as a standby while the Lease can be read), then keeps it in a
    /// task of its own; `None` when `shutdown` came first. A lost Lease fires `lost` and leaves
    /// why in `ended`.
    ///
    /// # Cancel safety
    /// On `shutdown` the keeper hands the Lease back; the task returned ends when it has.
    async fn acquire(
        &self,
        shutdown: &CancellationToken,
        lost: &CancellationToken,
        ended: &Ended,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let settings = self.settings;
        let elector = leader::LeaderElector::new(
            Api::<Lease>::namespaced(self.client.clone(), self.namespace),
            CONTROLLER_NAME,
            &settings.instance,
        )
        .with_timing(settings.leader_timing);
        tracing::info!(lease = CONTROLLER_NAME, namespace = %self.namespace, identity = %settings.instance, "waiting for leadership");
        if !elector
            .acquire(
                shutdown,
                standby_readiness(self.readiness, settings.leader_timing),
            )
            .await
        {
            return None;
        }
        // Ready again once the BoxTable cache has synced.
        self.readiness.set_not_ready();
        tracing::info!(identity = %settings.instance, "became leader");
        self.metrics.set_leader(true);
        let (lost, stop, ended) = (lost.clone(), shutdown.clone(), ended.clone());
        let leading = self.metrics.clone();
        Some(tokio::spawn(async move {
            let kept = elector.keep(&stop).await;
            // Handed back on shutdown, or lost: this replica reconciles no more.
            leading.set_leader(false);
            let error = match kept {
                leader::Ended::Shutdown => None,
                leader::Ended::TakenOver { holder } => Some(RunError::TakenOver { holder }),
                leader::Ended::RenewDeadlinePassed { last_error } => {
                    Some(RunError::NotRenewed(last_error))
                }
            };
            if let Some(error) = error {
                tracing::error!(error = %crate::report::chain(&error), "stopping");
                if let Ok(mut ended) = ended.lock() {
                    *ended = Some(error);
                }
                lost.cancel();
            }
        }))
    }
}

/// What every namespace scope's controller shares.
struct Shared<'a> {
    client: &'a Client,
    settings: &'a Settings,
    metrics: &'a Arc<Metrics>,
    readiness: &'a Readiness,
    publisher: &'a events::Publisher,
    sessions: &'a Arc<crate::db::SessionPool>,
    workers: &'a Arc<workers::Workers>,
    stop: &'a CancellationToken,
}

impl Shared<'_> {
    /// The controller of one namespace scope (`None`: all namespaces), with its caches, its
    /// Secret watch and what it keeps per object; it ends when `stop` fires.
    ///
    /// Longer than most: it wires one scope's parts in the order each needs the one before (the
    /// caches, then what is kept per object, then the watches, then the context); the work each
    /// part does lives in its own module.
    fn controller(&self, scope: Option<&str>) -> impl std::future::Future<Output = ()> + use<> {
        let (client, settings, metrics, stop) =
            (self.client, self.settings, self.metrics, self.stop);
        let (boxtables, secrets) = match scope {
            Some(ns) => (
                Api::<lean::LeanBoxTable>::namespaced(client.clone(), ns),
                Api::<secrets::SecretMetadata>::namespaced(client.clone(), ns),
            ),
            None => (
                Api::<lean::LeanBoxTable>::all(client.clone()),
                Api::<secrets::SecretMetadata>::all(client.clone()),
            ),
        };
        // Both caches keep each object without what no pass reads (see `cache`).
        let (store, boxtable_writer) = reflector::store();
        let (watched_secrets, secret_writer) = reflector::store();
        metrics.count_objects(Arc::new(CachedBoxTables(store.clone())));
        let schedule = Arc::new(schedule::Schedule::default());
        let holds = Arc::new(secret_guard::Holds::default());
        let reader = Arc::new(secrets::SecretReader::new(
            client.clone(),
            watched_secrets,
            settings.secret_label_selector.clone(),
        ));
        let backoff = Arc::new(backoff::Backoff::new(settings.retry_base));
        // The cached BoxTables by the table they name, for the conflict check (see `conflicts`).
        let tables = Arc::new(conflicts::TableIndex::default());
        // What is kept per BoxTable and per Secret goes when they go (see `memory`).
        let own_writes = Arc::new(own_writes::OwnWrites::default());
        let memory = Arc::new(memory::Memory::new(
            store.clone(),
            schedule.clone(),
            backoff.clone(),
            reader.clone(),
            holds.clone(),
            tables.clone(),
            own_writes.clone(),
        ));
        metrics.count_cache_entries(memory.clone());
        let boxtable_events = {
            let (memory, workers, tables) = (memory.clone(), self.workers.clone(), tables.clone());
            cache::boxtables(boxtables, boxtable_writer, move |event| {
                memory.boxtable_event(event);
                tables.event(event);
                // A deleted object's place in the worker queue goes with it.
                if let watcher::Event::Delete(bt) = event {
                    workers.forget_object(&ObjectRef::from_obj(bt));
                }
            })
        };
        // Objects the worker pool sends back when a worker is kept for them (see `workers`).
        let (requeue, mut requeued) = tokio::sync::mpsc::unbounded_channel();
        let controller = Controller::for_stream(boxtable_events, store.clone());
        // Secrets by metadata only (no data, so unrelated Secrets cost little memory and the
        // operator never receives their contents); a referenced one is read when a pass uses it.
        let mut secret_watch = watcher::Config::default().any_semantic();
        if let Some(selector) = &settings.secret_label_selector {
            secret_watch = secret_watch.labels(selector);
        }
        let secret_events = cache::secret_metadata(
            secrets,
            secret_watch,
            secret_writer,
            memory.clone().secret_observer(),
        );
        {
            let memory = memory.clone();
            let stop = stop.clone();
            tokio::spawn(async move { memory.sweep_until(&stop).await });
        }
        let mapper = SecretMapper {
            store: store.clone(),
            secrets: reader.clone(),
            holds: holds.clone(),
            schedule: schedule.clone(),
            orphans: Arc::new(secret_orphans::Orphans::new(client.clone())),
        };
        let ctx = Arc::new(Context {
            client: client.clone(),
            store: store.clone(),
            tables,
            events: self.publisher.clone(),
            metrics: metrics.clone(),
            backoff,
            schedule,
            resync: settings.resync,
            shutdown: stop.clone(),
            holds,
            secrets: reader,
            own_writes,
            memory,
            sessions: self.sessions.clone(),
            workers: self.workers.clone(),
            requeue,
            cluster_name: settings.cluster_name.clone(),
        });
        ready_when_synced(self.readiness.clone(), store.clone());
        let graceful = stop.clone();
        let unsynced_stop = stopped_before_sync(stop.clone(), store);
        let run = controller
            .watches_stream(secret_events, move |secret| mapper.boxtables_of(&secret))
            .reconcile_on(futures::stream::poll_fn(move |cx| requeued.poll_recv(cx)))
            // `workers` limits the passes (in all scopes together, shared out between
            // namespaces); a reconcile without one queues its object there and ends. So this
            // limit only needs room for every pass plus the reconciles that end at once (see
            // `RECONCILE_SLOTS_BEYOND_WORKERS`).
            .with_config(
                controller::Config::default().concurrency(
                    settings
                        .concurrency
                        .saturating_add(RECONCILE_SLOTS_BEYOND_WORKERS),
                ),
            )
            .graceful_shutdown_on(async move { graceful.cancelled().await })
            .run(reconcile::reconcile, reconcile::error_policy, ctx)
            .for_each(|result| async move { wording::log_result(result) });
        async move {
            futures::pin_mut!(run, unsynced_stop);
            futures::future::select(run, unsynced_stop).await;
        }
    }
}

/// Sets `readiness` once `store` has synced.
fn ready_when_synced(readiness: Readiness, store: Store<BoxTable>) {
    tokio::spawn(async move {
        // The store's readiness signal wakes only its latest waiter (the controller itself
        // waits on it too), so ask again until it answers.
        loop {
            let wait = store.wait_until_ready();
            match tokio::time::timeout(READINESS_POLL, wait).await {
                Ok(Ok(())) => {
                    readiness.set_ready();
                    return;
                }
                Ok(Err(_)) => return,
                Err(_) => {}
            }
        }
    });
}

/// Which BoxTables a Secret's change concerns.
struct SecretMapper {
    store: Store<BoxTable>,
    secrets: Arc<secrets::SecretReader>,
    holds: Arc<secret_guard::Holds>,
    schedule: Arc<schedule::Schedule>,
    orphans: Arc<secret_orphans::Orphans>,
}

impl SecretMapper {
    /// The BoxTables that read `secret`, and those whose finalizer it carries though they no
    /// longer keep it there (so that they let it go); each is told its Secret changed.
    fn boxtables_of(&self, secret: &secrets::SecretMetadata) -> Vec<ObjectRef<BoxTable>> {
        let ns = secret.namespace();
        let name = secret.name_any();
        tracing::debug!(secret = %name, "secret changed");
        self.holds.observe(secret);
        let held = secret_guard::holders(secret);
        let boxtables = self.store.state();
        // A finalizer of a BoxTable the cache does not know may be one whose BoxTable is gone:
        // the API server decides.
        let unknown = held.iter().any(|uid| {
            !boxtables
                .iter()
                .any(|bt| bt.namespace() == ns && bt.uid().as_deref() == Some(uid.as_str()))
        });
        if unknown && let Some(namespace) = &ns {
            self.orphans.check(namespace, &name);
        }
        let readers: Vec<_> = boxtables
            .into_iter()
            .filter(|bt| {
                bt.namespace() == ns
                    && (bt.spec.database.secret_ref.name == name
                        || (held.contains(bt.uid().as_deref().unwrap_or_default())
                            && !secret_guard::keeps(bt, &name)))
            })
            .collect();
        if !readers.is_empty() {
            let namespace = ns.as_deref().unwrap_or_default();
            let version = secret.resource_version().unwrap_or_default();
            let seen = match self.schedule.secret_seen(namespace, &name, &version) {
                // The watch's first sight of a Secret that a pass here has read already (the
                // watch was slower than the pass, or the Secret changed between the pass's read
                // and its event): the version read says whether this one is new to the pass.
                schedule::SecretSeen::First => match self.secrets.version_read(namespace, &name) {
                    Some(read) if read == version => schedule::SecretSeen::Same,
                    Some(_) => schedule::SecretSeen::Changed,
                    None => schedule::SecretSeen::First,
                },
                seen => seen,
            };
            for bt in &readers {
                self.schedule
                    .secret_changed(&bt.uid().unwrap_or_default(), seen);
            }
        }
        readers
            .iter()
            .map(|bt| ObjectRef::from_obj(&**bt))
            .collect()
    }
}

/// The controller's cache, counted by the per-state gauges at each scrape.
struct CachedBoxTables(Store<BoxTable>);

impl crate::telemetry::ObjectSource for CachedBoxTables {
    fn boxtables(&self) -> Vec<Arc<BoxTable>> {
        self.0.state()
    }
}

/// Resolves when `stop` fires while the BoxTable cache has not synced yet; never otherwise.
///
/// kube-runtime's controller holds every reconcile until its cache has synced, and its graceful
/// shutdown waits for held work too; but a shutdown also stops the watch that would sync the
/// cache, so a controller stopped before its first list completed (an operator SIGTERMed right
/// after it started or took the Lease, or while the list is slow) would never finish. No
/// reconcile can have started then, so the controller is simply dropped. The check happens in
/// the same poll that drops it, and a synced cache never becomes unsynced.
async fn stopped_before_sync(stop: CancellationToken, store: Store<BoxTable>) {
    stop.cancelled().await;
    if store.wait_until_ready().now_or_never().is_some() {
        std::future::pending::<()>().await;
    }
    tracing::debug!("stopped before the BoxTable cache synced; nothing was reconciled");
}

/// A standby's readiness: ready while its Lease rounds get answers; not ready once none has been
/// answered for a whole lease duration (a single failed round does not flip it).
fn standby_readiness(readiness: &Readiness, timing: leader::Timing) -> impl FnMut(bool) + use<> {
    let readiness = readiness.clone();
    let mut last_answer: Option<std::time::Instant> = None;
    move |answered| {
        if answered {
            last_answer = Some(std::time::Instant::now());
            readiness.set_ready();
        } else if last_answer.is_none_or(|t| t.elapsed() >= timing.lease_duration) {
            readiness.set_not_ready();
        }
    }
}
