//! Turning a string (or separate parts) into [`ConnectionSettings`]: the form is detected, its
//! parser yields entries, and the entries are checked per key ([`apply`]) and across keys
//! ([`check`]): a host and a user are required, one port or one per host, at most
//! [`MAX_HOSTS`] hosts and a connect timeout of at most [`MAX_CONNECT_TIMEOUT`], no trust with
//! verification, and no security setting the operator would have to ignore.

use std::net::IpAddr;
use std::time::Duration;

use super::entry::{At, Entry, Key, invalid, non_empty, parse_bool};
use super::settings::DEFAULT_PORT;
use super::{
    ChannelBinding, ConnStrError, ConnectionSettings, Form, Password, RootCert, TargetSession,
    TlsMode, TlsVersion, form, keyword, npgsql, security, url,
};

/// The most hosts a connection string may list. Each is tried in turn with the whole connect
/// timeout, so the hosts bound how long one pass can spend connecting.
pub const MAX_HOSTS: usize = 16;
/// The longest connect timeout a connection string may ask for (per host).
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

impl ConnectionSettings {
    /// Parses a URL, libpq keyword or Npgsql connection string (the form is detected).
    ///
    /// # Errors
    /// [`ConnStrError`] naming the position or key that is wrong, never the text.
    pub fn parse(input: &str) -> Result<Self, ConnStrError> {
        if input.trim().is_empty() {
            return Err(ConnStrError::Empty);
        }
        let entries = match form::detect(input) {
            Form::Url => url::parse(input)?,
            Form::Keyword => keyword::parse(input)?,
            Form::Npgsql => npgsql::parse(input)?,
        };
        build(entries)
    }

    /// Builds settings from separate parts, each a libpq keyword (`host`, `sslmode`...) with its
    /// value and where it was read (a Secret key, `spec.database.parameters`). Later parts
    /// override earlier ones; the parts are checked as a connection string's entries are.
    ///
    /// # Errors
    /// [`ConnStrError`] naming the key and where it was read, never the value;
    /// [`ConnStrError::UnknownParameter`] for a name libpq does not define or the operator
    /// ignores.
    pub fn from_parts<'a>(
        parts: impl IntoIterator<Item = (&'a str, &'a str, At)>,
    ) -> Result<Self, ConnStrError> {
        let entries = parts
            .into_iter()
            .map(|(name, value, at)| match keyword::libpq_key(name) {
                Some(Some(key)) => Ok(Entry {
                    key,
                    value: value.to_owned(),
                    at,
                }),
                _ => Err(ConnStrError::UnknownParameter {
                    name: name.to_owned(),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        build(entries)
    }
}

/// What the entries set besides [`ConnectionSettings`] itself, checked once all are read.
#[derive(Default)]
struct Extra {
    trust_server_certificate: bool,
}

/// Validates the entries of any form (later entries override earlier ones) into settings.
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
        root_cert: None,
        client_cert: None,
        client_key: None,
        send_client_cert: true,
        channel_binding: ChannelBinding::default(),
        tls_versions: (TlsVersion::Tls12, TlsVersion::Tls13),
        sni: true,
    };
    let mut extra = Extra::default();
    for e in &entries {
        apply(&mut s, &mut extra, e)?;
    }
    check(&mut s, &extra)?;
    Ok(s)
}

/// Reads one entry into the settings, refusing a value it cannot use or a security setting it
/// cannot honour.
fn apply(s: &mut ConnectionSettings, extra: &mut Extra, e: &Entry) -> Result<(), ConnStrError> {
    let v = e.value.as_str();
    match e.key {
        Key::Host => s.hosts = split_hosts(e)?,
        Key::HostAddr => {
            count_hosts(v)?;
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
            let secs: u64 = v
                .trim()
                .parse()
                .ok()
                .filter(|secs| *secs <= MAX_CONNECT_TIMEOUT.as_secs())
                .ok_or_else(|| invalid(e, "whole seconds from 0 to 60"))?;
            s.connect_timeout = (secs > 0).then(|| Duration::from_secs(secs));
        }
        Key::ApplicationName => s.application_name = non_empty(v),
        Key::Options => s.options = non_empty(v),
        Key::TargetSession => {
            s.target_session = TargetSession::parse(v)
                .ok_or_else(|| invalid(e, "any, read-write or read-only"))?;
        }
        Key::TrustServerCertificate => {
            extra.trust_server_certificate =
                parse_bool(v).ok_or_else(|| invalid(e, "true or false"))?;
        }
        _ => security::apply(s, e)?,
    }
    Ok(())
}

/// The checks across keys, once every entry is read.
fn check(s: &mut ConnectionSettings, extra: &Extra) -> Result<(), ConnStrError> {
    let verifying = matches!(s.tls_mode, TlsMode::VerifyCa | TlsMode::VerifyFull);
    if extra.trust_server_certificate && verifying {
        return Err(ConnStrError::TrustWithVerification { mode: s.tls_mode });
    }
    let incompatible = |why| Err(ConnStrError::Incompatible { why });
    if s.channel_binding == ChannelBinding::Require && s.tls_mode == TlsMode::Disable {
        return incompatible(
            "channel_binding=require needs TLS: set sslmode to prefer, require, verify-ca or verify-full",
        );
    }
    match &s.root_cert {
        Some(RootCert::System) if s.tls_mode != TlsMode::VerifyFull => {
            return incompatible(
                "sslrootcert=system checks the server against public roots, which only means something with its host name: set sslmode to verify-full",
            );
        }
        Some(RootCert::Named(_)) if matches!(s.tls_mode, TlsMode::Disable | TlsMode::Prefer) => {
            return incompatible(
                "sslrootcert names the CA that verifies the server, which sslmode disable or prefer never does: set sslmode to require, verify-ca or verify-full",
            );
        }
        _ => {}
    }
    if s.client_cert.is_some() != s.client_key.is_some() {
        return incompatible(
            "sslcert and sslkey name the client certificate and its private key: give both",
        );
    }
    if s.client_cert.is_some() && s.tls_mode == TlsMode::Disable {
        return incompatible(
            "sslcert is sent in the TLS handshake, which sslmode=disable never makes: set sslmode to require, verify-ca or verify-full",
        );
    }
    if s.tls_versions.0 > s.tls_versions.1 {
        return incompatible("ssl_min_protocol_version is above ssl_max_protocol_version");
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
    Ok(())
}

/// Refuses a list of more than [`MAX_HOSTS`] hosts before anything is made of them.
fn count_hosts(list: &str) -> Result<(), ConnStrError> {
    let hosts = list.split(',').count();
    if hosts > MAX_HOSTS {
        return Err(ConnStrError::TooManyHosts {
            hosts,
            max: MAX_HOSTS,
        });
    }
    Ok(())
}

/// Comma-separated hosts; each a name, an IPv4 or `[IPv6]` address, or a `/socket/dir`.
fn split_hosts(e: &Entry) -> Result<Vec<String>, ConnStrError> {
    count_hosts(&e.value)?;
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
