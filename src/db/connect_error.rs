//! [`ConnectError`]: why a session could not be opened, sorted from the driver's error into what
//! the user must fix (a configuration mistake, which stalls) and what may pass (retried).
//!
//! Configuration mistakes, given up on until the Secret or the server changes:
//! - the credentials are refused, the server asks for a password the string does not carry, or
//!   it authenticated without the channel binding the string requires (`AuthenticationFailed`);
//! - the database the string names (or, naming none, the user name) does not exist, SQLSTATE
//!   3D000 (`DatabaseNotFound`);
//! - the string requires TLS (`require`, `verify-ca`, `verify-full`) and the server offers none,
//!   its certificate fails verification, or it refuses the client certificate (`TlsFailed`).
//!
//! Everything else (refused or reset connections, timeouts, a server starting up or shutting down)
//! is `ConnectionFailed` and retried with backoff. Messages name the host, port, user, database
//! and the TLS mode asked for, in libpq's spelling whichever form the string used (`sslmode`,
//! `dbname`); never the password or the connection string.

use tokio_postgres::error::SqlState;

use super::TlsMode;
use super::tls::TlsError;
use crate::reason::Reason;

/// Why a session could not be opened. Messages name host, port and user, never the password.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server could not be reached or refused the session.
    #[error("connecting to PostgreSQL at {target} as {user} failed")]
    Connect {
        /// Host and port, never the password.
        target: String,
        /// The role.
        user: String,
        /// The driver error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The server refused the credentials (SQLSTATE 28P01 or 28000).
    #[error("authenticating to PostgreSQL at {target} as {user} failed")]
    Authenticate {
        /// Host and port.
        target: String,
        /// The role.
        user: String,
        /// The driver error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The server asked for a password and the connection string has none.
    #[error(
        "PostgreSQL at {target} asked {user} for a password and the connection string has none: \
         add it (key password, or Password in the Npgsql form)"
    )]
    PasswordMissing {
        /// Host and port.
        target: String,
        /// The role.
        user: String,
    },
    /// `channel_binding=require`, and the server authenticated without SCRAM-SHA-256-PLUS over TLS
    /// (trust, password, md5, a certificate, or SCRAM without TLS).
    #[error(
        "PostgreSQL at {target} authenticated {user} without channel binding, which the connection \
         string requires (channel_binding=require): connect over TLS to a server that \
         authenticates {user} with scram-sha-256, or set channel_binding to prefer"
    )]
    ChannelBindingUnused {
        /// Host and port.
        target: String,
        /// The role.
        user: String,
    },
    /// The server refused the client certificate during the TLS handshake, or asked for one the
    /// string does not name.
    #[error("{}", client_certificate_refused(target, *offered))]
    ClientCertificateRefused {
        /// Host and port.
        target: String,
        /// Whether a client certificate was offered.
        offered: bool,
        /// The driver error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database does not exist (SQLSTATE 3D000).
    #[error("{}", database_not_found(target, dbname, *named))]
    DatabaseNotFound {
        /// Host and port.
        target: String,
        /// The database the server was asked for.
        dbname: String,
        /// Whether the connection string named it (else the server took the user name).
        named: bool,
    },
    /// The connection string requires TLS and the server does not offer it.
    #[error(
        "PostgreSQL at {target} does not offer TLS, which the connection string requires \
         (sslmode={mode}): enable TLS on the server, or set sslmode to prefer or disable"
    )]
    TlsUnavailable {
        /// Host and port.
        target: String,
        /// The TLS mode the connection string asked for.
        mode: TlsMode,
    },
    /// The server's certificate failed verification.
    #[error(
        "the certificate of PostgreSQL at {target} failed verification (sslmode={mode}): check the \
         CA bundle (the key sslrootcert names, else the Secret's ca.crt) and that the certificate \
         names the host"
    )]
    TlsCertificate {
        /// Host and port.
        target: String,
        /// The TLS mode the connection string asked for.
        mode: TlsMode,
        /// The driver error (its source says what rustls refused).
        #[source]
        source: tokio_postgres::Error,
    },
    /// The TLS handshake broke off (the connection was reset or closed during it).
    #[error("tls handshake with PostgreSQL at {target} failed (sslmode={mode})")]
    Tls {
        /// Host and port.
        target: String,
        /// The TLS mode the connection string asked for.
        mode: TlsMode,
        /// The driver error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Connecting took longer than the connect timeout.
    #[error("connecting to PostgreSQL at {target} as {user} timed out after {seconds}s")]
    Timeout {
        /// Host and port.
        target: String,
        /// The role.
        user: String,
        /// The timeout that elapsed.
        seconds: u64,
    },
    /// The CA bundle (Secret key `ca.crt`) is unusable.
    #[error("building the tls configuration for {target} failed")]
    TlsConfig {
        /// Host and port.
        target: String,
        /// Why.
        #[source]
        source: TlsError,
    },
    /// The session opened but `pg_backend_pid()` failed.
    #[error("reading the backend pid on {target} failed")]
    BackendPid {
        /// Host and port.
        target: String,
        /// The driver error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The session opened but the advisory lock statements could not be prepared.
    #[error("preparing the advisory lock statements on {target} failed")]
    PrepareLock {
        /// Host and port.
        target: String,
        /// The driver error.
        #[source]
        source: tokio_postgres::Error,
    },
}

impl ConnectError {
    /// The bounded reason for status, events and metrics: configuration mistakes stall (see the
    /// module doc), the rest is retried.
    pub fn reason(&self) -> Reason {
        match self {
            ConnectError::Authenticate { .. }
            | ConnectError::PasswordMissing { .. }
            | ConnectError::ChannelBindingUnused { .. } => Reason::AuthenticationFailed,
            ConnectError::DatabaseNotFound { .. } => Reason::DatabaseNotFound,
            ConnectError::TlsUnavailable { .. }
            | ConnectError::TlsCertificate { .. }
            | ConnectError::ClientCertificateRefused { .. } => Reason::TlsFailed,
            ConnectError::TlsConfig { .. } => Reason::InvalidConnectionString,
            ConnectError::Connect { .. }
            | ConnectError::Tls { .. }
            | ConnectError::Timeout { .. }
            | ConnectError::BackendPid { .. }
            | ConnectError::PrepareLock { .. } => Reason::ConnectionFailed,
        }
    }
}

fn database_not_found(target: &str, dbname: &str, named: bool) -> String {
    if named {
        format!(
            "database {dbname:?} does not exist on PostgreSQL at {target}: correct dbname (Database \
             in the Npgsql form) in the connection string, or create the database"
        )
    } else {
        format!(
            "database {dbname:?} does not exist on PostgreSQL at {target} (the connection string \
             names no database, so the server took the user name): set dbname (Database in the \
             Npgsql form) in the connection string"
        )
    }
}

fn client_certificate_refused(target: &str, offered: bool) -> String {
    if offered {
        format!(
            "PostgreSQL at {target} refused the client certificate (sslcert) in the TLS handshake: \
             it must be signed by a CA the server trusts (ssl_ca_file) and be valid now"
        )
    } else {
        format!(
            "PostgreSQL at {target} asked for a client certificate in the TLS handshake and the \
             connection string names none: add sslcert and sslkey (keys of the Secret)"
        )
    }
}

/// What the session was opening, for [`classify`]'s messages.
pub(super) struct Attempt {
    /// Host and port of the first host.
    pub(super) target: String,
    /// The role.
    pub(super) user: String,
    /// The database asked for, if the string named one.
    pub(super) dbname: Option<String>,
    /// The TLS mode the connection string asked for.
    pub(super) mode: TlsMode,
    /// Whether a client certificate was offered.
    pub(super) client_cert: bool,
}

/// Sorts a driver error from connecting into the variants above.
pub(super) fn classify(attempt: Attempt, source: tokio_postgres::Error) -> ConnectError {
    let Attempt {
        target,
        user,
        dbname,
        mode,
        client_cert,
    } = attempt;
    let code = source.code();
    if code == Some(&SqlState::INVALID_PASSWORD)
        || code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
    {
        return ConnectError::Authenticate {
            target,
            user,
            source,
        };
    }
    if code == Some(&SqlState::INVALID_CATALOG_NAME) {
        let named = dbname.is_some();
        return ConnectError::DatabaseNotFound {
            target,
            dbname: dbname.unwrap_or_else(|| user.clone()),
            named,
        };
    }
    if client_certificate_alert(&source) {
        return ConnectError::ClientCertificateRefused {
            target,
            offered: client_cert,
            source,
        };
    }
    // The driver's error kinds are private; its fixed messages are the only way to tell them.
    let cause = std::error::Error::source(&source).map(ToString::to_string);
    match (source.to_string().as_str(), cause.as_deref()) {
        ("authentication error", Some("server did not use channel binding")) => {
            ConnectError::ChannelBindingUnused { target, user }
        }
        ("authentication error", _) => ConnectError::Authenticate {
            target,
            user,
            source,
        },
        ("invalid configuration", Some("password missing")) => {
            ConnectError::PasswordMissing { target, user }
        }
        ("error performing TLS handshake", Some("server does not support TLS")) => {
            ConnectError::TlsUnavailable { target, mode }
        }
        ("error performing TLS handshake", _) if certificate_refused(&source) => {
            ConnectError::TlsCertificate {
                target,
                mode,
                source,
            }
        }
        ("error performing TLS handshake", _) => ConnectError::Tls {
            target,
            mode,
            source,
        },
        _ => ConnectError::Connect {
            target,
            user,
            source,
        },
    }
}

/// The rustls error under a driver error, if the connection failed in TLS.
fn rustls_error(error: &tokio_postgres::Error) -> Option<&rustls::Error> {
    std::error::Error::source(error)
        .and_then(|cause| cause.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::get_ref)
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// Whether rustls refused the server's certificate (unknown issuer, wrong name, expired...).
fn certificate_refused(error: &tokio_postgres::Error) -> bool {
    rustls_error(error).is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_)))
}

/// Whether the server ended the handshake with an alert about the client's certificate (with
/// TLS 1.3 it arrives after the handshake, when the first message is read).
fn client_certificate_alert(error: &tokio_postgres::Error) -> bool {
    use rustls::AlertDescription as Alert;
    rustls_error(error).is_some_and(|e| {
        matches!(
            e,
            rustls::Error::AlertReceived(
                Alert::BadCertificate
                    | Alert::UnsupportedCertificate
                    | Alert::CertificateRevoked
                    | Alert::CertificateExpired
                    | Alert::CertificateUnknown
                    | Alert::UnknownCA
                    | Alert::CertificateRequired
            )
        )
    })
}
