//! The TLS and authentication keys of a connection string: each honoured (read into the
//! settings) or refused with [`ConnStrError::Unsupported`] saying why, never ignored.

use super::entry::{Entry, Key, invalid, non_empty, parse_bool};
use super::{ChannelBinding, ConnStrError, ConnectionSettings, RootCert, TlsVersion};

/// The TLS and authentication settings: each honoured, or refused naming why.
///
/// Longer than most: one arm per key, each saying in place why it is honoured or refused.
pub(super) fn apply(s: &mut ConnectionSettings, e: &Entry) -> Result<(), ConnStrError> {
    let v = e.value.trim();
    let unsupported = |why| ConnStrError::Unsupported {
        key: e.key.name(),
        at: e.at.clone(),
        why,
    };
    match e.key {
        Key::SslRootCert => {
            s.root_cert = match v {
                "" => None,
                "system" => Some(RootCert::System),
                name => Some(RootCert::Named(name.to_owned())),
            };
        }
        Key::SslCert => s.client_cert = non_empty(v),
        Key::SslKeyFile => s.client_key = non_empty(v),
        Key::SslPassword if !v.is_empty() => {
            return Err(unsupported(
                "an encrypted client key cannot be used: store the key unencrypted (PEM) and remove the key's password",
            ));
        }
        Key::SslCertMode => match v.to_ascii_lowercase().as_str() {
            "allow" => s.send_client_cert = true,
            "disable" => s.send_client_cert = false,
            "require" => {
                return Err(unsupported(
                    "the operator cannot tell whether the server asked for the client certificate; use allow (the default) and let the server require it (pg_hba cert or clientcert=verify-full)",
                ));
            }
            _ => return Err(invalid(e, "disable, allow or require")),
        },
        Key::SslMinProtocolVersion => match v.to_ascii_lowercase().as_str() {
            "" | "tlsv1" | "tlsv1.1" | "tlsv1.2" => s.tls_versions.0 = TlsVersion::Tls12,
            "tlsv1.3" => s.tls_versions.0 = TlsVersion::Tls13,
            _ => return Err(invalid(e, "TLSv1, TLSv1.1, TLSv1.2 or TLSv1.3")),
        },
        Key::SslMaxProtocolVersion => match v.to_ascii_lowercase().as_str() {
            "" | "tlsv1.3" => s.tls_versions.1 = TlsVersion::Tls13,
            "tlsv1.2" => s.tls_versions.1 = TlsVersion::Tls12,
            "tlsv1" | "tlsv1.1" => {
                return Err(unsupported(
                    "the operator speaks TLS 1.2 and 1.3 only; use TLSv1.2 or TLSv1.3",
                ));
            }
            _ => return Err(invalid(e, "TLSv1, TLSv1.1, TLSv1.2 or TLSv1.3")),
        },
        Key::SslSni => {
            s.sni = match v {
                "1" => true,
                "0" => false,
                _ => return Err(invalid(e, "0 or 1")),
            };
        }
        Key::SslCrl | Key::SslCrlDir if !v.is_empty() => {
            return Err(unsupported(
                "certificate revocation lists are not checked; remove it, or revoke by replacing the server's certificate and CA bundle",
            ));
        }
        Key::CheckCertificateRevocation
            if parse_bool(v).ok_or_else(|| invalid(e, "true or false"))? =>
        {
            return Err(unsupported(
                "certificate revocation is not checked; remove it, or revoke by replacing the server's certificate and CA bundle",
            ));
        }
        Key::ChannelBinding => {
            s.channel_binding =
                ChannelBinding::parse(v).ok_or_else(|| invalid(e, "disable, prefer or require"))?;
        }
        Key::RequireAuth if !v.is_empty() => {
            return Err(unsupported(
                "the operator's PostgreSQL driver cannot restrict which authentication method the server asks for; remove it (channel_binding=require insists on SCRAM authentication bound to TLS)",
            ));
        }
        Key::RequirePeer if !v.is_empty() => {
            return Err(unsupported(
                "the operator does not check the user running a server behind a Unix socket; remove it",
            ));
        }
        Key::GssEncMode => match v.to_ascii_lowercase().as_str() {
            "disable" | "prefer" => {}
            "require" => {
                return Err(unsupported(
                    "GSSAPI encryption is not available; use TLS (sslmode) instead",
                ));
            }
            _ => return Err(invalid(e, "disable, prefer or require")),
        },
        _ => {}
    }
    Ok(())
}
