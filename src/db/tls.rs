//! TLS for PostgreSQL sessions: a rustls client config per [`TlsMode`], on the ring provider.
//!
//! - `verify-full`: the chain must lead to the CA (`sslrootcert`, else the Secret's `ca.crt`, or
//!   the Mozilla roots from `webpki-roots` when there is none or `sslrootcert=system`) and the
//!   certificate must name the host.
//! - `verify-ca`: the chain must lead to the CA; the host name is not checked.
//! - `require` and `prefer`: encrypted, but the certificate is not verified, exactly like libpq.
//!   This protects against passive eavesdropping only, not against an active man in the middle
//!   (`channel_binding=require` does, with SCRAM authentication). As in libpq, `require` with a
//!   CA bundle behaves like `verify-ca`.
//!
//! A client certificate (`sslcert`, `sslkey`) is offered when the server asks for one, unless
//! `sslcertmode=disable`. `ssl_min_protocol_version` and `ssl_max_protocol_version` narrow the
//! versions (TLS 1.2 and 1.3), `sslsni=0` leaves the host name out of the handshake.
//!
//! The provider is passed to every config explicitly; nothing installs a process-wide default.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{Connection, RootCert, TlsMode, TlsVersion};

/// Why a TLS client config could not be built. Nothing here quotes a private key.
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
    /// The client certificate (`sslcert`) is not valid PEM.
    #[error("reading the client certificate (sslcert) failed")]
    ReadClientCertificate(#[source] rustls::pki_types::pem::Error),
    /// The client certificate (`sslcert`) holds no certificate.
    #[error("the client certificate (sslcert) holds no certificate")]
    EmptyClientCertificate,
    /// The client key (`sslkey`) holds no unencrypted PEM private key.
    #[error(
        "the client key (sslkey) holds no unencrypted private key in PEM (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)"
    )]
    ReadClientKey,
    /// rustls refused the client certificate and key (a key that does not match, an algorithm
    /// it does not know).
    #[error("the client certificate (sslcert) and key (sslkey) cannot be used together")]
    ClientAuth(#[source] rustls::Error),
    /// The provider supports none of the protocol versions asked for.
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

/// Everything a TLS client config is built from.
#[derive(Clone, Copy)]
pub struct Setup<'a> {
    /// How much of the server certificate is checked.
    pub verification: Verification,
    /// The CA bundle (PEM); `None`: the Mozilla roots.
    pub ca_pem: Option<&'a [u8]>,
    /// The client certificate chain and its private key (PEM), offered when the server asks.
    pub client: Option<(&'a [u8], &'a [u8])>,
    /// The oldest and newest TLS versions allowed.
    pub versions: (TlsVersion, TlsVersion),
    /// Whether the host name is sent (SNI).
    pub sni: bool,
}

impl<'a> Setup<'a> {
    /// Default TLS (1.2 and 1.3, SNI, no client certificate) checking what `verification` says.
    pub fn new(verification: Verification, ca_pem: Option<&'a [u8]>) -> Self {
        Self {
            verification,
            ca_pem,
            client: None,
            versions: (TlsVersion::Tls12, TlsVersion::Tls13),
            sni: true,
        }
    }
}

/// The driver's TLS connector for `connection`, or `None` for `disable`.
///
/// # Errors
/// [`TlsError`] when the CA bundle, the client certificate or its key is unusable.
pub fn connector(connection: &Connection) -> Result<Option<MakeRustlsConnect>, TlsError> {
    let settings = connection.settings();
    let files = connection.files();
    // `sslrootcert=system` verifies against the Mozilla roots, whatever the Secret holds.
    let ca_pem = match settings.root_cert() {
        Some(RootCert::System) => None,
        _ => files.root.as_deref(),
    };
    let Some(verification) = Verification::for_mode(settings.tls_mode(), ca_pem.is_some()) else {
        return Ok(None);
    };
    let client = match (&files.client_cert, &files.client_key) {
        (Some(cert), Some(key)) if settings.send_client_cert() => {
            Some((cert.as_slice(), key.as_slice()))
        }
        _ => None,
    };
    let setup = Setup {
        verification,
        ca_pem,
        client,
        versions: settings.tls_versions(),
        sni: settings.sni(),
    };
    Ok(Some(MakeRustlsConnect::new(client_config(setup)?)))
}

