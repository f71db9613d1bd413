//! Where a box table's connection comes from: its Secret's connection string (one key) or its
//! parts (separate keys, with `spec.database.parameters`), and the PEM files the settings name
//! (`sslrootcert`, `sslcert`, `sslkey`: keys of the same Secret; without `sslrootcert`, the
//! optional `ca.crt`), read into a [`Connection`] the same way whether the Secret came from the
//! API server (the controller) or from the files given to the `migrate` command.
//!
//! Only the keys the connection uses are read, and what was read is zeroed when dropped: the
//! [`Connection`] is all that is kept.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use zeroize::Zeroizing;

use crate::crd::{ConnectionKeys, ConnectionParameters, DatabaseSpec, SECRET_KEY_PATTERN};
use crate::db::{At, ConnStrError, Connection, ConnectionSettings, RootCert, TlsFiles};
use crate::reason::Reason;

/// The Secret key that holds a CA bundle (PEM) when the settings name none with `sslrootcert`.
pub const CA_KEY: &str = "ca.crt";

/// Why a Secret does not give a usable connection. Messages name the Secret and its keys, never a
/// value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// A key the connection needs is not in the Secret.
    #[error("secret {secret} has no key {key:?}: {needed}")]
    MissingKey {
        /// `namespace/name`, or the name alone for a Secret from a file without a namespace.
        secret: String,
        /// The key.
        key: String,
        /// What needs it, and how to fix it.
        needed: String,
    },
    /// A key holds bytes that are not UTF-8 text.
    #[error("secret {secret} key {key:?} is not UTF-8 text")]
    NotText {
        /// The Secret.
        secret: String,
        /// The key.
        key: String,
    },
    /// The connection string does not parse, or asks for what cannot be honoured.
    #[error("invalid connection string in secret {secret} key {key:?}")]
    ConnectionString {
        /// The Secret.
        secret: String,
        /// The key.
        key: String,
        /// What is wrong, by key and position.
        #[source]
        source: ConnStrError,
    },
    /// The parts read from separate keys (and the parameters) do not make a connection.
    #[error("invalid connection settings in secret {secret} and spec.database.parameters")]
    Parts {
        /// The Secret.
        secret: String,
        /// What is wrong, by key.
        #[source]
        source: ConnStrError,
    },
    /// `sslrootcert`, `sslcert` or `sslkey` holds something that cannot be a Secret key.
    #[error(
        "{keyword} names a key of secret {secret} holding PEM, and its value is not a key name: letters, digits, '-', '_' and '.' (not a file path)"
    )]
    NotAKeyName {
        /// The Secret.
        secret: String,
        /// `sslrootcert`, `sslcert` or `sslkey`.
        keyword: &'static str,
    },
    /// `spec.database.parameters` is set, but the connection is a connection string.
    #[error(
        "spec.database.parameters is for a connection read from separate keys (secretRef.keys); write the parameters into the connection string"
    )]
    ParametersWithConnectionString,
}

impl SourceError {
    /// The bounded reason: a missing key is `SecretNotFound`, anything else
    /// `InvalidConnectionString`.
    pub fn reason(&self) -> Reason {
        match self {
            SourceError::MissingKey { .. } => Reason::SecretNotFound,
            _ => Reason::InvalidConnectionString,
        }
    }
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

/// The connection `database` describes, read from `secret`.
///
/// # Errors
/// [`SourceError`] naming the Secret and the key that is missing or wrong.
pub fn connection(secret: &Secret, database: &DatabaseSpec) -> Result<Connection, SourceError> {
    let reader = Reader {
        secret,
        name: display_name(secret),
    };
    let secret_ref = &database.secret_ref;
    let settings = match &secret_ref.keys {
        Some(keys) => reader.parts(keys, database.parameters.as_deref())?,
        None if database.parameters.is_some() => {
            return Err(SourceError::ParametersWithConnectionString);
        }
        None => {
            let key = secret_ref.key();
            let text = reader.text(key, "add the connection string under that key, or set spec.database.secretRef.key (or secretRef.keys)")?;
            ConnectionSettings::parse(text.trim()).map_err(|source| {
                SourceError::ConnectionString {
                    secret: reader.name.clone(),
                    key: key.to_owned(),
                    source,
                }
            })?
        }
    };
    let files = reader.files(&settings)?;
    Ok(Connection::new(settings, files))
}

/// `namespace/name`, or the name alone.
fn display_name(secret: &Secret) -> String {
    match secret.namespace() {
        Some(namespace) => format!("{namespace}/{}", secret.name_any()),
        None => secret.name_any(),
    }
}

/// Reads keys of one Secret, zeroing copies of what it reads once they are dropped.
struct Reader<'a> {
    secret: &'a Secret,
    name: String,
}

