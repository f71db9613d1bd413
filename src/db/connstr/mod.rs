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

mod keyword;
mod npgsql;
mod url;

use crate::reason::Reason;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

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
    fn parse(value: &str) -> Option<Self> {
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

/// A password that renders as `***` in `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// The secret itself, for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The three connection string forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `postgres://user:password@host:port/db?sslmode=...`
    Url,
    /// `host=... port=... dbname=...`
    Keyword,
    /// `Host=...;Port=...;Database=...`
    Npgsql,
}

impl fmt::Display for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Form::Url => "url",
            Form::Keyword => "libpq",
            Form::Npgsql => "npgsql",
        })
    }
}

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

/// Everything needed to open a session, parsed from any of the three forms.
///
/// `Debug` and `Display` never show the password; `Display` is [`ConnectionSettings::redacted`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    hosts: Vec<String>,
    hostaddrs: Vec<IpAddr>,
    ports: Vec<u16>,
    dbname: Option<String>,
    user: String,
    password: Option<Password>,
    tls_mode: TlsMode,
    connect_timeout: Option<Duration>,
    application_name: Option<String>,
    options: Option<String>,
    target_session: TargetSession,
}

impl ConnectionSettings {
    /// Parses a URL, libpq keyword or Npgsql connection string (the form is detected).
    ///
    /// # Errors
    /// [`ConnStrError`] naming the position or key that is wrong, never the text.
    pub fn parse(input: &str) -> Result<Self, ConnStrError> {
        if input.trim().is_empty() {
            return Err(ConnStrError::Empty);
        }
        let entries = match detect(input) {
            Form::Url => url::parse(input)?,
            Form::Keyword => keyword::parse(input)?,
            Form::Npgsql => npgsql::parse(input)?,
        };
        build(entries)
    }

    /// Host names, IP addresses or Unix socket directories, in order.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }
    /// IP addresses to connect to instead of resolving `hosts` (libpq `hostaddr`).
    pub fn hostaddrs(&self) -> &[IpAddr] {
        &self.hostaddrs
    }
    /// One port for all hosts, or one per host; `[5432]` when none was given.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }
    /// The database, if named (the server defaults it to the user name).
    pub fn dbname(&self) -> Option<&str> {
        self.dbname.as_deref()
    }
    /// The role to log in as.
    pub fn user(&self) -> &str {
        &self.user
    }
    /// The password, if any.
    pub fn password(&self) -> Option<&Password> {
        self.password.as_ref()
    }
    /// How TLS is used.
    pub fn tls_mode(&self) -> TlsMode {
        self.tls_mode
    }
    /// The connect timeout from the string; `None` when absent or zero (the caller's default).
    pub fn connect_timeout(&self) -> Option<Duration> {
        self.connect_timeout
    }
    /// The `application_name` the string asked for, if any.
    pub fn application_name(&self) -> Option<&str> {
        self.application_name.as_deref()
    }
    /// Server options (`-c name=value ...`), if any.
    pub fn options(&self) -> Option<&str> {
        self.options.as_deref()
    }
    /// Which server is acceptable among several hosts.
    pub fn target_session(&self) -> TargetSession {
        self.target_session
    }

