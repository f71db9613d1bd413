//! What decides a pooled session: the connection string as written (credentials included) and the
//! CA bundle. Two passes share sessions only when both are byte for byte the same.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::db::{ConnStrError, ConnectionSettings};

/// The identity of a database target in the [`SessionPool`](super::SessionPool). A rotated
/// password or CA bundle is a different key, so it gets sessions of its own.
///
/// `Debug` shows the redacted connection string ([`ConnectionSettings::redacted`]), never the
/// password, and whether a CA bundle is part of the key.
#[derive(Clone)]
pub struct SessionKey {
    connection_string: String,
    ca_pem: Option<Vec<u8>>,
    settings: ConnectionSettings,
}

impl SessionKey {
    /// The key of `connection_string` with `ca_pem`, parsed once here.
    ///
    /// # Errors
    /// [`ConnStrError`] when the connection string cannot be parsed.
    pub fn new(connection_string: &str, ca_pem: Option<&[u8]>) -> Result<Self, ConnStrError> {
        let settings = ConnectionSettings::parse(connection_string)?;
        Ok(Self {
            connection_string: connection_string.to_owned(),
            ca_pem: ca_pem.map(<[u8]>::to_vec),
            settings,
        })
    }

    /// The parsed settings, for connecting.
    pub fn settings(&self) -> &ConnectionSettings {
        &self.settings
    }

    /// The CA bundle (PEM), if any.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca_pem.as_deref()
    }
}

impl PartialEq for SessionKey {
    fn eq(&self, other: &Self) -> bool {
        self.connection_string == other.connection_string && self.ca_pem == other.ca_pem
    }
}

impl Eq for SessionKey {}

impl Hash for SessionKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.connection_string.hash(state);
        self.ca_pem.hash(state);
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionKey")
            .field("target", &self.settings.redacted())
            .field("ca_bundle", &self.ca_pem.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_never_shows_its_password() {
        for string in [
            "postgres://app:s3cr3t-pw@db.example:5433/shop",
            "host=db.example user=app password=s3cr3t-pw dbname=shop",
            "Host=db.example;Username=app;Password=s3cr3t-pw;Database=shop",
        ] {
            let key = SessionKey::new(string, Some(b"pem")).unwrap();
            let shown = format!("{key:?} {key:#?}");
            assert!(!shown.contains("s3cr3t-pw"), "{shown}");
            assert!(shown.contains("db.example"), "{shown}");
        }
    }

    #[test]
    fn a_rotated_password_or_ca_bundle_is_another_key() {
        let key = |s: &str, ca: Option<&[u8]>| SessionKey::new(s, ca).unwrap();
        let old = key("postgres://app:one@db/shop", None);
        assert_eq!(old, key("postgres://app:one@db/shop", None));
        assert_ne!(old, key("postgres://app:two@db/shop", None));
        assert_ne!(old, key("postgres://app:one@db/shop", Some(b"ca")));
    }
}
