//! The TLS and authentication settings of a connection, against a private PostgreSQL that offers
//! TLS with a certificate from a private CA and admits roles by client certificate (`hostssl ...
//! cert`), by SCRAM password, or both (see `support::reliability::cluster`): client certificates,
//! `channel_binding`, the CA `sslrootcert` names and the TLS versions, each read from a Secret
//! the way the controller and `migrate` read it.

use boxtable_operator::crd::{
    ChannelBindingParameter, ConnectionKeys, ConnectionParameters, DatabaseSpec, SecretKeyRef,
    SslCertModeParameter, SslModeParameter,
};
use boxtable_operator::db::{ConnectError, Session};
use boxtable_operator::pass::source::{self, SourceError};
use boxtable_operator::reason::Reason;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use crate::support;
use crate::support::reliability::cluster::{Cluster, Pki, SCRAM_PASSWORD};

/// A Secret `db` holding `pairs`.
fn secret(pairs: &[(&str, &[u8])]) -> Secret {
    let mut secret = Secret::default();
    secret.metadata.name = Some("db".to_owned());
    secret.metadata.namespace = Some("shop".to_owned());
    secret.data = Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
            .collect(),
    );
    secret
}

/// A Secret `db` with separate keys for database `postgres` on 127.0.0.1:`port` as `user`, and
/// the keys in `more`.
fn keys_secret(port: u16, user: &str, more: &[(&str, &[u8])]) -> Secret {
    let port = port.to_string();
    let mut pairs: Vec<(&str, &[u8])> = vec![
        ("host", b"127.0.0.1"),
        ("port", port.as_bytes()),
        ("dbname", b"postgres"),
        ("user", user.as_bytes()),
    ];
    pairs.extend_from_slice(more);
    secret(&pairs)
}

/// `spec.database` reading the connection string under `connectionString`.
fn string_spec() -> DatabaseSpec {
    DatabaseSpec {
        secret_ref: SecretKeyRef {
            name: "db".to_owned(),
            key: None,
            keys: None,
        },
        parameters: None,
    }
}

/// `spec.database` reading separate keys (the defaults) with `parameters`.
fn keys_spec(parameters: ConnectionParameters) -> DatabaseSpec {
    DatabaseSpec {
        secret_ref: SecretKeyRef {
            name: "db".to_owned(),
            key: None,
            keys: Some(Box::new(ConnectionKeys::default())),
        },
        parameters: Some(Box::new(parameters)),
    }
}

/// A session opened with what `secret` gives for `spec`.
async fn open(secret: &Secret, spec: &DatabaseSpec) -> Result<Session, ConnectError> {
    let connection = source::connection(secret, spec).unwrap();
    Session::connect(&connection, "boxtable-operator-test").await
}

async fn open_string(
    connection_string: &str,
    files: &[(&str, &[u8])],
) -> Result<Session, ConnectError> {
    let mut pairs = vec![("connectionString", connection_string.as_bytes())];
    pairs.extend_from_slice(files);
    open(&secret(&pairs), &string_spec()).await
}

/// The error opening a session with `connection_string` (and `files`) fails with.
async fn refusal(connection_string: &str, files: &[(&str, &[u8])]) -> ConnectError {
    open_string(connection_string, files)
        .await
        .err()
        .expect("the connection is refused")
}

/// A private primary admitting clients by certificates its own CA (`pki`) issues and by SCRAM
/// password, and the port it listens on.
async fn server_admitting_certificates_and_scram() -> (Pki, Cluster, u16) {
    let pki = Pki::new("boxtable-test-ca");
    let cluster = Cluster::primary_with_client_auth(&pki).await;
    let port = cluster.port;
    (pki, cluster, port)
}