    /// A driver config with everything from the string (password included, TLS mode not: the
    /// session picks the driver's mode from [`TlsMode`]).
    pub fn to_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        for host in &self.hosts {
            config.host(host);
        }
        for addr in &self.hostaddrs {
            config.hostaddr(*addr);
        }
        for port in &self.ports {
            config.port(*port);
        }
        config.user(&self.user);
        if let Some(password) = &self.password {
            config.password(password.expose());
        }
        if let Some(dbname) = &self.dbname {
            config.dbname(dbname);
        }
        if let Some(options) = &self.options {
            config.options(options);
        }
        if let Some(timeout) = self.connect_timeout {
            config.connect_timeout(timeout);
        }
        config.target_session_attrs(match self.target_session {
            TargetSession::Any => tokio_postgres::config::TargetSessionAttrs::Any,
            TargetSession::ReadWrite => tokio_postgres::config::TargetSessionAttrs::ReadWrite,
            TargetSession::ReadOnly => tokio_postgres::config::TargetSessionAttrs::ReadOnly,
        });
        config
    }

    /// `host:port` of every host (the IP address when only `hostaddr` was given).
    pub fn endpoints(&self) -> Vec<(String, u16)> {
        let names: Vec<String> = if self.hosts.is_empty() {
            self.hostaddrs.iter().map(ToString::to_string).collect()
        } else {
            self.hosts.clone()
        };
        names
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                let port = self.ports.get(i).or(self.ports.first()).copied();
                (h, port.unwrap_or(DEFAULT_PORT))
            })
            .collect()
    }

    /// `host:port` of the first host, for messages (never credentials).
    pub fn target(&self) -> String {
        match self.endpoints().first() {
            Some((h, p)) => format!("{}:{p}", bracket(h)),
            None => String::from("(no host)"),
        }
    }

    /// A URL for logs with the password replaced by `***`, e.g.
    /// `postgres://app:***@db:5432/shop?sslmode=require`.
    pub fn redacted(&self) -> String {
        let mut out = format!("postgres://{}", encode(&self.user));
        if self.password.is_some() {
            out.push_str(":***");
        }
        out.push('@');
        let hosts: Vec<String> = self
            .endpoints()
            .iter()
            .map(|(h, p)| {
                let h = if h.contains(':') {
                    format!("[{h}]")
                } else {
                    encode(h)
                };
                format!("{h}:{p}")
            })
            .collect();
        out.push_str(&hosts.join(","));
        out.push('/');
        out.push_str(&self.dbname.as_deref().map(encode).unwrap_or_default());
        out.push_str("?sslmode=");
        out.push_str(self.tls_mode.as_str());
        if let Some(t) = self.connect_timeout {
            out.push_str(&format!("&connect_timeout={}", t.as_secs()));
        }
        if let Some(a) = &self.application_name {
            out.push_str(&format!("&application_name={}", encode(a)));
        }
        out
    }
}

impl fmt::Display for ConnectionSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

const DEFAULT_PORT: u16 = 5432;

/// The settings a key can carry, after synonyms are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
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
    fn name(self) -> &'static str {
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
struct Entry {
    key: Key,
    value: String,
    position: usize,
}

/// URL when it starts with `scheme://`; Npgsql when it has a `;` or its first key is not a
/// libpq keyword; libpq keywords otherwise.
fn detect(input: &str) -> Form {
    let trimmed = input.trim_start();
    if let Some((scheme, _)) = trimmed.split_once("://") {
        let mut chars = scheme.chars();
        let first_alpha = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        if first_alpha && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) {
            return Form::Url;
        }
    }
    let first_key = trimmed.split('=').next().unwrap_or("").trim();
    if keyword::is_libpq_keyword(first_key) && !keyword::has_unquoted_semicolon(trimmed) {
        Form::Keyword
    } else {
        Form::Npgsql
    }
}

fn invalid(entry: &Entry, expected: &'static str) -> ConnStrError {
    ConnStrError::InvalidValue {
        key: entry.key.name(),
        position: entry.position,
        expected,
    }
}

