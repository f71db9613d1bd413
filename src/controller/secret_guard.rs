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

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use super::reconcile::Context;
use super::secrets::DatabaseSecret;
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
pub(super) async fn sync(ctx: &Context, bt: &BoxTable, hold: bool) -> Result<(), GuardError> {
    let namespace = bt.namespace().unwrap_or_default();
    let name = &bt.spec.database.secret_ref.name;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(secret) = api
        .get_metadata_opt(name)
        .await
        .map_err(|source| GuardError::Read {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?
    else {
        return Ok(());
    };
    let ours = finalizer_of(bt);
    let mut finalizers = secret.metadata.finalizers.clone().unwrap_or_default();
    let held = finalizers.contains(&ours);
    match (hold, held) {
        (true, false) if secret.metadata.deletion_timestamp.is_none() => finalizers.push(ours),
        (false, true) => finalizers.retain(|f| *f != ours),
        _ => return Ok(()),
    }
    // The resourceVersion makes the patch fail (409) if the Secret changed since it was read.
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": secret.metadata.resource_version,
            "finalizers": finalizers,
        }
    });
    api.patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| GuardError::Patch {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?;
    tracing::info!(secret = %name, hold, "secret finalizer updated");
    Ok(())
}
