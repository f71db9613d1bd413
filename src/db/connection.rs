//! [`Connection`]: one database target, ready to open sessions with: the parsed
//! [`ConnectionSettings`] and the TLS files they name ([`TlsFiles`]), with an identity that tells
//! two targets apart without keeping the connection string.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::{ConnStrError, ConnectionSettings};

/// The PEM files a session's TLS uses, read from where the settings name them (Secret keys, or
/// files for `migrate --database-url`). `Debug` shows which are present, never their contents;
/// the private key is zeroed when dropped.
#[derive(Clone, Default)]
pub struct TlsFiles {
    /// The CA bundle that verifies the server (`sslrootcert`, else the Secret's `ca.crt`).
    pub root: Option<Vec<u8>>,
    /// The client certificate chain (`sslcert`).
    pub client_cert: Option<Vec<u8>>,
    /// The client certificate's private key (`sslkey`).
    pub client_key: Option<Zeroizing<Vec<u8>>>,
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsFiles")
            .field("root", &self.root.is_some())
            .field("client_cert", &self.client_cert.is_some())
            .field("client_key", &self.client_key.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A database target: settings and TLS files, shared cheaply (cloning shares them). Two
/// connections are equal when their [`Connection::identity`] is: every setting (the password
/// included) and every TLS file the same.
#[derive(Clone)]
pub struct Connection(Arc<Inner>);

struct Inner {
    settings: ConnectionSettings,
    files: TlsFiles,
    identity: [u8; 32],
}

impl Connection {
    /// The target `settings` describe, with the TLS files they name.
    pub fn new(settings: ConnectionSettings, files: TlsFiles) -> Self {
        let mut digest = Sha256Hasher(Sha256::new());
        settings.hash(&mut digest);
        files.root.hash(&mut digest);
        files.client_cert.hash(&mut digest);
        files.client_key.as_deref().hash(&mut digest);
        let identity = digest.0.finalize().into();
        Self(Arc::new(Inner {
            settings,
            files,
            identity,
        }))
    }

    /// A connection string without TLS files (the Mozilla roots verify the server).
    ///
    /// # Errors
    /// [`ConnStrError`] when the string cannot be parsed.
    pub fn parse(connection_string: &str) -> Result<Self, ConnStrError> {
        Ok(Self::new(
            ConnectionSettings::parse(connection_string)?,
            TlsFiles::default(),
        ))
    }

    /// The parsed settings.
    pub fn settings(&self) -> &ConnectionSettings {
        &self.0.settings
    }

    /// The TLS files.
    pub fn files(&self) -> &TlsFiles {
        &self.0.files
    }

    /// A SHA-256 digest of everything the target is made of. Equal digests, equal targets; the
    /// digest is never shown (a password could be guessed against it).
    pub fn identity(&self) -> &[u8; 32] {
        &self.0.identity
    }
}

impl PartialEq for Connection {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Connection {}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("target", &self.settings().redacted())
            .field("files", self.files())
            .finish()
    }
}

/// Feeds what `Hash` writes into SHA-256 (the derived `Hash` writes lengths before contents, so
/// different settings never feed the same bytes).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_password_or_tls_file_is_another_identity() {
        let of = |s: &str, files: TlsFiles| {
            Connection::new(ConnectionSettings::parse(s).unwrap(), files)
        };
        let old = of("postgres://app:one@db/shop", TlsFiles::default());
        assert_eq!(
            old,
            of(
                "host=db user=app password=one dbname=shop",
                TlsFiles::default()
            )
        );
        assert_ne!(old, of("postgres://app:two@db/shop", TlsFiles::default()));
        let with_ca = TlsFiles {
            root: Some(b"ca".to_vec()),
            ..TlsFiles::default()
        };
        assert_ne!(old, of("postgres://app:one@db/shop", with_ca));
    }
}
