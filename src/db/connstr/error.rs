//! [`ConnStrError`]: why a connection string was refused, naming positions and keys, never text.

use super::{Form, TlsMode};
use crate::reason::Reason;

/// Why a connection string was refused. Messages name positions and keys, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnStrError {
    /// Nothing but whitespace.
    #[error("connection string is empty")]
    Empty,
    /// A `scheme://` other than `postgres://` or `postgresql://`.
    #[error("unsupported url scheme: expected postgres:// or postgresql://")]
    UnsupportedScheme,
    /// The text does not follow the form's syntax at `position`.
    #[error("malformed {form} connection string at byte {position}: expected {expected}")]
    Syntax {
        /// The detected form.
        form: Form,
        /// Byte offset into the connection string.
        position: usize,
        /// What the parser expected there.
        expected: &'static str,
    },
    /// A keyword the form does not define.
    #[error("unknown {form} keyword at byte {position}")]
    UnknownKey {
        /// The detected form.
        form: Form,
        /// Byte offset of the keyword.
        position: usize,
    },
    /// A known key with a value that cannot be used.
    #[error("invalid value for {key} at byte {position}: expected {expected}")]
    InvalidValue {
        /// The canonical key name.
        key: &'static str,
        /// Byte offset of the key.
        position: usize,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// A required setting is absent.
    #[error("connection string has no {key}")]
    Missing {
        /// The canonical key name.
        key: &'static str,
    },
    /// More than one port, but not one per host.
    #[error("connection string lists {hosts} hosts but {ports} ports")]
    PortCount {
        /// Number of hosts.
        hosts: usize,
        /// Number of ports.
        ports: usize,
    },
    /// `Trust Server Certificate=true` together with a verifying SSL mode.
    #[error("trust server certificate cannot be combined with ssl mode {mode}")]
    TrustWithVerification {
        /// The verifying mode.
        mode: TlsMode,
    },
}

impl ConnStrError {
    /// The bounded reason for status, events and metrics.
    pub fn reason(&self) -> Reason {
        Reason::InvalidConnectionString
    }
}
