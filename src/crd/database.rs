//! How a BoxTable reaches its database: the Secret (one key with a connection string, or separate
//! keys with its parts), the connection parameters a spec may add, and the patterns Secret names
//! and keys follow.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How to reach the database.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.parameters) || has(self.secretRef.keys)",
    "message": "parameters complete a connection read from separate keys (secretRef.keys); a connection string (secretRef.key) carries its own parameters"
}]))]
pub struct DatabaseSpec {
    /// The Secret, in the BoxTable's own namespace, holding the connection: one key with a
    /// connection string (`key`, the default), or separate keys with its parts (`keys`). The
    /// operator watches it: rotating the password there retries at once.
    pub secret_ref: SecretKeyRef,
    /// Connection parameters (libpq keywords) for a connection read from separate keys
    /// (`secretRef.keys`), which carry no parameters of their own, for example
    /// `{sslmode: require, channel_binding: require}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Boxed: most BoxTables never set it, and the watch cache keeps every BoxTable (see
    // benches/cache_footprint.rs).
    pub parameters: Option<Box<ConnectionParameters>>,
}

/// The libpq parameters a connection made of separate Secret keys may set (the parts themselves,
/// host, user, password..., come from the Secret). Each is checked at apply time.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ConnectionParameters {
    /// How TLS is used: `disable`, `allow`, `prefer` (libpq's default), `require`, `verify-ca` or
    /// `verify-full`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sslmode: Option<SslModeParameter>,
    /// Whether SCRAM authentication is bound to the TLS channel: `disable`, `prefer` (default)
    /// or `require`, which refuses any server that does not authenticate with SCRAM over TLS and
    /// so defeats a man in the middle even without certificate verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_binding: Option<ChannelBindingParameter>,
    /// The key of the Secret holding the CA bundle (PEM) that verifies the server, or `system`
    /// for the public roots (with `verify-full`). Without it, the Secret's `ca.crt` if present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub sslrootcert: Option<String>,
    /// The key of the Secret holding the client certificate (PEM), offered when the server asks
    /// for one; with `sslkey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub sslcert: Option<String>,
    /// The key of the Secret holding the client certificate's private key (unencrypted PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub sslkey: Option<String>,
    /// `allow` (default): offer the client certificate when the server asks; `disable`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sslcertmode: Option<SslCertModeParameter>,
    /// The oldest TLS version allowed: `TLSv1.2` (default) or `TLSv1.3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_min_protocol_version: Option<TlsVersionParameter>,
    /// The newest TLS version allowed: `TLSv1.2` or `TLSv1.3` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_max_protocol_version: Option<TlsVersionParameter>,
    /// Seconds to wait for each host to connect, at most 60; 0 or unset: 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 60))]
    pub connect_timeout: Option<u32>,
    /// Which server is acceptable among several hosts: `any` (default), `read-write` or
    /// `read-only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_session_attrs: Option<TargetSessionParameter>,
}

impl ConnectionParameters {
    /// Each parameter set, as a libpq keyword and its value.
    pub fn keywords(&self) -> Vec<(&'static str, String)> {
        let text = |value: Option<&'static str>| value.map(str::to_owned);
        [
            ("sslmode", text(self.sslmode.map(SslModeParameter::as_str))),
            (
                "channel_binding",
                text(self.channel_binding.map(ChannelBindingParameter::as_str)),
            ),
            ("sslrootcert", self.sslrootcert.clone()),
            ("sslcert", self.sslcert.clone()),
            ("sslkey", self.sslkey.clone()),
            (
                "sslcertmode",
                text(self.sslcertmode.map(SslCertModeParameter::as_str)),
            ),
            (
                "ssl_min_protocol_version",
                text(
                    self.ssl_min_protocol_version
                        .map(TlsVersionParameter::as_str),
                ),
            ),
            (
                "ssl_max_protocol_version",
                text(
                    self.ssl_max_protocol_version
                        .map(TlsVersionParameter::as_str),
                ),
            ),
            (
                "connect_timeout",
                self.connect_timeout.map(|s| s.to_string()),
            ),
            (
                "target_session_attrs",
                text(
                    self.target_session_attrs
                        .map(TargetSessionParameter::as_str),
                ),
            ),
        ]
        .into_iter()
        .filter_map(|(keyword, value)| value.map(|value| (keyword, value)))
        .collect()
    }
}

/// Defines an enum of libpq parameter values, serialised in libpq's spelling.
macro_rules! libpq_values {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// The libpq spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }
    };
}

libpq_values!(
    /// `sslmode` values.
    SslModeParameter {
        /// Plain TCP.
        Disable = "disable",
        /// Read as `prefer`.
        Allow = "allow",
        /// TLS when the server offers it, else plain TCP.
        Prefer = "prefer",
        /// TLS; the certificate is not verified (unless a CA bundle is given).
        Require = "require",
        /// TLS; the chain is verified.
        VerifyCa = "verify-ca",
        /// TLS; the chain and the host name are verified.
        VerifyFull = "verify-full",
    }
);

