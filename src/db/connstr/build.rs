//! Turning a string into [`ConnectionSettings`]: the form is detected, its parser yields entries,
//! and the entries are checked per key and across keys (a host and a user are required, one port
//! or one per host, no trust with verification).

use std::net::IpAddr;
use std::time::Duration;

use super::entry::{Entry, Key};
use super::settings::DEFAULT_PORT;
use super::{
    ConnStrError, ConnectionSettings, Form, Password, TargetSession, TlsMode, form, keyword,
    npgsql, url,
};

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
                s.target_session = TargetSession::parse(v)
                    .ok_or_else(|| invalid(e, "any, read-write or read-only"))?;
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

fn invalid(entry: &Entry, expected: &'static str) -> ConnStrError {
    ConnStrError::InvalidValue {
        key: entry.key.name(),
        position: entry.position,
        expected,
    }
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