/// A rustls client config on the ring provider as `setup` says.
///
/// # Errors
/// [`TlsError`] when the CA bundle, the client certificate or its key is unusable.
pub fn client_config(setup: Setup<'_>) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (setup.versions.0..=setup.versions.1).contains(v))
    .map(|(_, version)| version)
    .collect();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(TlsError::ProtocolVersions)?;
    let builder = match setup.verification {
        Verification::None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(WithoutHostName {
                roots: None,
                provider,
            })),
        Verification::Chain => {
            let roots = Some(Arc::new(roots(setup.ca_pem)?));
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(WithoutHostName { roots, provider }))
        }
        Verification::Full => {
            let verifier = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(setup.ca_pem)?),
                provider,
            )
            .build()
            .map_err(TlsError::BuildVerifier)?;
            builder.with_webpki_verifier(verifier)
        }
    };
    let mut config = match setup.client {
        None => builder.with_no_client_auth(),
        Some((cert_pem, key_pem)) => {
            let (chain, key) = client_identity(cert_pem, key_pem)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(TlsError::ClientAuth)?
        }
    };
    config.enable_sni = setup.sni;
    Ok(config)
}

/// The client certificate chain and private key from their PEM.
fn client_identity(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::ReadClientCertificate)?;
    if chain.is_empty() {
        return Err(TlsError::EmptyClientCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsError::ReadClientKey)?;
    Ok((chain, key))
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

    fn config(verification: Verification, ca_pem: Option<&[u8]>) -> Result<ClientConfig, TlsError> {
        client_config(Setup::new(verification, ca_pem))
    }

    #[test]
    fn every_verification_level_builds_a_config() {
        for v in [Verification::None, Verification::Chain, Verification::Full] {
            assert!(config(v, None).is_ok(), "{v:?}");
        }
    }

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        let err = config(Verification::Full, Some(b"not pem")).unwrap_err();
        assert!(matches!(err, TlsError::EmptyCaBundle), "{err}");
    }

    #[test]
    fn a_client_key_that_is_not_pem_is_refused_without_quoting_it() {
        let pem = include_bytes!("../../tests/data/test-ca.pem");
        let setup = Setup {
            client: Some((pem, b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nc2VjcmV0\n-----END ENCRYPTED PRIVATE KEY-----\n")),
            ..Setup::new(Verification::None, None)
        };
        let err = client_config(setup).unwrap_err();
        assert!(matches!(err, TlsError::ReadClientKey), "{err}");
        assert!(!format!("{err} {err:?}").contains("c2VjcmV0"));
    }

    #[test]
    fn a_pem_bundle_with_a_certificate_becomes_the_trust_anchors() {
        let pem = include_bytes!("../../tests/data/test-ca.pem");
        let mut bundle = pem.to_vec();
        bundle.extend_from_slice(pem);
        assert_eq!(roots(Some(&bundle)).unwrap().roots.len(), 2);
        assert!(config(Verification::Full, Some(pem)).is_ok());
    }

    #[test]
    fn a_broken_pem_block_is_refused_as_unreadable() {
        let broken = b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
        let err = config(Verification::Full, Some(broken)).unwrap_err();
        assert!(matches!(err, TlsError::ReadCaBundle(_)), "{err}");
    }

    #[test]
    fn disable_needs_no_connector_and_require_with_a_ca_checks_the_chain() {
        let disabled = Connection::parse("host=db user=u sslmode=disable").unwrap();
        assert!(connector(&disabled).unwrap().is_none());
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
