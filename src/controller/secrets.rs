//! Reading a BoxTable's connection string (and optional CA bundle) from its Secret, with as
//! little access to Secrets as that needs.
//!
//! The operator never lists or watches Secrets with their contents. A metadata-only watch
//! (`PartialObjectMeta`: names, labels, finalizers, resourceVersions, no data) tells it when a
//! Secret changes; a Secret's contents are read with one GET when a pass uses it, and kept,
//! keyed by its resourceVersion: a pass on an unchanged Secret reads nothing, a rotated one (a new
//! resourceVersion in the watch) is read again. With `--secret-label-selector` the watch sees only
//! the Secrets with those labels, and a referenced Secret without them is refused with a clear
//! status ([`SecretError::NotSelected`]) rather than read behind the watch's back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

pub use crate::source::CA_KEY;
use crate::source::lookup;

/// A Secret as the metadata watch sees it (no data).
pub type SecretMetadata = PartialObjectMeta<Secret>;

/// What a BoxTable's Secret provides.
#[derive(Clone)]
pub struct DatabaseSecret {
    /// The connection string (never logged).
    pub connection_string: String,
    /// The CA bundle, when the Secret has `ca.crt`.
    pub ca_pem: Option<Vec<u8>>,
    /// The Secret's finalizers.
    pub finalizers: Vec<String>,
    /// Whether the Secret is being deleted (it stays readable while a finalizer holds it).
    pub deleting: bool,
}

/// Why the connection string could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The Secret does not exist.
    #[error(
        "secret {namespace}/{name} not found; create it with a {key:?} key holding the connection string"
    )]
    Missing {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The expected key.
        key: String,
    },
    /// The Secret exists without the key.
    #[error(
        "secret {namespace}/{name} has no key {key:?}; add the connection string under that key or set spec.database.secretRef.key"
    )]
    MissingKey {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The missing key.
        key: String,
    },
    /// The value is not UTF-8.
    #[error("secret {namespace}/{name} key {key:?} is not UTF-8 text")]
    NotText {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The key.
        key: String,
    },
    /// `--secret-label-selector` is set and the Secret does not match it: the operator does not
    /// watch it, so it would never see the Secret change.
    #[error(
        "secret {namespace}/{name} does not have the labels the operator watches Secrets by (--secret-label-selector {selector}); add them to the secret (kubectl -n {namespace} label secret {name} ...) so that the operator sees it change"
    )]
    NotSelected {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The operator's label selector.
        selector: String,
    },
    /// The API server could not be asked.
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
}

/// Reads the referenced Secrets of one watch scope: a GET when a pass needs a Secret whose
/// contents are not known at the resourceVersion the metadata watch shows, nothing otherwise.
pub struct SecretReader {
    client: kube::Client,
    watched: Store<SecretMetadata>,
    label_selector: Option<String>,
    read: Mutex<HashMap<(String, String), Arc<Secret>>>,
}

impl SecretReader {
    /// A reader for the Secrets `watched` (the metadata watch's cache) shows, selected by
    /// `label_selector` when one is set.
    pub fn new(
        client: kube::Client,
        watched: Store<SecretMetadata>,
        label_selector: Option<String>,
    ) -> Self {
        Self {
            client,
            watched,
            label_selector,
            read: Mutex::new(HashMap::new()),
        }
    }

    /// Reads `key` (and `ca.crt`) from Secret `namespace/name`: from what was read before when
    /// the metadata watch shows the same resourceVersion, else with one GET.
    ///
    /// # Errors
    /// [`SecretError`] naming the Secret and key; the value itself never appears.
    pub async fn read(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<DatabaseSecret, SecretError> {
        let secret = self.secret(namespace, name, key).await?;
        extract(&secret, namespace, name, key)
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Arc<Secret>, SecretError> {
        let cache_key = (namespace.to_owned(), name.to_owned());
        let seen = self
            .watched
            .get(&ObjectRef::new(name).within(namespace))
            .and_then(|meta| meta.metadata.resource_version.clone());
        if let Some(version) = &seen
            && let Some(known) = self.known(&cache_key)
            && known.metadata.resource_version.as_ref() == Some(version)
        {
            return Ok(known);
        }
        let read_error = |source| SecretError::Read {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let Some(secret) = api.get_opt(name).await.map_err(read_error)? else {
            self.forget(&cache_key);
            return Err(SecretError::Missing {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                key: key.to_owned(),
            });
        };
        if let (Some(selector), None) = (self.label_selector.as_deref(), &seen) {
            // Not in the watch: either the watch has not caught up, or the Secret lacks the
            // labels. The API server decides, with the same selector (metadata only).
            let params = ListParams::default()
                .labels(selector)
                .fields(&format!("metadata.name={name}"));
            let selected = api.list_metadata(&params).await.map_err(read_error)?;
            if selected.items.is_empty() {
                self.forget(&cache_key);
                return Err(SecretError::NotSelected {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    selector: selector.to_owned(),
                });
            }
        }
        let secret = Arc::new(secret);
        if let Ok(mut read) = self.read.lock() {
            read.insert(cache_key, secret.clone());
        }
        Ok(secret)
    }

    fn known(&self, key: &(String, String)) -> Option<Arc<Secret>> {
        self.read.lock().ok()?.get(key).cloned()
    }

    fn forget(&self, key: &(String, String)) {
        if let Ok(mut read) = self.read.lock() {
            read.remove(key);
        }
    }
}

fn extract(
    secret: &Secret,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<DatabaseSecret, SecretError> {
    let value = lookup(secret, key).ok_or_else(|| SecretError::MissingKey {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        key: key.to_owned(),
    })?;
    let connection_string = String::from_utf8(value).map_err(|_| SecretError::NotText {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        key: key.to_owned(),
    })?;
    Ok(DatabaseSecret {
        connection_string: connection_string.trim().to_owned(),
        ca_pem: lookup(secret, CA_KEY),
        finalizers: secret.metadata.finalizers.clone().unwrap_or_default(),
        deleting: secret.metadata.deletion_timestamp.is_some(),
    })
}