impl Reader<'_> {
    fn bytes(&self, key: &str) -> Option<Zeroizing<Vec<u8>>> {
        lookup(self.secret, key).map(Zeroizing::new)
    }

    fn missing(&self, key: &str, needed: &str) -> SourceError {
        SourceError::MissingKey {
            secret: self.name.clone(),
            key: key.to_owned(),
            needed: needed.to_owned(),
        }
    }

    /// The text of `key`, if the Secret has it.
    fn optional_text(&self, key: &str) -> Result<Option<Zeroizing<String>>, SourceError> {
        let Some(bytes) = self.bytes(key) else {
            return Ok(None);
        };
        let text = String::from_utf8(bytes.to_vec()).map_err(|error| {
            // The bytes in the error are a copy of the value: zero them too.
            drop(Zeroizing::new(error.into_bytes()));
            SourceError::NotText {
                secret: self.name.clone(),
                key: key.to_owned(),
            }
        })?;
        Ok(Some(Zeroizing::new(text)))
    }

    /// The text of `key`, which the connection needs.
    fn text(&self, key: &str, needed: &str) -> Result<Zeroizing<String>, SourceError> {
        self.optional_text(key)?
            .ok_or_else(|| self.missing(key, needed))
    }

    /// The settings made of separate keys and the parameters.
    fn parts(
        &self,
        keys: &ConnectionKeys,
        parameters: Option<&ConnectionParameters>,
    ) -> Result<ConnectionSettings, SourceError> {
        let host = self.text(
            &keys.host,
            "it holds the host (spec.database.secretRef.keys.host)",
        )?;
        let user = self.text(
            &keys.user,
            "it holds the user (spec.database.secretRef.keys.user)",
        )?;
        let port = self.optional_text(&keys.port)?;
        let dbname = self.optional_text(&keys.dbname)?;
        let password = self.optional_text(&keys.password)?;
        let in_key = |key: &str| At::SecretKey(key.to_owned());
        let mut parts = vec![
            ("host", host.trim(), in_key(&keys.host)),
            ("user", user.trim(), in_key(&keys.user)),
        ];
        if let Some(port) = &port {
            parts.push(("port", port.trim(), in_key(&keys.port)));
        }
        if let Some(dbname) = &dbname {
            parts.push(("dbname", dbname.trim(), in_key(&keys.dbname)));
        }
        if let Some(password) = &password {
            // Passwords are taken as they are: whitespace may be part of one.
            parts.push(("password", password.as_str(), in_key(&keys.password)));
        }
        let parameters = parameters.map(ConnectionParameters::keywords);
        for (keyword, value) in parameters.iter().flatten() {
            parts.push((keyword, value.as_str(), At::Parameter));
        }
        ConnectionSettings::from_parts(parts).map_err(|source| SourceError::Parts {
            secret: self.name.clone(),
            source,
        })
    }

    /// The PEM files the settings name: each named key must be there; without `sslrootcert`,
    /// `ca.crt` is read when present.
    fn files(&self, settings: &ConnectionSettings) -> Result<TlsFiles, SourceError> {
        let root = match settings.root_cert() {
            Some(RootCert::System) => None,
            Some(RootCert::Named(key)) => Some(self.file("sslrootcert", key)?),
            None => self.bytes(CA_KEY),
        };
        let client_cert = settings
            .client_cert()
            .map(|key| self.file("sslcert", key))
            .transpose()?;
        let client_key = settings
            .client_key()
            .map(|key| self.file("sslkey", key))
            .transpose()?;
        Ok(TlsFiles {
            root: root.map(|pem| pem.to_vec()),
            client_cert: client_cert.map(|pem| pem.to_vec()),
            client_key,
        })
    }

    /// The key `keyword` names, which must be a key name and be in the Secret.
    fn file(&self, keyword: &'static str, key: &str) -> Result<Zeroizing<Vec<u8>>, SourceError> {
        if !is_key_name(key) {
            return Err(SourceError::NotAKeyName {
                secret: self.name.clone(),
                keyword,
            });
        }
        self.bytes(key)
            .ok_or_else(|| self.missing(key, &format!("{keyword} names it")))
    }
}

