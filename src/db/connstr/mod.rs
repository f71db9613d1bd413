//! Connection strings: the URL, libpq keyword and Npgsql forms, parsed into one
//! [`ConnectionSettings`] that never shows its password.
//!
//! Keys a form does not define are refused, as the form's own client refuses them, so a typo is
//! caught when the string is read instead of surfacing later as something else (`Passwrd=` as
//! "password missing"):
//! - libpq keyword and URL forms: `invalid connection option "sslmdoe" at byte 7` and
//!   `invalid URI query parameter "sslmdoe" at byte 20`, as libpq (`psql`) words them. Known
//!   libpq keywords that change nothing about security (`keepalives`, `sslnegotiation`, ...) are
//!   accepted and ignored.
//! - The Npgsql form: `keyword not supported: 'passwrd' at byte 23`, as Npgsql's
//!   `Keyword not supported: passwrd`. Every key Npgsql 6 to 10 accepts is accepted, so pool and
//!   command settings Brighter applications share the Secret with (`Maximum Pool Size`,
//!   `Include Error Detail`, ...) are read and ignored.
//!
//! The refused key is quoted only when that cannot show a password: it must look like a key, must
//! not directly follow an unquoted password (`Password=ab;cd=1` cuts the password `ab;cd=1` into
//! a password and a key `cd`), and must not overlap any password in the string; otherwise the
//! message gives the position alone, with a hint to quote the password.
//!
//! Every security setting is honoured or refused, never ignored: `sslrootcert`, `sslcert`,
//! `sslkey` (names of Secret keys holding PEM), `channel_binding`, `sslcertmode=disable`,
//! `ssl_min_protocol_version`, `ssl_max_protocol_version` and `sslsni` are honoured (and their
//! Npgsql equivalents); `require_auth`, `sslpassword`, `sslcrl`, `sslcrldir`, `requirepeer`,
//! `sslcertmode=require`, `gssencmode=require` and Npgsql's `Check Certificate Revocation=true`
//! are refused with [`ConnStrError::Unsupported`] saying why.
//!
//! Errors and logs otherwise name positions (byte offsets) and canonical (libpq) key names, never
//! text taken from the string, because a malformed string may hold a password anywhere.
//!
//! How a string flows through the files here: [`build`] holds `ConnectionSettings::parse`, which
//! asks [`form`] which of the three forms it is, lets [`url`], [`keyword`] or [`npgsql`] turn it
//! into [`entry::Entry`] values and validates those into [`settings::ConnectionSettings`] (which
//! knows nothing of parsing); [`security`] reads the TLS and authentication keys. [`modes`] holds
//! the TLS and target-session choices, [`password`] the redacting secret, [`error`] the error
//! type.

mod build;
mod entry;
mod error;
mod form;
mod keyword;
mod modes;
mod npgsql;
mod password;
mod security;
mod settings;
mod url;

pub use build::{MAX_CONNECT_TIMEOUT, MAX_HOSTS};
pub use entry::At;
pub use error::ConnStrError;
pub use form::Form;
pub use modes::{ChannelBinding, RootCert, TargetSession, TlsMode, TlsVersion};
pub use password::Password;
pub use settings::ConnectionSettings;
