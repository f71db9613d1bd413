//! Why a reconcile pass failed in a way that needs a retry with backoff ([`ReconcileError`]).

use super::secret_guard::GuardError;
use super::secrets::SecretError;
use crate::crd::FINALIZER;

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
