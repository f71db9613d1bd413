//! [`ConnectionSettings`]: the parsed settings, their getters, the driver config built from them
//! and the redacted rendering used in logs.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use super::{ChannelBinding, Password, RootCert, TargetSession, TlsMode, TlsVersion};

/// The port used when a string names none.
pub(super) const DEFAULT_PORT: u16 = 5432;

/// Everything needed to open a session, parsed from any of the three forms.
///
/// `Debug` and `Display` never show the password; `Display` is [`ConnectionSettings::redacted`].
/// `Hash` covers everything, the password included: it is what tells two targets apart (see
/// [`crate::db::Connection`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectionSettings {
    pub(super) hosts: Vec<String>,
    pub(super) hostaddrs: Vec<IpAddr>,
    pub(super) ports: Vec<u16>,
    pub(super) dbname: Option<String>,
    pub(super) user: String,
    pub(super) password: Option<Password>,
    pub(super) tls_mode: TlsMode,
    pub(super) connect_timeout: Option<Duration>,
    pub(super) application_name: Option<String>,
    pub(super) options: Option<String>,
    pub(super) target_session: TargetSession,
    pub(super) root_cert: Option<RootCert>,
    pub(super) client_cert: Option<String>,
    pub(super) client_key: Option<String>,
    pub(super) send_client_cert: bool,
    pub(super) channel_binding: ChannelBinding,
    pub(super) tls_versions: (TlsVersion, TlsVersion),
    pub(super) sni: bool,
}

impl ConnectionSettings {
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
    /// Where the CA bundle comes from when the string names one (`sslrootcert`); `None`: the
    /// Secret's `ca.crt` if it has one, else the Mozilla roots.
    pub fn root_cert(&self) -> Option<&RootCert> {
        self.root_cert.as_ref()
    }
    /// The name of the client certificate (`sslcert`): a key of the Secret (a file for
    /// `migrate --database-url`).
    pub fn client_cert(&self) -> Option<&str> {
        self.client_cert.as_deref()
    }
    /// The name of the client certificate's private key (`sslkey`).
    pub fn client_key(&self) -> Option<&str> {
        self.client_key.as_deref()
    }
    /// Whether the client certificate is offered when the server asks for one (`sslcertmode`
    /// other than `disable`).
    pub fn send_client_cert(&self) -> bool {
        self.send_client_cert
    }
    /// Whether SCRAM authentication is bound to the TLS channel.
    pub fn channel_binding(&self) -> ChannelBinding {
        self.channel_binding
    }
    /// The oldest and newest TLS versions allowed (`ssl_min_protocol_version`,
    /// `ssl_max_protocol_version`).
    pub fn tls_versions(&self) -> (TlsVersion, TlsVersion) {
        self.tls_versions
    }
    /// Whether the host name is sent in the TLS handshake (`sslsni`).
    pub fn sni(&self) -> bool {
        self.sni
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
        config.channel_binding(match self.channel_binding {
            ChannelBinding::Disable => tokio_postgres::config::ChannelBinding::Disable,
            ChannelBinding::Prefer => tokio_postgres::config::ChannelBinding::Prefer,
            ChannelBinding::Require => tokio_postgres::config::ChannelBinding::Require,
        });
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
        if self.channel_binding != ChannelBinding::default() {
            out.push_str("&channel_binding=");
            out.push_str(self.channel_binding.as_str());
        }
        out
    }
}

impl fmt::Display for ConnectionSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
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
