//! Connection strings: the URL, libpq keyword and Npgsql forms, parsed into one
//! [`ConnectionSettings`] that never shows its password.
//!
//! Policy on keys the operator does not act on:
//! - libpq keyword and URL forms refuse unknown keywords, as libpq itself does, so a string that
//!   `psql` rejects is rejected here too; known libpq keywords without meaning for the operator
//!   (`sslrootcert`, `gssencmode`, ...) are accepted and ignored.
//! - The Npgsql form ignores keys it does not know (with a debug log naming their position, never
//!   their text): Brighter applications share the Secret and carry pool and command settings
//!   (`Maximum Pool Size`, `Include Error Detail`, ...) that mean nothing to the operator.
//!
//! Errors and logs name positions (byte offsets) and canonical key names, never text taken from
//! the string, because a malformed string may hold a password anywhere.
//!
//! How a string flows through the files here: [`build`] holds `ConnectionSettings::parse`, which
//! asks [`form`] which of the three forms it is, lets [`url`], [`keyword`] or [`npgsql`] turn it
//! into [`entry::Entry`] values and validates those into [`settings::ConnectionSettings`] (which
//! knows nothing of parsing). [`modes`] holds the TLS and target-session choices, [`password`]
//! the redacting secret, [`error`] the error type.

mod build;
mod entry;
mod error;
mod form;
mod keyword;
mod modes;
mod npgsql;
mod password;
mod settings;
mod url;

pub use error::ConnStrError;
pub use form::Form;
pub use modes::{TargetSession, TlsMode};
pub use password::Password;
pub use settings::ConnectionSettings;