libpq_values!(
    /// `channel_binding` values.
    ChannelBindingParameter {
        /// Never bind.
        Disable = "disable",
        /// Bind when the server can.
        Prefer = "prefer",
        /// Refuse to authenticate without binding.
        Require = "require",
    }
);

libpq_values!(
    /// `sslcertmode` values (`require` cannot be honoured, so it is not one of them).
    SslCertModeParameter {
        /// Never offer the client certificate.
        Disable = "disable",
        /// Offer it when the server asks.
        Allow = "allow",
    }
);

libpq_values!(
    /// The TLS versions the operator speaks.
    TlsVersionParameter {
        /// TLS 1.2.
        Tls12 = "TLSv1.2",
        /// TLS 1.3.
        Tls13 = "TLSv1.3",
    }
);

libpq_values!(
    /// `target_session_attrs` values.
    TargetSessionParameter {
        /// Any server.
        Any = "any",
        /// A server that accepts writes.
        ReadWrite = "read-write",
        /// A read-only server.
        ReadOnly = "read-only",
    }
);

/// Where in a Secret in the BoxTable's namespace the connection is: one key holding a connection
/// string, or separate keys holding its parts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.key) && has(self.keys))",
    "message": "key and keys are exclusive: key names the Secret key holding a connection string, keys the Secret keys holding its parts"
}]))]
pub struct SecretKeyRef {
    /// The Secret's name (a DNS subdomain, as every Secret name is), in the BoxTable's namespace.
    /// A missing Secret is reported as `SecretNotFound`.
    #[schemars(regex(pattern = SECRET_NAME_PATTERN), length(min = 1, max = 253))]
    pub name: String,
    /// The key in the Secret holding the connection string; default `connectionString` (when
    /// `keys` is not set). The value may be a URL
    /// (`postgres://user:pass@host:5432/db?sslmode=verify-full`), libpq keywords, or the Npgsql
    /// form Brighter applications use (`Host=...;Username=...`). `sslrootcert`, `sslcert` and
    /// `sslkey` in it name other keys of the same Secret holding PEM (a CA bundle, a client
    /// certificate, its key); without `sslrootcert`, an optional `ca.crt` key holds the CA
    /// bundle. Letters, digits, `-`, `_` and `.`, as every Secret key is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub key: Option<String>,
    /// Read the connection from separate keys instead of a connection string, as CloudNativePG's
    /// `<cluster>-app` and Crossplane's connection Secrets hold it: each field names the key
    /// holding that part (`keys: {}` takes the defaults; Crossplane: `{host: endpoint, user:
    /// username}`). Other settings go in `spec.database.parameters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Boxed: most BoxTables never set it, and the watch cache keeps every BoxTable (see
    // benches/cache_footprint.rs).
    pub keys: Option<Box<ConnectionKeys>>,
}

impl SecretKeyRef {
    /// The key holding the connection string (`key`, default `connectionString`).
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_SECRET_KEY)
    }
}

/// The Secret keys holding the parts of a connection.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionKeys {
    /// The key holding the host name or address; default `host`. Required in the Secret.
    #[serde(default = "default_host_key")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub host: String,
    /// The key holding the port; default `port`. Optional in the Secret (5432).
    #[serde(default = "default_port_key")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub port: String,
    /// The key holding the database name; default `dbname`. Optional in the Secret (the
    /// server takes the user's name).
    #[serde(default = "default_dbname_key")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub dbname: String,
    /// The key holding the user; default `user`. Required in the Secret.
    #[serde(default = "default_user_key")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub user: String,
    /// The key holding the password; default `password`. Optional in the Secret (for example
    /// with client certificates).
    #[serde(default = "default_password_key")]
    #[schemars(regex(pattern = SECRET_KEY_PATTERN), length(min = 1, max = 253))]
    pub password: String,
}

impl Default for ConnectionKeys {
    fn default() -> Self {
        Self {
            host: default_host_key(),
            port: default_port_key(),
            dbname: default_dbname_key(),
            user: default_user_key(),
            password: default_password_key(),
        }
    }
}

fn default_host_key() -> String {
    "host".to_owned()
}

fn default_port_key() -> String {
    "port".to_owned()
}

fn default_dbname_key() -> String {
    "dbname".to_owned()
}

fn default_user_key() -> String {
    "user".to_owned()
}

fn default_password_key() -> String {
    "password".to_owned()
}

/// What a Secret's name may be: an RFC 1123 DNS subdomain (lowercase alphanumerics, `-` and `.`).
pub const SECRET_NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// What a key in a Secret's data may be.
pub const SECRET_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";

/// The Secret key read when none is given.
pub const DEFAULT_SECRET_KEY: &str = "connectionString";
