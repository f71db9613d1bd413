//! Keeping a BoxTable's Secret while a `deletionPolicy: Drop` needs it.
//!
//! Deleting a namespace deletes everything in it at once: without a guard the Secret goes while
//! a Drop BoxTable still needs its connection string to drop the table, the drop can never run,
//! the BoxTable keeps its finalizer and the namespace stays Terminating for good (a new Secret
//! cannot be created in a terminating namespace). So each Drop BoxTable keeps a finalizer of its
//! own on its Secret, `drop.brighter.dev/<uid>` ([`SECRET_FINALIZER_PREFIX`]), and removes it
//! once its drop is done (or it becomes Retain). One finalizer per BoxTable means no BoxTable
//! decides for another: two drops finishing at once cannot both leave the Secret held. A Secret
//! deleted while it carries such a finalizer stays readable until the last one goes.
//!
//! A BoxTable's finalizer is only ever on the Secret it references now: when `secretRef` moves to
//! another Secret the old one is let go (the Secret watch tells which Secrets carry which
//! BoxTable's finalizer, [`Holds`]), and when the deletion is finished every Secret in the
//! namespace that still carries it is let go (listed from the API server, not the watch, so that
//! nothing is left behind after a restart).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::secrets::{DatabaseSecret, SecretMetadata};
use crate::crd::{BoxTable, DeletionPolicy, SECRET_FINALIZER_PREFIX};