/// Whether `key` can be a key of a Secret ([`SECRET_KEY_PATTERN`], at most 253 bytes).
fn is_key_name(key: &str) -> bool {
    debug_assert_eq!(SECRET_KEY_PATTERN, r"^[-._a-zA-Z0-9]+$");
    !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{ChannelBindingParameter, SecretKeyRef, SslModeParameter};
    use k8s_openapi::ByteString;

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        let mut secret = Secret::default();
        secret.metadata.name = Some("db".to_owned());
        secret.metadata.namespace = Some("shop".to_owned());
        secret.data = Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        secret
    }

    fn keys_spec(parameters: Option<ConnectionParameters>) -> DatabaseSpec {
        DatabaseSpec {
            secret_ref: SecretKeyRef {
                name: "db".to_owned(),
                key: None,
                keys: Some(Box::new(ConnectionKeys::default())),
            },
            parameters: parameters.map(Box::new),
        }
    }

    fn string_spec() -> DatabaseSpec {
        DatabaseSpec {
            secret_ref: SecretKeyRef {
                name: "db".to_owned(),
                key: None,
                keys: None,
            },
            parameters: None,
        }
    }

    #[test]
    fn separate_keys_make_the_same_connection_as_a_string() {
        let parts = secret(&[
            ("host", "db.example"),
            ("port", "6432"),
            ("dbname", "shop"),
            ("user", "app"),
            ("password", "pw"),
            ("uri", "ignored"),
        ]);
        let spec = keys_spec(Some(ConnectionParameters {
            sslmode: Some(SslModeParameter::Require),
            channel_binding: Some(ChannelBindingParameter::Require),
            connect_timeout: Some(7),
            ..ConnectionParameters::default()
        }));
        let from_keys = connection(&parts, &spec).unwrap();
        let string = secret(&[(
            "connectionString",
            "postgres://app:pw@db.example:6432/shop?sslmode=require&channel_binding=require&connect_timeout=7",
        )]);
        assert_eq!(from_keys, connection(&string, &string_spec()).unwrap());
    }

    #[test]
    fn a_missing_part_or_named_file_says_which_key() {
        let err = connection(&secret(&[("host", "h")]), &keys_spec(None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "secret shop/db has no key \"user\": it holds the user (spec.database.secretRef.keys.user)"
        );
        assert_eq!(err.reason(), Reason::SecretNotFound);
        let named = secret(&[(
            "connectionString",
            "host=h user=u sslmode=verify-full sslcert=tls.crt sslkey=tls.key",
        )]);
        let err = connection(&named, &string_spec()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "secret shop/db has no key \"tls.crt\": sslcert names it"
        );
        let path = secret(&[(
            "connectionString",
            "host=h user=u sslmode=verify-full sslrootcert=/etc/ssl/ca.pem",
        )]);
        let err = connection(&path, &string_spec()).unwrap_err();
        assert!(
            matches!(
                err,
                SourceError::NotAKeyName {
                    keyword: "sslrootcert",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_bad_part_names_its_key_and_never_its_value() {
        let parts = secret(&[("host", "h"), ("user", "u"), ("port", "Zq7-secret")]);
        let err = connection(&parts, &keys_spec(None)).unwrap_err();
        let text = crate::report::chain(&err);
        assert!(text.contains("in secret key \"port\""), "{text}");
        assert!(!text.contains("Zq7"), "{text}");
    }

    #[test]
    fn only_the_files_the_settings_name_are_read() {
        let pem = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
        let both = secret(&[
            (
                "connectionString",
                "host=h user=u sslmode=verify-ca sslrootcert=root.pem",
            ),
            ("root.pem", pem),
            ("ca.crt", "another bundle"),
        ]);
        let c = connection(&both, &string_spec()).unwrap();
        assert_eq!(c.files().root.as_deref(), Some(pem.as_bytes()));
        let implicit = secret(&[("connectionString", "host=h user=u"), ("ca.crt", pem)]);
        let c = connection(&implicit, &string_spec()).unwrap();
        assert_eq!(c.files().root.as_deref(), Some(pem.as_bytes()));
        assert!(c.files().client_cert.is_none());
    }
}
