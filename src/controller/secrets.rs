//! Reading a BoxTable's connection string (and optional CA bundle) from its Secret.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

/// The Secret key that may hold a CA bundle (PEM) for verify-ca / verify-full.
pub const CA_KEY: &str = "ca.crt";

/// What a BoxTable's Secret provides.
pub struct DatabaseSecret {
    /// The connection string (never logged).
    pub connection_string: String,
    /// The CA bundle, when the Secret has `ca.crt`.
    pub ca_pem: Option<Vec<u8>>,
    /// The Secret's resourceVersion, so a rotation is visible.
    pub resource_version: Option<String>,
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

/// Reads `key` (and `ca.crt`) from Secret `name`.
///
/// # Errors
/// [`SecretError`] naming the Secret and key; the value itself never appears.
pub async fn read(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<DatabaseSecret, SecretError> {
    let secret = api
        .get_opt(name)
        .await
        .map_err(|source| SecretError::Read {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?;
    let Some(secret) = secret else {
        return Err(SecretError::Missing {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        });
    };
    let value = lookup(&secret, key).ok_or_else(|| SecretError::MissingKey {
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
        ca_pem: lookup(&secret, CA_KEY),
        resource_version: secret.metadata.resource_version.clone(),
        finalizers: secret.metadata.finalizers.clone().unwrap_or_default(),
        deleting: secret.metadata.deletion_timestamp.is_some(),
    })
}

/// A key from `data` (already base64-decoded by the client) or, for objects that were never
/// stored, `stringData`.
pub fn lookup(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| bytes.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|data| data.get(key))
                .map(|s| s.as_bytes().to_vec())
        })
}
