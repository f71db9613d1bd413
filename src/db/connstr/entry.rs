//! What the three form parsers produce: recognised [`Key`]s with their decoded values
//! ([`Entry`]) and where each was written ([`At`]), the first key a form does not define
//! ([`Unknown`], refused once the whole string is read), and the `host:port` list splitting the
//! URL and Npgsql forms share.

use std::fmt;

use zeroize::Zeroize;

use super::{ConnStrError, Form};

/// The settings a key can carry, after synonyms are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    Host,
    HostAddr,
    Port,
    DbName,
    User,
    Password,
    SslMode,
    ConnectTimeout,
    ApplicationName,
    Options,
    TargetSession,
    TrustServerCertificate,
    SslRootCert,
    SslCert,
    SslKeyFile,
    SslPassword,
    SslCertMode,
    SslMinProtocolVersion,
    SslMaxProtocolVersion,
    SslSni,
    SslCrl,
    SslCrlDir,
    CheckCertificateRevocation,
    ChannelBinding,
    RequireAuth,
    RequirePeer,
    GssEncMode,
}

impl Key {
    /// The canonical (libpq) name, used in errors.
    pub(super) fn name(self) -> &'static str {
        match self {
            Key::Host => "host",
            Key::HostAddr => "hostaddr",
            Key::Port => "port",
            Key::DbName => "dbname",
            Key::User => "user",
            Key::Password => "password",
            Key::SslMode => "sslmode",
            Key::ConnectTimeout => "connect_timeout",
            Key::ApplicationName => "application_name",
            Key::Options => "options",
            Key::TargetSession => "target_session_attrs",
            Key::TrustServerCertificate => "trust server certificate",
            Key::SslRootCert => "sslrootcert",
            Key::SslCert => "sslcert",
            Key::SslKeyFile => "sslkey",
            Key::SslPassword => "sslpassword",
            Key::SslCertMode => "sslcertmode",
            Key::SslMinProtocolVersion => "ssl_min_protocol_version",
            Key::SslMaxProtocolVersion => "ssl_max_protocol_version",
            Key::SslSni => "sslsni",
            Key::SslCrl => "sslcrl",
            Key::SslCrlDir => "sslcrldir",
            Key::CheckCertificateRevocation => "check certificate revocation",
            Key::ChannelBinding => "channel_binding",
            Key::RequireAuth => "require_auth",
            Key::RequirePeer => "requirepeer",
            Key::GssEncMode => "gssencmode",
        }
    }
}

/// Where a setting was written: a byte offset into a connection string, a key of the Secret
/// that holds one part of the connection, or `spec.database.parameters`. Shown in errors; never
/// the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// Byte offset of the key in the connection string.
    Byte(usize),
    /// The Secret key the value was read from.
    SecretKey(String),
    /// An entry of `spec.database.parameters`.
    Parameter,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Byte(position) => write!(f, "at byte {position}"),
            At::SecretKey(key) => write!(f, "in secret key {key:?}"),
            At::Parameter => f.write_str("in spec.database.parameters"),
        }
    }
}

/// One recognised key with its decoded value and where it was written. The value may be a
/// password: `Debug` never shows it, and it is zeroed when the entry is dropped.
pub(super) struct Entry {
    pub(super) key: Key,
    pub(super) value: String,
    pub(super) at: At,
}

impl Entry {
    /// An entry read at byte `position` of a connection string.
    pub(super) fn at_byte(key: Key, value: String, position: usize) -> Self {
        Self {
            key,
            value,
            at: At::Byte(position),
        }
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("key", &self.key)
            .field("value", &"***")
            .field("at", &self.at)
            .finish()
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.value.zeroize();
    }
}

/// The longest key a refusal quotes; longer text is not a misspelt key.
const MAX_SHOWN_KEY: usize = 40;

