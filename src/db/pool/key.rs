//! What decides a pooled session: the target a [`Connection`] names, told apart by its identity
//! (a digest of every setting, the password included, and of its TLS files), never by the
//! connection string itself. Two passes share sessions only when both are the same.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::db::Connection;

/// The identity of a database target in the [`SessionPool`](super::SessionPool). A rotated
/// password, CA bundle or client certificate is a different key, so it gets sessions of its own.
///
/// Equality and hashing use the redacted target (host, port, database, user, TLS mode) and the
/// connection's digest; the connection string is not kept. `Debug` shows the redacted target
/// and whether TLS files are part of the key.
#[derive(Clone)]
pub struct SessionKey {
    target: String,
    connection: Connection,
}

impl SessionKey {
    /// The key sessions to `connection` are pooled under.
    pub fn of(connection: &Connection) -> Self {
        Self {
            target: connection.settings().redacted(),
            connection: connection.clone(),
        }
    }

    /// The target, for connecting.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }
}

impl PartialEq for SessionKey {
    fn eq(&self, other: &Self) -> bool {
        self.target == other.target && self.connection.identity() == other.connection.identity()
    }
}

impl Eq for SessionKey {}

impl Hash for SessionKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.target.hash(state);
        self.connection.identity().hash(state);
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionKey")
            .field("target", &self.target)
            .field("files", self.connection.files())
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
            let key = SessionKey::of(&Connection::parse(string).unwrap());
            let shown = format!("{key:?} {key:#?}");
            assert!(!shown.contains("s3cr3t-pw"), "{shown}");
            assert!(shown.contains("db.example"), "{shown}");
        }
    }

    #[test]
    fn a_rotated_password_is_another_key() {
        let key = |s: &str| SessionKey::of(&Connection::parse(s).unwrap());
        let old = key("postgres://app:one@db/shop");
        assert_eq!(old, key("postgres://app:one@db/shop"));
        assert_ne!(old, key("postgres://app:two@db/shop"));
    }
}
