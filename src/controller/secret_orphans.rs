//! Secret finalizers whose BoxTable is gone.
//!
//! A Drop BoxTable's `drop.brighter.dev/<uid>` finalizer on its Secret is normally taken off by
//! the BoxTable's own deletion (see [`super::secret_guard`]). When that deletion never finished
//! through the operator (its `brighter.dev/cleanup` finalizer was removed by hand, or the object
//! went while no operator ran), nothing would take it off, and deleting the Secret, or its
//! namespace, would wait for it forever. So the Secret watch hands every Secret carrying such a
//! finalizer for a BoxTable the cache does not know to [`Orphans::check`], which asks the API
//! server (not the cache, which may lag or not have synced yet) for the namespace's BoxTables and
//! takes off each finalizer whose uid none of them has. A uid is never reused, so a BoxTable
//! confirmed gone cannot come back to need it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::secret_guard::{GuardError, sync_secret};
use crate::crd::{BoxTable, SECRET_FINALIZER_PREFIX};

/// Why a check for orphaned finalizers could not finish; the next change to the Secret (or the
/// next start) checks again.
#[derive(Debug, thiserror::Error)]
pub enum OrphanError {
    /// Reading the Secret failed.
    #[error("reading secret {namespace}/{name} failed")]
    ReadSecret {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Listing the namespace's BoxTables failed.
    #[error("listing the boxtables of namespace {namespace} failed")]
    ListBoxTables {
        /// Namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Taking a finalizer off failed.
    #[error("taking off the finalizer of a deleted boxtable failed")]
    Release(#[source] GuardError),
}

/// Checks Secrets for finalizers of BoxTables that no longer exist, one check per Secret at a
/// time (a change seen during a check runs it once more afterwards).
pub(crate) struct Orphans {
    client: Client,
    /// Secrets being checked now, and whether another change arrived meanwhile.
    running: Mutex<BTreeMap<(String, String), bool>>,
}

impl Orphans {
    /// Checks run with `client` (the operator's).
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            running: Mutex::new(BTreeMap::new()),
        }
    }

    /// Starts a check of Secret `name` in `namespace` in the background, unless one is running,
    /// in which case that one runs again when it ends.
    pub(super) fn check(self: &Arc<Self>, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        {
            let Ok(mut running) = self.running.lock() else {
                return;
            };
            if let Some(again) = running.get_mut(&key) {
                *again = true;
                return;
            }
            running.insert(key.clone(), false);
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                if let Err(error) = this.release_orphans(&key.0, &key.1).await {
                    tracing::warn!(secret = %key.1, namespace = %key.0, error = %crate::report::chain(&error), "checking a secret for finalizers of deleted boxtables failed");
                }
                let Ok(mut running) = this.running.lock() else {
                    return;
                };
                if running.get(&key) == Some(&true) {
                    running.insert(key.clone(), false);
                } else {
                    running.remove(&key);
                    return;
                }
            }
        });
    }

    /// Takes every `drop.brighter.dev/<uid>` finalizer off the Secret whose uid no BoxTable in
    /// its namespace has, as the API server says now (the Secret's metadata listed by name).
    ///
    /// # Errors
    /// [`OrphanError`] when the Secret or the BoxTables cannot be read, or a patch fails.
    ///
    /// # Idempotency
    /// A Secret without such finalizers is only read; one already let go is left alone.
    async fn release_orphans(&self, namespace: &str, name: &str) -> Result<(), OrphanError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let Some(secret) = super::secrets::metadata(&secrets, name)
            .await
            .map_err(|source| OrphanError::ReadSecret {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            })?
        else {
            return Ok(());
        };
        let held: BTreeSet<&str> = secret
            .finalizers()
            .iter()
            .filter_map(|f| f.strip_prefix(SECRET_FINALIZER_PREFIX))
            .collect();
        if held.is_empty() {
            return Ok(());
        }
        let boxtables: Api<BoxTable> = Api::namespaced(self.client.clone(), namespace);
        let live: BTreeSet<String> = boxtables
            .list_metadata(&ListParams::default())
            .await
            .map_err(|source| OrphanError::ListBoxTables {
                namespace: namespace.to_owned(),
                source,
            })?
            .items
            .iter()
            .filter_map(ResourceExt::uid)
            .collect();
        for uid in held.into_iter().filter(|uid| !live.contains(*uid)) {
            let finalizer = format!("{SECRET_FINALIZER_PREFIX}{uid}");
            sync_secret(&self.client, namespace, name, &finalizer, false)
                .await
                .map_err(OrphanError::Release)?;
            tracing::info!(secret = %name, namespace = %namespace, finalizer = %finalizer, "took off the finalizer of a boxtable that no longer exists");
        }
        Ok(())
    }
}
