//! The session choices a connection string makes: [`TlsMode`] and [`TargetSession`], with the
//! spellings each form accepts.

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