/// The first key of a string that its form does not define. It may be part of a password cut at a
/// separator, so `Debug` shows only its position.
pub(super) struct Unknown {
    /// The key as written (Npgsql: lowercased, spaces trimmed).
    pub(super) text: String,
    /// Byte offset of the key.
    pub(super) position: usize,
    /// Whether it follows a password whose value was not quoted: then it may be the rest of that
    /// password, cut where a separator stood.
    pub(super) after_bare_password: bool,
}

impl fmt::Debug for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unknown")
            .field("text", &"***")
            .field("position", &self.position)
            .field("after_bare_password", &self.after_bare_password)
            .finish()
    }
}

impl Drop for Unknown {
    fn drop(&mut self) {
        self.text.zeroize();
    }
}

/// Refuses the string when it has an [`Unknown`] key, as libpq (`invalid connection option`) or
/// Npgsql (`keyword not supported`) would. The key is quoted only when that cannot show a
/// password: it looks like a key (letters, digits, `_` or spaces, at most 40 bytes), it does not
/// directly follow an unquoted password, and no password in the string contains it or is
/// contained in it.
pub(super) fn refuse_unknown(
    form: Form,
    unknown: Option<Unknown>,
    entries: &[Entry],
) -> Result<(), ConnStrError> {
    let Some(unknown) = unknown else {
        return Ok(());
    };
    let text = unknown.text.as_str();
    let key_shaped = !text.is_empty()
        && text.len() <= MAX_SHOWN_KEY
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ');
    let lower = text.to_lowercase();
    let overlaps_password = entries
        .iter()
        .filter(|e| e.key == Key::Password && !e.value.is_empty())
        .map(|e| e.value.to_lowercase())
        .any(|password| password.contains(&lower) || lower.contains(&password));
    let shown = key_shaped && !unknown.after_bare_password && !overlaps_password;
    Err(ConnStrError::UnknownKey {
        form,
        key: shown.then(|| text.to_owned()),
        position: unknown.position,
        after_bare_password: unknown.after_bare_password,
    })
}

/// Splits `h1:5433,[::1]:5434,h3` into hosts and their optional ports (text, unparsed).
pub(super) fn split_host_ports(spec: &str) -> (Vec<String>, Vec<Option<String>>) {
    let mut hosts = Vec::new();
    let mut ports = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (host, port) = if let Some(rest) = part.strip_prefix('[') {
            match rest.split_once(']') {
                Some((h, tail)) => (h, tail.strip_prefix(':')),
                None => (part, None),
            }
        } else if part.matches(':').count() == 1 {
            let (h, p) = part.split_at(part.find(':').unwrap_or(part.len()));
            (h, p.strip_prefix(':'))
        } else {
            (part, None)
        };
        hosts.push(host.to_owned());
        ports.push(port.map(str::to_owned));
    }
    (hosts, ports)
}

/// The error for `entry`'s value, which is not what its key takes (`expected`).
pub(super) fn invalid(entry: &Entry, expected: &'static str) -> ConnStrError {
    ConnStrError::InvalidValue {
        key: entry.key.name(),
        at: entry.at.clone(),
        expected,
    }
}

/// `v`, unless it is empty (an empty value leaves a setting unset).
pub(super) fn non_empty(v: &str) -> Option<String> {
    (!v.is_empty()).then(|| v.to_owned())
}

/// A boolean as libpq and Npgsql spell it (`true`, `yes`, `on`, `1` and their opposites).
pub(super) fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_or_unknown_key_never_shows_what_it_holds() {
        let entry = Entry::at_byte(Key::Password, "Kn0wn-Pa55word".to_owned(), 7);
        let unknown = Unknown {
            text: "kn0wn-pa55word".to_owned(),
            position: 9,
            after_bare_password: true,
        };
        let shown = format!("{entry:?} {entry:#?} {unknown:?} {unknown:#?}");
        assert!(!shown.to_lowercase().contains("kn0wn-pa55word"), "{shown}");
        assert!(shown.contains("Password") && shown.contains('9'), "{shown}");
    }
}