/// Why the Secret's finalizers could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// Reading the Secret failed.
    #[error("reading secret {namespace}/{name} failed")]
    Read {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Listing the namespace's Secrets (to find every one that carries the finalizer) failed.
    #[error("listing the secrets of namespace {namespace} failed")]
    List {
        /// Namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Adding or removing the finalizer failed.
    #[error("updating the finalizers of secret {namespace}/{name} failed")]
    Patch {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// The finalizer `bt` keeps on its Secret.
pub(super) fn finalizer_of(bt: &BoxTable) -> String {
    format!("{SECRET_FINALIZER_PREFIX}{}", bt.uid().unwrap_or_default())
}

/// The uids of the BoxTables whose finalizers `secret` carries.
pub(super) fn holders(secret: &SecretMetadata) -> BTreeSet<String> {
    secret
        .finalizers()
        .iter()
        .filter_map(|f| f.strip_prefix(SECRET_FINALIZER_PREFIX))
        .map(str::to_owned)
        .collect()
}

/// Whether `bt` as it is now keeps its finalizer on the Secret `name` (of its own namespace).
pub(super) fn keeps(bt: &BoxTable, name: &str) -> bool {
    bt.spec.deletion_policy == DeletionPolicy::Drop
        && bt.metadata.deletion_timestamp.is_none()
        && bt.spec.database.secret_ref.name == name
}

/// Which Secrets carry which BoxTable's finalizer, as the Secret watch last saw them (a Secret
/// carrying one cannot go away unseen: it is only removed once its finalizers are gone).
#[derive(Debug, Default)]
pub(crate) struct Holds(Mutex<BTreeMap<(String, String), BTreeSet<String>>>);

impl Holds {
    /// Records the finalizers of `secret` as the watch delivered it.
    pub(super) fn observe(&self, secret: &SecretMetadata) {
        let key = (secret.namespace().unwrap_or_default(), secret.name_any());
        let uids = holders(secret);
        if let Ok(mut holds) = self.0.lock() {
            if uids.is_empty() {
                holds.remove(&key);
            } else {
                holds.insert(key, uids);
            }
        }
    }

    /// Forgets Secret `namespace/name` (deleted).
    pub(super) fn forget(&self, namespace: &str, name: &str) {
        if let Ok(mut holds) = self.0.lock() {
            holds.remove(&(namespace.to_owned(), name.to_owned()));
        }
    }

    /// Forgets every Secret for which `live(namespace, name)` is false.
    pub(super) fn retain(&self, live: impl Fn(&str, &str) -> bool) {
        if let Ok(mut holds) = self.0.lock() {
            holds.retain(|(namespace, name), _| live(namespace, name));
        }
    }

    /// How many Secrets are known to carry a finalizer.
    pub(super) fn entries(&self) -> usize {
        self.0.lock().map_or(0, |holds| holds.len())
    }

    /// The names of the Secrets in `namespace` that carry the finalizer of the BoxTable `uid`.
    fn held_by(&self, namespace: &str, uid: &str) -> Vec<String> {
        self.0.lock().map_or_else(
            |_| Vec::new(),
            |holds| {
                holds
                    .iter()
                    .filter(|((ns, _), uids)| ns == namespace && uids.contains(uid))
                    .map(|((_, name), _)| name.clone())
                    .collect()
            },
        )
    }
}

/// Whether the Secret as read for `bt` needs `bt`'s finalizer added (a Drop BoxTable whose
/// Secret lacks it and is not being deleted) or removed (a Retain BoxTable whose Secret has it).
pub(super) fn out_of_date(bt: &BoxTable, secret: &DatabaseSecret) -> bool {
    let held = secret.finalizers.contains(&finalizer_of(bt));
    match bt.spec.deletion_policy {
        DeletionPolicy::Drop => !held && !secret.deleting,
        DeletionPolicy::Retain => held,
    }
}

/// Puts `bt`'s finalizer on its Secret (`hold`) or takes it off. Nothing is added to a Secret
/// that is already being deleted (the API server forbids new finalizers then); removing works
/// either way.
///
/// # Errors
/// [`GuardError`] when the Secret cannot be read or patched.
///
/// # Idempotency
/// Nothing is written when the finalizer is already as it should be; a concurrent change to the
/// Secret makes the patch fail its resourceVersion precondition (409), and the caller retries.
pub(super) async fn sync(client: &Client, bt: &BoxTable, hold: bool) -> Result<(), GuardError> {
    let namespace = bt.namespace().unwrap_or_default();
    let name = &bt.spec.database.secret_ref.name;
    sync_secret(client, &namespace, name, &finalizer_of(bt), hold).await
}

/// Takes `bt`'s finalizer off every Secret the watch saw carrying it that `bt` no longer keeps it
/// on: a Secret `secretRef` has moved away from, or any Secret once `bt` is Retain.
///
/// # Errors
/// The first [`GuardError`]; the other Secrets are still tried.
///
/// # Idempotency
/// Nothing is written when no such Secret is known.
pub(super) async fn release_stale(
    client: &Client,
    holds: &Holds,
    bt: &BoxTable,
) -> Result<(), GuardError> {
    let namespace = bt.namespace().unwrap_or_default();
    let uid = bt.uid().unwrap_or_default();
    let stale: Vec<String> = holds
        .held_by(&namespace, &uid)
        .into_iter()
        .filter(|name| !keeps(bt, name))
        .collect();
    release_each(client, &namespace, &finalizer_of(bt), stale).await
}

/// Takes `bt`'s finalizer off every Secret in its namespace that carries it, as read from the API
/// server now (its deletion is finished).
///
/// # Errors
/// [`GuardError`] when the Secrets cannot be listed or one cannot be patched.
///
/// # Idempotency
/// Secrets without the finalizer are left alone; running it again after success writes nothing.
pub(super) async fn release_everywhere(client: &Client, bt: &BoxTable) -> Result<(), GuardError> {
    let namespace = bt.namespace().unwrap_or_default();
    let ours = finalizer_of(bt);
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let listed = api
        .list_metadata(&ListParams::default())
        .await
        .map_err(|source| GuardError::List {
            namespace: namespace.clone(),
            source,
        })?;
    let holding: Vec<String> = listed
        .items
        .iter()
        .filter(|s| s.finalizers().contains(&ours))
        .map(ResourceExt::name_any)
        .collect();
    release_each(client, &namespace, &ours, holding).await
}

async fn release_each(
    client: &Client,
    namespace: &str,
    finalizer: &str,
    names: Vec<String>,
) -> Result<(), GuardError> {
    let mut first_error = None;
    for name in names {
        if let Err(error) = sync_secret(client, namespace, &name, finalizer, false).await {
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Adds finalizer `ours` to Secret `name` (`hold`) or takes it off: the Secret's metadata read
/// with a LIST by name (the operator has no GET on Secrets), then a merge patch of its
/// finalizers, guarded by the resourceVersion read.
///
/// # Errors
/// [`GuardError`] when the Secret cannot be read or patched.
///
/// # Idempotency
/// Nothing is written when the finalizer is already as it should be; a Secret already gone holds
/// nothing.
pub(super) async fn sync_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    ours: &str,
    hold: bool,
) -> Result<(), GuardError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let Some(secret) = super::secrets::metadata(&api, name)
        .await
        .map_err(|source| GuardError::Read {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?
    else {
        return Ok(());
    };
    let mut finalizers = secret.metadata.finalizers.clone().unwrap_or_default();
    let held = finalizers.iter().any(|f| f == ours);
    match (hold, held) {
        (true, false) if secret.metadata.deletion_timestamp.is_none() => {
            finalizers.push(ours.to_owned());
        }
        (false, true) => finalizers.retain(|f| f != ours),
        _ => return Ok(()),
    }
    // The resourceVersion makes the patch fail (409) if the Secret changed since it was read.
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": secret.metadata.resource_version,
            "finalizers": finalizers,
        }
    });
    match api
        .patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        // Gone since it was read: nothing is held any more.
        Err(kube::Error::Api(status)) if status.code == 404 && !hold => {}
        Err(source) => {
            return Err(GuardError::Patch {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            });
        }
    }
    tracing::info!(secret = %name, hold, "secret finalizer updated");
    Ok(())
}
