//! [`ConnStrError`]: why a connection string was refused, naming positions and keys, never text.

use super::entry::At;
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
    /// A key the form does not define, refused as libpq (`invalid connection option "sslmdoe"`,
    /// `invalid URI query parameter "sslmdoe"`) or Npgsql (`keyword not supported: 'passwrd'`)
    /// refuses it.
    #[error("{}", unknown_key(*form, key.as_deref(), *position, *after_bare_password))]
    UnknownKey {
        /// The detected form.
        form: Form,
        /// The key, when quoting it cannot show a password (see `entry::refuse_unknown`).
        key: Option<String>,
        /// Byte offset of the key.
        position: usize,
        /// Whether it directly follows a password whose value was not quoted.
        after_bare_password: bool,
    },
    /// A known key with a value that cannot be used.
    #[error("invalid value for {key} {at}: expected {expected}")]
    InvalidValue {
        /// The canonical key name.
        key: &'static str,
        /// Where it was written.
        at: At,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// A security setting the operator cannot honour: refused rather than ignored, so that a
    /// string never connects with less protection than it asks for.
    #[error("{key} {at} is not supported: {why}")]
    Unsupported {
        /// The canonical key name.
        key: &'static str,
        /// Where it was written.
        at: At,
        /// Why, and what to write instead.
        why: &'static str,
    },
    /// Settings that contradict each other (`channel_binding=require` with `sslmode=disable`).
    #[error("{why}")]
    Incompatible {
        /// Which settings, and how to reconcile them.
        why: &'static str,
    },
    /// A name in `spec.database.parameters` that is not a libpq keyword the operator reads.
    #[error(
        "spec.database.parameters names {name:?}, which is not a connection parameter the operator reads"
    )]
    UnknownParameter {
        /// The name as written (a spec field, never a value).
        name: String,
    },
    /// More hosts than a connection may try: each is tried in turn with the full connect timeout.
    #[error("connection string lists {hosts} hosts; at most {max} are allowed")]
    TooManyHosts {
        /// Hosts (or addresses) listed.
        hosts: usize,
        /// The most allowed.
        max: usize,
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

/// libpq's and Npgsql's own wording, with the position, and a hint when the key may be the rest of
/// a password cut at a separator.
fn unknown_key(
    form: Form,
    key: Option<&str>,
    position: usize,
    after_bare_password: bool,
) -> String {
    let mut text = match (form, key) {
        (Form::Npgsql, Some(key)) => format!("keyword not supported: '{key}' at byte {position}"),
        (Form::Npgsql, None) => format!("keyword not supported at byte {position}"),
        (Form::Url, Some(key)) => {
            format!("invalid URI query parameter \"{key}\" at byte {position}")
        }
        (Form::Url, None) => format!("invalid URI query parameter at byte {position}"),
        (Form::Keyword, Some(key)) => {
            format!("invalid connection option \"{key}\" at byte {position}")
        }
        (Form::Keyword, None) => format!("invalid connection option at byte {position}"),
    };
    if after_bare_password {
        text.push_str(match form {
            Form::Npgsql => {
                ", right after an unquoted password: a password with ';' must be quoted (Password=\"...\")"
            }
            Form::Keyword => {
                ", right after an unquoted password: a password with spaces must be quoted (password='...')"
            }
            Form::Url => ", right after the password: a password with '&' must be percent-encoded (%26)",
        });
    }
    text
}

impl ConnStrError {
    /// The bounded reason for status, events and metrics.
    pub fn reason(&self) -> Reason {
        Reason::InvalidConnectionString
    }
}
