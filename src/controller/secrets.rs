//! Reading a BoxTable's connection (its connection string or separate keys, and the PEM files
//! they name) from its Secret, with as little access to Secrets as that needs.
//!
//! The operator never GETs a Secret and never lists or watches Secrets it has not selected with
//! their contents. A metadata-only watch (`PartialObjectMeta`: names, labels, finalizers,
//! resourceVersions, no data) tells it when a Secret changes; a Secret's contents are read when a
//! pass uses it, with a LIST selecting it by name (`fieldSelector=metadata.name=<name>`) and, with
//! `--secret-label-selector`, by those labels too, so that the API server never sends the data of
//! a Secret the selector leaves out. Only what the connection uses is kept (the parsed
//! [`Connection`], keyed by the Secret's resourceVersion and the BoxTable's `spec.database`): a
//! pass on an unchanged Secret reads nothing, a rotated one (a new resourceVersion in the watch)
//! is read again. The rest of the Secret is zeroed and dropped once read. A referenced Secret
//! without the selector's labels is refused with a clear status ([`SecretError::NotSelected`]),
//! found out from its metadata alone.
//!
//! What is kept for a Secret is forgotten when the Secret is deleted and when no BoxTable refers
//! to it any more (see [`super::memory`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use zeroize::Zeroize;

use crate::crd::DatabaseSpec;
use crate::db::Connection;
pub use crate::pass::source::{CA_KEY, SourceError};

/// A Secret as the metadata watch sees it (no data).
pub type SecretMetadata = PartialObjectMeta<Secret>;

/// What a BoxTable's Secret provides. `Debug` never shows a password (see [`Connection`]).
#[derive(Clone, Debug)]
pub struct DatabaseSecret {
    /// The connection the Secret describes for the BoxTable, or why it does not.
    pub connection: Result<Connection, SourceError>,
    /// The Secret's finalizers.
    pub finalizers: Vec<String>,
    /// Whether the Secret is being deleted (it stays readable while a finalizer holds it).
    pub deleting: bool,
}

