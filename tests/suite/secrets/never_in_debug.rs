//! No type that holds a password, a private key or a connection string shows it in `Debug`
//! (what `{:?}` in a log line or a panic would print): each is formatted with a known secret in
//! it, and the secret must be absent.

use boxtable_operator::controller::secrets::DatabaseSecret;
use boxtable_operator::crd::{ConnectionKeys, DatabaseSpec, SecretKeyRef};
use boxtable_operator::db::{Connection, ConnectionSettings, SessionKey, TlsFiles};
use boxtable_operator::pass::source;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use zeroize::Zeroizing;

const PASSWORD: &str = "Kn0wn-Pa55word-q8";
const KEY: &str = "Kn0wnPr1vateKeyBody";

/// Both `{:?}` and `{:#?}` of `value`, which must not show the password or the key.
fn assert_hidden(what: &str, value: &impl std::fmt::Debug) {
    let shown = format!("{value:?} {value:#?}");
    assert!(
        !shown.contains(PASSWORD),
        "{what} shows the password: {shown}"
    );
    assert!(
        !shown.contains(KEY),
        "{what} shows the private key: {shown}"
    );
}

fn secret(pairs: &[(&str, &str)]) -> Secret {
    let mut secret = Secret::default();
    secret.metadata.name = Some("db".to_owned());
    secret.data = Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
    );
    secret
}

#[test]
fn settings_connections_pool_keys_and_secrets_never_show_a_password_or_key() {
    let key_pem = format!("-----BEGIN PRIVATE KEY-----\n{KEY}\n-----END PRIVATE KEY-----\n");
    for string in [
        format!("postgres://app:{PASSWORD}@db/shop?sslmode=require&sslcert=c&sslkey=k"),
        format!("host=db user=app password='{PASSWORD}' sslmode=require sslcert=c sslkey=k"),
        format!(
            "Host=db;Username=app;Password=\"{PASSWORD}\";SSL Mode=Require;SSL Certificate=c;SSL Key=k"
        ),
    ] {
        let settings = ConnectionSettings::parse(&string).unwrap();
        assert_hidden("ConnectionSettings", &settings);
        assert_hidden("Password", &settings.password());
        assert_hidden("the driver's Config", &settings.to_config());
        let files = TlsFiles {
            root: None,
            client_cert: Some(b"cert".to_vec()),
            client_key: Some(Zeroizing::new(key_pem.clone().into_bytes())),
        };
        assert_hidden("TlsFiles", &files);
        let connection = Connection::new(settings, files);
        assert_hidden("Connection", &connection);
        assert_hidden("SessionKey", &SessionKey::of(&connection));

        let from_secret = secret(&[
            ("connectionString", &string),
            ("c", "cert"),
            ("k", &key_pem),
        ]);
        let spec = DatabaseSpec {
            secret_ref: SecretKeyRef {
                name: "db".to_owned(),
                key: None,
                keys: None,
            },
            parameters: None,
        };
        let read = DatabaseSecret {
            connection: source::connection(&from_secret, &spec),
            finalizers: Vec::new(),
            deleting: false,
        };
        assert!(read.connection.is_ok());
        assert_hidden("DatabaseSecret", &read);
    }

    // Separate keys, and the errors a Secret's bad value draws.
    let keys = DatabaseSpec {
        secret_ref: SecretKeyRef {
            name: "db".to_owned(),
            key: None,
            keys: Some(Box::new(ConnectionKeys::default())),
        },
        parameters: None,
    };
    let parts = secret(&[("host", "db"), ("user", "app"), ("password", PASSWORD)]);
    assert_hidden("a connection from keys", &source::connection(&parts, &keys));
    let bad_port = secret(&[("host", "db"), ("user", "app"), ("port", PASSWORD)]);
    let err = source::connection(&bad_port, &keys).unwrap_err();
    assert_hidden("SourceError", &err);
    assert!(!boxtable_operator::report::chain(&err).contains(PASSWORD));
}
