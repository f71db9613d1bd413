//! What every reconcile pass shares: the clients, caches, pools and clocks in one [`Context`].

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::schedule::Schedule;
use super::secret_guard::Holds;
use super::secrets;
use crate::crd::BoxTable;
use crate::telemetry::Metrics;

pub use crate::crd::CONTROLLER_NAME;

/// What every reconcile pass shares.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The controller's cache of BoxTables (for Secret mapping and conflicts).
    pub store: Store<BoxTable>,
    /// The cached BoxTables by the table they name (for conflicts).
    pub tables: Arc<super::conflicts::TableIndex>,
    /// Publishes events.
    pub events: super::events::Publisher,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Per-object retry timing.
    pub backoff: Arc<Backoff>,
    /// When each object is next due (ignores triggers from our own status writes).
    pub schedule: Arc<Schedule>,
    /// Drift-check interval.
    pub resync: Duration,
    /// Fires on shutdown: waits are abandoned, migrations cancelled.
    pub shutdown: CancellationToken,
    /// Which Secrets carry which BoxTable's finalizer, from the Secret watch.
    pub(crate) holds: Arc<Holds>,
    /// Reads referenced Secrets (one LIST by name per new resourceVersion).
    pub secrets: Arc<secrets::SecretReader>,
    /// The statuses this process wrote that the cache has not seen yet.
    pub(crate) own_writes: Arc<super::own_writes::OwnWrites>,
    /// Forgets what is kept per BoxTable and per Secret when they go.
    pub(crate) memory: Arc<super::memory::Memory>,
    /// The PostgreSQL sessions kept between passes, shared by every pass of this process.
    pub sessions: Arc<crate::db::SessionPool>,
    /// The workers every pass takes one of, shared by all namespaces.
    pub workers: Arc<super::workers::Workers>,
    /// Where the pool sends this controller's queued objects back when a worker is kept for them.
    pub requeue: super::workers::Requeue,
    /// This cluster's name in ownership records.
    pub cluster_name: String,
}
