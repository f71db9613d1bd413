//! What every reconcile pass shares ([`Context`]), why a pass needs a retry ([`ReconcileError`]),
//! and what a BoxTable is to a pass: its Secret, its owner identity and its connection target.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::backoff::Backoff;
use super::schedule::Schedule;
use super::secret_guard::{GuardError, Holds};
use super::secrets::{self, DatabaseSecret, SecretError, SourceError};
use crate::crd::{BoxTable, FINALIZER};
use crate::migrate::ownership::Owner;
use crate::pass::Target;
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

/// Why a pass failed in a way that needs a retry with backoff (database-level failures are not
/// errors here: they are written to status and retried on schedule).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The object has no namespace (BoxTable is namespaced; this cannot come from a real server).
    #[error("boxtable {name} has no namespace")]
    NoNamespace {
        /// The object name.
        name: String,
    },
    /// Writing status failed.
    #[error("writing status of {namespace}/{name} failed")]
    WriteStatus {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading the Secret failed at the API server (not a missing Secret).
    #[error("reading the connection secret failed")]
    ReadSecret(#[source] SecretError),
    /// Adding the finalizer failed.
    #[error("adding finalizer {FINALIZER} failed")]
    AddFinalizer(#[source] kube::Error),
    /// Removing the finalizer failed; the next pass tries again.
    #[error("removing finalizer {FINALIZER} failed")]
    RemoveFinalizer(#[source] kube::Error),
    /// Releasing the Secret after a deletion failed; the next pass tries again.
    #[error("releasing the connection secret failed")]
    ReleaseSecret(#[source] GuardError),
    /// Re-reading the BoxTable under the table's lock failed, so nothing was changed; the next
    /// pass tries again.
    #[error("re-reading the BoxTable before changing {table} failed: {why}")]
    Recheck {
        /// The table.
        table: String,
        /// What failed.
        why: String,
    },
}

/// Reads the Secret `bt` references (one LIST by name per new resourceVersion), in a span naming
/// it.
///
/// # Errors
/// [`SecretError`] when it is missing, is not selected or cannot be read.
pub(super) async fn read_secret(
    bt: &BoxTable,
    ctx: &Context,
    namespace: &str,
) -> Result<Arc<DatabaseSecret>, SecretError> {
    // The span names the Secret, never what it holds.
    let span = tracing::info_span!("read_secret", secret = %bt.spec.database.secret_ref.name);
    ctx.secrets
        .read(namespace, &bt.spec.database)
        .instrument(span)
        .await
}

/// The BoxTable as the owner of its table in this cluster (see [`crate::migrate::ownership`]).
pub(super) fn owner_of(bt: &BoxTable, namespace: &str, cluster: &str) -> Owner {
    Owner {
        cluster: cluster.to_owned(),
        namespace: namespace.to_owned(),
        name: bt.name_any(),
        uid: bt.uid().unwrap_or_default(),
        takes_over: None,
    }
}

/// The `application_name` a pass's sessions carry: `boxtable-operator/<namespace>/<name>`.
pub(super) fn application_name(namespace: &str, name: &str) -> String {
    format!("{CONTROLLER_NAME}/{namespace}/{name}")
}

/// Where a BoxTable's table lives, from its Secret (`source`, see [`secret_source`]).
///
/// # Errors
/// The [`SourceError`] when the Secret does not give a connection (a missing key, an invalid
/// connection string): the BoxTable stalls with its reason.
pub(super) fn target<'a>(
    secret: &'a DatabaseSecret,
    application_name: &'a str,
    source: &'a str,
) -> Result<Target<'a>, &'a SourceError> {
    Ok(Target {
        connection: secret.connection.as_ref()?,
        application_name,
        source: Some(source),
    })
}

/// The Secret and keys a BoxTable reads its connection from, as the session pool's source: when
/// its contents change, the sessions opened with the previous ones are closed.
pub(super) fn secret_source(bt: &BoxTable, namespace: &str) -> String {
    let secret_ref = &bt.spec.database.secret_ref;
    match &secret_ref.keys {
        Some(_) => format!("{namespace}/{}/(keys)", secret_ref.name),
        None => format!("{namespace}/{}/{}", secret_ref.name, secret_ref.key()),
    }
}
