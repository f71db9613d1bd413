//! TLS for PostgreSQL sessions: a rustls client config per [`TlsMode`], on the ring provider.
//!
//! - `verify-full`: the chain must lead to the CA (the Secret's `ca.crt`, or the Mozilla roots from
//!   `webpki-roots` when there is none) and the certificate must name the host.
//! - `verify-ca`: the chain must lead to the CA; the host name is not checked.
//! - `require` and `prefer`: encrypted, but the certificate is not verified, exactly like libpq.
//!   This protects against passive eavesdropping only, not against an active man in the middle.
//!   As in libpq, `require` with a CA bundle behaves like `verify-ca`.
//!
//! The provider is passed to every config explicitly; nothing installs a process-wide default.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::TlsMode;

/// Why a TLS client config could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA bundle is not valid PEM.
    #[error("reading the ca bundle failed")]
    ReadCaBundle(#[source] rustls::pki_types::pem::Error),
    /// The CA bundle holds no certificate.
    #[error("the ca bundle holds no certificate")]
    EmptyCaBundle,
    /// A certificate in the CA bundle was refused as a trust anchor.
    #[error("adding certificate {index} of the ca bundle failed")]
    AddCaCertificate {
        /// Zero-based position in the bundle.
        index: usize,
        /// Why rustls refused it.
        #[source]
        source: rustls::Error,
    },
    /// The provider supports none of the default protocol versions.
    #[error("choosing tls protocol versions failed")]
    ProtocolVersions(#[source] rustls::Error),
    /// The hostname-checking verifier could not be built.
    #[error("building the certificate verifier failed")]
    BuildVerifier(#[source] rustls::client::VerifierBuilderError),
}

/// How much of the server certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Nothing: encryption only (`require`, `prefer`).
    None,
    /// The chain, not the host name (`verify-ca`).
    Chain,
    /// The chain and the host name (`verify-full`).
    Full,
}

impl Verification {
    /// What a mode checks; `require` with a CA bundle checks the chain, as libpq does.
    pub fn for_mode(mode: TlsMode, has_ca: bool) -> Option<Self> {
        match mode {
            TlsMode::Disable => None,
            TlsMode::Prefer => Some(Verification::None),
            TlsMode::Require if has_ca => Some(Verification::Chain),
            TlsMode::Require => Some(Verification::None),
            TlsMode::VerifyCa => Some(Verification::Chain),
            TlsMode::VerifyFull => Some(Verification::Full),
        }
    }
}

/// The driver's TLS connector for `mode`, or `None` for `disable`.
///
/// # Errors
/// [`TlsError`] when the CA bundle is unusable.
pub fn connector(
    mode: TlsMode,
    ca_pem: Option<&[u8]>,
) -> Result<Option<MakeRustlsConnect>, TlsError> {
    match Verification::for_mode(mode, ca_pem.is_some()) {
        None => Ok(None),
        Some(verification) => Ok(Some(MakeRustlsConnect::new(client_config(
            verification,
            ca_pem,
        )?))),
    }
}

/// A rustls client config on the ring provider that checks what `verification` says.
///
/// # Errors
/// [`TlsError`] when the CA bundle is unusable.
pub fn client_config(
    verification: Verification,
    ca_pem: Option<&[u8]>,
) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(TlsError::ProtocolVersions)?;
    let builder = match verification {
        Verification::None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(WithoutHostName {
                roots: None,
                provider,
            })),
        Verification::Chain => {
            let roots = Some(Arc::new(roots(ca_pem)?));
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(WithoutHostName { roots, provider }))
        }
        Verification::Full => {
            let verifier =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca_pem)?), provider)
                    .build()
                    .map_err(TlsError::BuildVerifier)?;
            builder.with_webpki_verifier(verifier)
        }
    };
    Ok(builder.with_no_client_auth())
}

/// Trust anchors from a PEM bundle, or the Mozilla roots when there is none.
fn roots(ca_pem: Option<&[u8]>) -> Result<RootCertStore, TlsError> {
    let Some(pem) = ca_pem else {
        return Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::ReadCaBundle)?;
    if certs.is_empty() {
        return Err(TlsError::EmptyCaBundle);
    }
    let mut store = RootCertStore::empty();
    for (index, cert) in certs.into_iter().enumerate() {
        store
            .add(cert)
            .map_err(|source| TlsError::AddCaCertificate { index, source })?;
    }
    Ok(store)
}

/// Never checks the host name; always checks the handshake signatures; checks the chain only when
/// it has roots. Without roots it is libpq's `require`/`prefer` (encryption only), with roots
/// libpq's `verify-ca`.
#[derive(Debug)]
struct WithoutHostName {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for WithoutHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verification_level_builds_a_config() {
        for v in [Verification::None, Verification::Chain, Verification::Full] {
            assert!(client_config(v, None).is_ok(), "{v:?}");
        }
    }

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        let err = client_config(Verification::Full, Some(b"not pem")).unwrap_err();
        assert!(matches!(err, TlsError::EmptyCaBundle), "{err}");
    }

    #[test]
    fn a_pem_bundle_with_a_certificate_becomes_the_trust_anchors() {
        let pem = include_bytes!("../../tests/data/test-ca.pem");
        let mut bundle = pem.to_vec();
        bundle.extend_from_slice(pem);
        assert_eq!(roots(Some(&bundle)).unwrap().roots.len(), 2);
        assert!(client_config(Verification::Full, Some(pem)).is_ok());
    }

    #[test]
    fn a_broken_pem_block_is_refused_as_unreadable() {
        let broken = b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
        let err = client_config(Verification::Full, Some(broken)).unwrap_err();
        assert!(matches!(err, TlsError::ReadCaBundle(_)), "{err}");
    }

    #[test]
    fn disable_needs_no_connector_and_require_with_a_ca_checks_the_chain() {
        assert!(connector(TlsMode::Disable, None).unwrap().is_none());
        assert_eq!(
            Verification::for_mode(TlsMode::Require, true),
            Some(Verification::Chain)
        );
        assert_eq!(
            Verification::for_mode(TlsMode::Require, false),
            Some(Verification::None)
        );
    }
}
