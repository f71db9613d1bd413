//! The session choices a connection string makes: [`TlsMode`], [`TargetSession`],
//! [`ChannelBinding`], [`TlsVersion`] and [`RootCert`], with the spellings each form accepts.

use std::fmt;

/// How a session uses TLS, in libpq's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TlsMode {
    /// Plain TCP only.
    Disable,
    /// TLS without verification when the server offers it, plain TCP otherwise (libpq's default).
    #[default]
    Prefer,
    /// TLS required; the certificate is not verified unless a CA bundle is given (then like
    /// `VerifyCa`, as libpq does when a root certificate is present).
    Require,
    /// TLS required; the certificate chain must lead to the CA, the host name is not checked.
    VerifyCa,
    /// TLS required; chain and host name are both checked.
    VerifyFull,
}

impl TlsMode {
    /// The libpq spelling (`verify-full`).
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }

    /// Parses libpq (`verify-ca`) and Npgsql (`VerifyCA`) spellings; `allow` becomes `Prefer`.
    pub(super) fn parse(value: &str) -> Option<Self> {
        let norm: String = value
            .chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .collect::<String>()
            .to_ascii_lowercase();
        match norm.as_str() {
            "disable" => Some(TlsMode::Disable),
            "allow" | "prefer" => Some(TlsMode::Prefer),
            "require" => Some(TlsMode::Require),
            "verifyca" => Some(TlsMode::VerifyCa),
            "verifyfull" => Some(TlsMode::VerifyFull),
            _ => None,
        }
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which sessions are acceptable when several hosts are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TargetSession {
    /// Any server.
    #[default]
    Any,
    /// A server that accepts writes (a primary).
    ReadWrite,
    /// A read-only server.
    ReadOnly,
}

impl TargetSession {
    /// Parses libpq (`read-write`) and Npgsql (`ReadWrite`) spellings.
    pub(super) fn parse(value: &str) -> Option<Self> {
        let norm: String = value.chars().filter(|c| !matches!(c, '-' | '_')).collect();
        match norm.to_ascii_lowercase().as_str() {
            "any" => Some(TargetSession::Any),
            "readwrite" => Some(TargetSession::ReadWrite),
            "readonly" => Some(TargetSession::ReadOnly),
            _ => None,
        }
    }
}

/// Whether SCRAM authentication is bound to the TLS channel (libpq's and Npgsql's
/// `channel_binding`), which defeats a man in the middle even when the certificate is not
/// verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ChannelBinding {
    /// Never bind.
    Disable,
    /// Bind when the server offers SCRAM-SHA-256-PLUS over TLS (libpq's default).
    #[default]
    Prefer,
    /// Fail unless the server authenticates with SCRAM-SHA-256-PLUS over TLS.
    Require,
}

impl ChannelBinding {
    /// The libpq spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelBinding::Disable => "disable",
            ChannelBinding::Prefer => "prefer",
            ChannelBinding::Require => "require",
        }
    }

    /// Parses libpq (`require`) and Npgsql (`Require`) spellings.
    pub(super) fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "disable" => Some(ChannelBinding::Disable),
            "prefer" => Some(ChannelBinding::Prefer),
            "require" => Some(ChannelBinding::Require),
            _ => None,
        }
    }
}

/// A TLS protocol version the operator can speak (rustls has nothing older than 1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
}

/// Where the CA bundle that verifies the server comes from (`sslrootcert`, Npgsql's
/// `Root Certificate`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RootCert {
    /// `system`: the Mozilla root set the operator carries (libpq: the system's roots).
    System,
    /// A name: a key of the Secret holding the connection (a file for `migrate --database-url`).
    Named(String),
}
