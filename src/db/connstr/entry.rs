//! What the three form parsers produce: recognised [`Key`]s with their decoded values
//! ([`Entry`]), and the `host:port` list splitting the URL and Npgsql forms share.

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
        }
    }
}

/// One recognised key with its decoded value and the byte offset of the key.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) key: Key,
    pub(super) value: String,
    pub(super) position: usize,
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