/// The session's TLS as the server sees it: the protocol version and the client certificate's
/// subject.
async fn tls_of(session: &Session) -> (String, Option<String>) {
    let row = session
        .client()
        .query_one(
            "SELECT version, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn a_client_certificate_named_in_the_secret_admits_a_role_the_server_admits_by_certificate() {
    let (pki, _cluster, port) = server_admitting_certificates_and_scram().await;
    let ca = pki.ca();
    let (cert, key) = pki.client("bt_cert");
    let files: [(&str, &[u8]); 3] = [("root.pem", &ca), ("tls.crt", &cert), ("tls.key", &key)];

    for connection_string in [
        format!(
            "postgres://bt_cert@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert=root.pem&sslcert=tls.crt&sslkey=tls.key"
        ),
        format!(
            "Host=127.0.0.1;Port={port};Username=bt_cert;Database=postgres;SSL Mode=VerifyFull;Root Certificate=root.pem;SSL Certificate=tls.crt;SSL Key=tls.key"
        ),
    ] {
        let session = open_string(&connection_string, &files).await.unwrap();
        let (_, subject) = tls_of(&session).await;
        assert_eq!(
            subject.as_deref(),
            Some("/CN=bt_cert"),
            "{connection_string}"
        );
    }

    // A kubernetes.io/tls Secret read as separate keys: ca.crt verifies the server, tls.crt and
    // tls.key are named by the parameters.
    let parts = keys_secret(
        port,
        "bt_cert",
        &[("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)],
    );
    let mtls = ConnectionParameters {
        sslmode: Some(SslModeParameter::VerifyFull),
        sslcert: Some("tls.crt".to_owned()),
        sslkey: Some("tls.key".to_owned()),
        ..ConnectionParameters::default()
    };
    let session = open(&parts, &keys_spec(mtls.clone())).await.unwrap();
    assert_eq!(tls_of(&session).await.1.as_deref(), Some("/CN=bt_cert"));

    // Not offered (none named, or sslcertmode=disable): the server refuses the role.
    let without = ConnectionParameters {
        sslcertmode: Some(SslCertModeParameter::Disable),
        ..mtls
    };
    let plain = format!(
        "postgres://bt_cert@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert=root.pem"
    );
    for err in [
        refusal(&plain, &files).await,
        open(&parts, &keys_spec(without)).await.err().unwrap(),
    ] {
        assert!(matches!(err, ConnectError::Authenticate { .. }), "{err:?}");
        assert_eq!(err.reason(), Reason::AuthenticationFailed);
        assert!(
            boxtable_operator::report::chain(&err)
                .contains("connection requires a valid client certificate"),
            "{}",
            boxtable_operator::report::chain(&err)
        );
    }

    // A certificate from a CA the server does not trust is refused in the handshake.
    let rogue = Pki::new("boxtable-rogue-ca");
    let (rogue_cert, rogue_key) = rogue.client("bt_cert");
    let err = refusal(
        &format!("{plain}&sslcert=tls.crt&sslkey=tls.key"),
        &[
            ("root.pem", &ca),
            ("tls.crt", &rogue_cert),
            ("tls.key", &rogue_key),
        ],
    )
    .await;
    assert!(
        matches!(
            err,
            ConnectError::ClientCertificateRefused { offered: true, .. }
        ),
        "{err:?}"
    );
    assert_eq!(err.reason(), Reason::TlsFailed);
    assert_eq!(
        err.to_string(),
        format!(
            "PostgreSQL at 127.0.0.1:{port} refused the client certificate (sslcert) in the TLS \
             handshake: it must be signed by a CA the server trusts (ssl_ca_file) and be valid now"
        )
    );
}

#[tokio::test]
async fn channel_binding_require_authenticates_only_with_scram_bound_to_tls() {
    let (pki, _cluster, port) = server_admitting_certificates_and_scram().await;
    let (cert, key) = pki.client("bt_both");
    let (cert_only, cert_only_key) = pki.client("bt_cert");
    let url = |user: &str, query: &str| {
        format!("postgres://{user}:{SCRAM_PASSWORD}@127.0.0.1:{port}/postgres?{query}")
    };

    // SCRAM over TLS binds, whether the certificate is verified or not.
    for connection_string in [
        url("bt_scram", "sslmode=require&channel_binding=require"),
        format!(
            "Host=127.0.0.1;Port={port};Username=bt_scram;Password={SCRAM_PASSWORD};Database=postgres;SSL Mode=Require;Channel Binding=Require"
        ),
        url("bt_scram", "sslmode=require&channel_binding=disable"),
    ] {
        open_string(&connection_string, &[]).await.unwrap();
    }
    let both = open_string(
        &url(
            "bt_both",
            "sslmode=require&channel_binding=require&sslcert=tls.crt&sslkey=tls.key",
        ),
        &[("tls.crt", &cert), ("tls.key", &key)],
    )
    .await
    .unwrap();
    assert_eq!(tls_of(&both).await.1.as_deref(), Some("/CN=bt_both"));

    // Authentication without SCRAM (trust, a certificate) cannot be bound: refused.
    let refused = [
        (
            url("postgres", "sslmode=require&channel_binding=require"),
            "postgres",
        ),
        (
            url(
                "bt_cert",
                "sslmode=require&channel_binding=require&sslcert=tls.crt&sslkey=tls.key",
            ),
            "bt_cert",
        ),
    ];
    for (connection_string, user) in refused {
        let err = refusal(
            &connection_string,
            &[("tls.crt", &cert_only), ("tls.key", &cert_only_key)],
        )
        .await;
        assert!(
            matches!(err, ConnectError::ChannelBindingUnused { .. }),
            "{user}: {err:?}"
        );
        assert_eq!(err.reason(), Reason::AuthenticationFailed);
        assert!(err.reason().is_stalled());
        assert_eq!(
            err.to_string(),
            format!(
                "PostgreSQL at 127.0.0.1:{port} authenticated {user} without channel binding, \
                 which the connection string requires (channel_binding=require): connect over TLS \
                 to a server that authenticates {user} with scram-sha-256, or set \
                 channel_binding to prefer"
            )
        );
    }
    let err = open_string(&url("postgres", "sslmode=require"), &[]).await;
    assert!(err.is_ok(), "without channel_binding=require trust is fine");

    // SCRAM without TLS (the shared test server offers none) cannot be bound either.
    let shared = support::database_url();
    let separator = if shared.contains('?') { '&' } else { '?' };
    let err = refusal(
        &format!("{shared}{separator}sslmode=prefer&channel_binding=require"),
        &[],
    )
    .await;
    assert!(
        matches!(err, ConnectError::ChannelBindingUnused { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn sslrootcert_names_the_secret_key_whose_ca_verifies_the_server() {
    let (pki, _cluster, port) = server_admitting_certificates_and_scram().await;
    let (right, wrong) = (pki.ca(), Pki::new("boxtable-rogue-ca").ca());
    let url = |query: &str| {
        format!(
            "postgres://bt_scram:{SCRAM_PASSWORD}@127.0.0.1:{port}/postgres?sslmode=verify-full{query}"
        )
    };

    // sslrootcert wins over ca.crt, and without it ca.crt is the CA.
    open_string(
        &url("&sslrootcert=root.pem"),
        &[("root.pem", &right), ("ca.crt", &wrong)],
    )
    .await
    .unwrap();
    open_string(&url(""), &[("ca.crt", &right)]).await.unwrap();

    for (query, files) in [
        (
            "&sslrootcert=rogue.pem",
            vec![
                ("rogue.pem", wrong.as_slice()),
                ("ca.crt", right.as_slice()),
            ],
        ),
        ("&sslrootcert=system", vec![("ca.crt", right.as_slice())]),
    ] {
        let err = refusal(&url(query), &files).await;
        assert!(
            matches!(err, ConnectError::TlsCertificate { .. }),
            "{query}: {err:?}"
        );
        assert_eq!(err.reason(), Reason::TlsFailed);
    }

    let missing = secret(&[("connectionString", url("&sslrootcert=root.pem").as_bytes())]);
    let err = source::connection(&missing, &string_spec()).unwrap_err();
    assert!(matches!(err, SourceError::MissingKey { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "secret shop/db has no key \"root.pem\": sslrootcert names it"
    );
    assert_eq!(err.reason(), Reason::SecretNotFound);
}

#[tokio::test]
async fn tls_versions_are_those_the_connection_string_allows() {
    let (pki, _cluster, port) = server_admitting_certificates_and_scram().await;
    let ca = pki.ca();
    let scram = |query: &str| {
        format!(
            "postgres://bt_scram:{SCRAM_PASSWORD}@127.0.0.1:{port}/postgres?sslmode=verify-full&channel_binding=require{query}"
        )
    };
    for (query, version) in [
        ("", "TLSv1.3"),
        ("&ssl_max_protocol_version=TLSv1.2", "TLSv1.2"),
        ("&ssl_min_protocol_version=TLSv1.3", "TLSv1.3"),
    ] {
        let session = open_string(&scram(query), &[("ca.crt", &ca)])
            .await
            .unwrap();
        assert_eq!(tls_of(&session).await.0, version, "{query}");
    }
    let channel_binding = ConnectionParameters {
        sslmode: Some(SslModeParameter::VerifyFull),
        channel_binding: Some(ChannelBindingParameter::Require),
        ..ConnectionParameters::default()
    };
    let scram_files: [(&str, &[u8]); 2] =
        [("password", SCRAM_PASSWORD.as_bytes()), ("ca.crt", &ca)];
    let parts = keys_secret(port, "bt_scram", &scram_files);
    let session = open(&parts, &keys_spec(channel_binding)).await.unwrap();
    assert_eq!(tls_of(&session).await.0, "TLSv1.3");
}