fn build(entries: Vec<Entry>) -> Result<ConnectionSettings, ConnStrError> {
    let mut s = ConnectionSettings {
        hosts: Vec::new(),
        hostaddrs: Vec::new(),
        ports: Vec::new(),
        dbname: None,
        user: String::new(),
        password: None,
        tls_mode: TlsMode::default(),
        connect_timeout: None,
        application_name: None,
        options: None,
        target_session: TargetSession::default(),
    };
    let mut trust_server_certificate = false;
    for e in &entries {
        let v = e.value.as_str();
        match e.key {
            Key::Host => s.hosts = split_hosts(e)?,
            Key::HostAddr => {
                s.hostaddrs = v
                    .split(',')
                    .map(|a| a.trim().parse::<IpAddr>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| invalid(e, "IP addresses separated by commas"))?;
            }
            Key::Port => s.ports = parse_ports(e)?,
            Key::DbName => s.dbname = non_empty(v),
            Key::User => s.user = v.to_owned(),
            Key::Password => s.password = Some(Password(v.to_owned())),
            Key::SslMode => {
                s.tls_mode = TlsMode::parse(v).ok_or_else(|| {
                    invalid(
                        e,
                        "disable, allow, prefer, require, verify-ca or verify-full",
                    )
                })?;
            }
            Key::ConnectTimeout => {
                let secs: u64 = v.trim().parse().map_err(|_| invalid(e, "whole seconds"))?;
                s.connect_timeout = (secs > 0).then(|| Duration::from_secs(secs));
            }
            Key::ApplicationName => s.application_name = non_empty(v),
            Key::Options => s.options = non_empty(v),
            Key::TargetSession => {
                let norm: String = v.chars().filter(|c| !matches!(c, '-' | '_')).collect();
                s.target_session = match norm.to_ascii_lowercase().as_str() {
                    "any" => TargetSession::Any,
                    "readwrite" => TargetSession::ReadWrite,
                    "readonly" => TargetSession::ReadOnly,
                    _ => return Err(invalid(e, "any, read-write or read-only")),
                };
            }
            Key::TrustServerCertificate => {
                trust_server_certificate =
                    parse_bool(v).ok_or_else(|| invalid(e, "true or false"))?;
            }
        }
    }
    if trust_server_certificate && matches!(s.tls_mode, TlsMode::VerifyCa | TlsMode::VerifyFull) {
        return Err(ConnStrError::TrustWithVerification { mode: s.tls_mode });
    }
    if s.hosts.is_empty() && s.hostaddrs.is_empty() {
        return Err(ConnStrError::Missing { key: "host" });
    }
    let hosts = s.hosts.len().max(s.hostaddrs.len());
    if !s.hosts.is_empty() && !s.hostaddrs.is_empty() && s.hosts.len() != s.hostaddrs.len() {
        return Err(ConnStrError::Missing {
            key: "hostaddr for every host",
        });
    }
    if s.user.is_empty() {
        return Err(ConnStrError::Missing { key: "user" });
    }
    if s.ports.is_empty() {
        s.ports.push(DEFAULT_PORT);
    }
    if s.ports.len() > 1 && s.ports.len() != hosts {
        return Err(ConnStrError::PortCount {
            hosts,
            ports: s.ports.len(),
        });
    }
    Ok(s)
}

fn non_empty(v: &str) -> Option<String> {
    (!v.is_empty()).then(|| v.to_owned())
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// Comma-separated hosts; each a name, an IPv4 or `[IPv6]` address, or a `/socket/dir`.
fn split_hosts(e: &Entry) -> Result<Vec<String>, ConnStrError> {
    e.value
        .split(',')
        .map(|h| {
            let h = h.trim();
            let h = h
                .strip_prefix('[')
                .and_then(|x| x.strip_suffix(']'))
                .unwrap_or(h);
            let ok = if h.starts_with('/') {
                !h.contains('\0')
            } else {
                !h.is_empty()
                    && h.chars().all(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%')
                    })
            };
            if ok {
                Ok(h.to_owned())
            } else {
                Err(invalid(
                    e,
                    "host names, IP addresses or socket directories separated by commas",
                ))
            }
        })
        .collect()
}

fn parse_ports(e: &Entry) -> Result<Vec<u16>, ConnStrError> {
    e.value
        .split(',')
        .map(|p| match p.trim().parse::<u16>() {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(invalid(
                e,
                "port numbers from 1 to 65535 separated by commas",
            )),
        })
        .collect()
}

/// Splits `h1:5433,[::1]:5434,h3` into hosts and their optional ports (text, unparsed).
fn split_host_ports(spec: &str) -> (Vec<String>, Vec<Option<String>>) {
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

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// Percent-encodes everything but unreserved URL characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