/// Why the Secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The Secret does not exist.
    #[error("secret {namespace}/{name} not found; create it with {holding}")]
    Missing {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The keys it should have.
        holding: String,
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

/// Reads the referenced Secrets of one watch scope: a LIST by name (and label selector) when a
/// pass needs a Secret whose contents are not known at the resourceVersion the metadata watch
/// shows, nothing otherwise.
pub struct SecretReader {
    client: kube::Client,
    watched: Store<SecretMetadata>,
    label_selector: Option<String>,
    read: Mutex<HashMap<(String, String), Known>>,
}

/// What was read from one Secret at one resourceVersion: a connection per `spec.database` that
/// asked for it (BoxTables may read different keys of one Secret).
struct Known {
    resource_version: Option<String>,
    read: Vec<(DatabaseSpec, Arc<DatabaseSecret>)>,
}

/// The most `spec.database` variants kept per Secret; past it the oldest goes.
const MAX_READS_PER_SECRET: usize = 8;

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

    /// Reads the connection `database` describes from Secret `namespace/name`: from what was read
    /// before when the metadata watch shows the same resourceVersion, else with one LIST selecting
    /// it by name and by the label selector.
    ///
    /// # Errors
    /// [`SecretError`] naming the Secret; the value itself never appears. A Secret that exists
    /// but does not give a connection is not an error here: see [`DatabaseSecret::connection`].
    pub async fn read(
        &self,
        namespace: &str,
        database: &DatabaseSpec,
    ) -> Result<Arc<DatabaseSecret>, SecretError> {
        let name = database.secret_ref.name.as_str();
        let cache_key = (namespace.to_owned(), name.to_owned());
        let seen = self
            .watched
            .get(&ObjectRef::new(name).within(namespace))
            .and_then(|meta| meta.metadata.resource_version.clone());
        if let Some(version) = &seen
            && let Some(known) = self.known(&cache_key, version, database)
        {
            return Ok(known);
        }
        let read_error = |source| SecretError::Read {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let mut params = ListParams::default().fields(&format!("metadata.name={name}"));
        if let Some(selector) = &self.label_selector {
            params = params.labels(selector);
        }
        let listed = api.list(&params).await.map_err(read_error)?;
        let Some(mut secret) = listed.items.into_iter().next() else {
            self.forget(namespace, name);
            // Not among the selected ones: the metadata (never the data) says whether it exists.
            if let Some(selector) = self.label_selector.as_deref()
                && metadata(&api, name).await.map_err(read_error)?.is_some()
            {
                return Err(SecretError::NotSelected {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    selector: selector.to_owned(),
                });
            }
            return Err(SecretError::Missing {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                holding: holding(database),
            });
        };
        let read = Arc::new(DatabaseSecret {
            connection: crate::pass::source::connection(&secret, database),
            finalizers: secret.metadata.finalizers.clone().unwrap_or_default(),
            deleting: secret.metadata.deletion_timestamp.is_some(),
        });
        let version = secret.metadata.resource_version.clone();
        zero(&mut secret);
        self.remember(cache_key, version, database, &read);
        Ok(read)
    }

    fn known(
        &self,
        key: &(String, String),
        version: &str,
        database: &DatabaseSpec,
    ) -> Option<Arc<DatabaseSecret>> {
        let read = self.read.lock().ok()?;
        let known = read.get(key)?;
        if known.resource_version.as_deref() != Some(version) {
            return None;
        }
        known
            .read
            .iter()
            .find(|(spec, _)| spec == database)
            .map(|(_, secret)| Arc::clone(secret))
    }

    fn remember(
        &self,
        key: (String, String),
        version: Option<String>,
        database: &DatabaseSpec,
        secret: &Arc<DatabaseSecret>,
    ) {
        let Ok(mut read) = self.read.lock() else {
            return;
        };
        let known = read.entry(key).or_insert_with(|| Known {
            resource_version: version.clone(),
            read: Vec::new(),
        });
        if known.resource_version != version {
            known.resource_version = version;
            known.read.clear();
        }
        known.read.retain(|(spec, _)| spec != database);
        if known.read.len() >= MAX_READS_PER_SECRET {
            known.read.remove(0);
        }
        known.read.push((database.clone(), Arc::clone(secret)));
    }

    /// The resourceVersion of Secret `namespace/name` when a pass last read it, while what was
    /// read is kept.
    pub(super) fn version_read(&self, namespace: &str, name: &str) -> Option<String> {
        let read = self.read.lock().ok()?;
        read.get(&(namespace.to_owned(), name.to_owned()))?
            .resource_version
            .clone()
    }

    /// Forgets what was read from Secret `namespace/name` (deleted, or referenced no more).
    pub(super) fn forget(&self, namespace: &str, name: &str) {
        if let Ok(mut read) = self.read.lock() {
            read.remove(&(namespace.to_owned(), name.to_owned()));
        }
    }

    /// Forgets what was read from every Secret for which `referenced(namespace, name)` is false.
    pub(super) fn retain(&self, mut referenced: impl FnMut(&str, &str) -> bool) {
        if let Ok(mut read) = self.read.lock() {
            read.retain(|(namespace, name), _| referenced(namespace, name));
        }
    }

    /// How many Secrets something is kept for.
    pub(super) fn entries(&self) -> usize {
        self.read.lock().map_or(0, |read| read.len())
    }
}

/// Secret `name`'s metadata as the API server has it now (a LIST by name, metadata only: the
/// operator has no GET on Secrets), or `None` when there is no such Secret.
///
/// # Errors
/// The API error of the list.
pub(super) async fn metadata(
    api: &Api<Secret>,
    name: &str,
) -> Result<Option<SecretMetadata>, kube::Error> {
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(api.list_metadata(&params).await?.items.into_iter().next())
}

/// The keys a Secret for `database` should have, for the message when it is missing.
fn holding(database: &DatabaseSpec) -> String {
    match &database.secret_ref.keys {
        Some(keys) => format!(
            "keys {:?} and {:?} (and optionally {:?}, {:?}, {:?}) holding the connection's parts",
            keys.host, keys.user, keys.port, keys.dbname, keys.password
        ),
        None => format!(
            "a {:?} key holding the connection string",
            database.secret_ref.key()
        ),
    }
}

/// Zeroes every value of a Secret read from the API server before it is dropped.
fn zero(secret: &mut Secret) {
    for value in secret.data.iter_mut().flat_map(|data| data.values_mut()) {
        value.0.zeroize();
    }
    for value in secret
        .string_data
        .iter_mut()
        .flat_map(|data| data.values_mut())
    {
        value.zeroize();
    }
}
