//! The TLS the secured metrics server speaks: a self-signed certificate and key made in memory
//! at start (nothing written to disk, a new pair per process). It keeps scrapers' bearer tokens
//! from anyone listening on the network; nothing signs it, so scrapers skip verifying it and it
//! does not prove the server's identity.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

use super::TelemetryError;

/// A TLS acceptor presenting a new self-signed certificate for `localhost`, speaking HTTP/1.1.
///
/// # Errors
/// [`TelemetryError::Certificate`] when the key or certificate cannot be made.
pub fn self_signed() -> Result<TlsAcceptor, TelemetryError> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .map_err(|e| TelemetryError::Certificate(Box::new(e)))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TelemetryError::Certificate(Box::new(e)))?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .map_err(|e| TelemetryError::Certificate(Box::new(e)))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
