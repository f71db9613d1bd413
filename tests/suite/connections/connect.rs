//! Opening sessions against a real PostgreSQL (`scripts/test.sh` or `scripts/pg.sh` provides one).

use std::time::{Duration, Instant};

use boxtable_operator::db::{ConnectError, Connection, ConnectionSettings, Session, TlsFiles};
use boxtable_operator::reason::Reason;

use crate::support;
use crate::support::Sql;
use crate::support::reliability::cluster::Cluster;

/// The pieces of `DATABASE_URL`: (user, password, host, port, dbname).
fn parts() -> (String, String, String, u16, String) {
    let s = ConnectionSettings::parse(&support::database_url()).unwrap();
    let password = s
        .password()
        .map(|p| p.expose().to_owned())
        .unwrap_or_default();
    (
        s.user().to_owned(),
        password,
        s.hosts()[0].clone(),
        s.ports()[0],
        s.dbname().unwrap_or("postgres").to_owned(),
    )
}

async fn application_name_of(session: &Session) -> String {
    let row = session
        .client()
        .query_one(
            "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
            &[&session.backend_pid()],
        )
        .await
        .unwrap();
    row.get(0)
}

async fn connect(connection_string: &str, application_name: &str) -> Result<Session, ConnectError> {
    Session::connect(
        &Connection::parse(connection_string).unwrap(),
        application_name,
    )
    .await
}

/// The error of a session to `connection_string`, which must fail.
async fn connect_error(connection_string: &str) -> ConnectError {
    connect(connection_string, "t").await.err().unwrap()
}

/// Whether `session`'s connection is encrypted, as the server sees it.
async fn is_encrypted(session: &Session) -> bool {
    session
        .client()
        .value(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
}

/// Asserts that `err` is `reason`, a reason that stalls, and reads `message`.
fn assert_stalls_saying(err: &ConnectError, reason: Reason, message: &str) {
    assert_eq!(err.reason(), reason);
    assert!(err.reason().is_stalled());
    assert_eq!(err.to_string(), message);
}

#[tokio::test]
async fn every_form_connects_and_sets_application_name() {
    let (user, pw, host, port, db) = parts();
    let forms = [
        format!("postgres://{user}:{pw}@{host}:{port}/{db}?sslmode=disable"),
        format!("host={host} port={port} dbname={db} user={user} password='{pw}' sslmode=disable"),
        format!(
            "Host={host};Port={port};Database={db};Username={user};Password=\"{pw}\";SSL Mode=Disable"
        ),
    ];
    for (i, form) in forms.iter().enumerate() {
        let name = format!("boxtable-operator/test/form-{i}");
        let session = connect(form, &name).await.unwrap();
        assert_eq!(application_name_of(&session).await, name);
        assert!(session.backend_pid() > 0);
    }
}

#[tokio::test]
async fn long_application_names_are_cut_to_63_bytes() {
    let session = connect(&support::database_url(), &"x".repeat(100))
        .await
        .unwrap();
    assert_eq!(application_name_of(&session).await, "x".repeat(63));
}

#[tokio::test]
async fn prefer_falls_back_to_plain_tcp_when_the_server_has_no_tls() {
    let (user, pw, host, port, db) = parts();
    let session = connect(
        &format!("postgres://{user}:{pw}@{host}:{port}/{db}?sslmode=prefer"),
        "t",
    )
    .await
    .unwrap();
    let ssl = is_encrypted(&session).await;
    assert!(!ssl);
}

#[tokio::test]
async fn tls_required_of_a_server_without_tls_stalls_naming_the_mode_asked_for_in_either_form() {
    let (user, pw, host, port, db) = parts();
    let cases = [
        (
            format!("postgres://{user}:{pw}@{host}:{port}/{db}?sslmode=verify-full"),
            "verify-full",
        ),
        (
            format!(
                "Host={host};Port={port};Database={db};Username={user};Password=\"{pw}\";SSL Mode=VerifyFull"
            ),
            "verify-full",
        ),
        (
            format!(
                "host={host} port={port} dbname={db} user={user} password='{pw}' sslmode=verify-ca"
            ),
            "verify-ca",
        ),
        (
            format!(
                "Host={host};Port={port};Database={db};Username={user};Password=\"{pw}\";SSL Mode=VerifyCA"
            ),
            "verify-ca",
        ),
        (
            format!(
                "Host={host};Port={port};Database={db};Username={user};Password=\"{pw}\";SSL Mode=Require"
            ),
            "require",
        ),
    ];
    for (connection_string, mode) in cases {
        let err = connect_error(&connection_string).await;
        assert!(
            matches!(err, ConnectError::TlsUnavailable { .. }),
            "{mode}: {err:?}"
        );
        assert_stalls_saying(
            &err,
            Reason::TlsFailed,
            &format!(
                "PostgreSQL at {host}:{port} does not offer TLS, which the connection string \
                 requires (sslmode={mode}): enable TLS on the server, or set sslmode to prefer or \
                 disable"
            ),
        );
    }
}

#[tokio::test]
async fn a_server_certificate_that_fails_verification_stalls_and_require_still_encrypts() {
    let cluster = Cluster::primary_with_tls();
    let port = cluster.port;
    let url = |mode: &str| format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode={mode}");

    let session = connect(&url("require"), "t").await.unwrap();
    let ssl = is_encrypted(&session).await;
    assert!(ssl, "require encrypts without verifying");

    // Signed by no CA the client knows; with its own certificate as the CA, it still does not
    // name 127.0.0.1.
    let certificate = cluster.certificate();
    for (mode, ca) in [
        ("verify-ca", None),
        ("verify-full", None),
        ("verify-full", Some(certificate.as_slice())),
    ] {
        let settings = ConnectionSettings::parse(&url(mode)).unwrap();
        let files = TlsFiles {
            root: ca.map(<[u8]>::to_vec),
            ..TlsFiles::default()
        };
        let connection = Connection::new(settings, files);
        let err = Session::connect(&connection, "t").await.err().unwrap();
        assert!(
            matches!(err, ConnectError::TlsCertificate { .. }),
            "{mode}: {err:?}"
        );
        assert_eq!(err.reason(), Reason::TlsFailed);
        assert_eq!(
            err.to_string(),
            format!(
                "the certificate of PostgreSQL at 127.0.0.1:{port} failed verification \
                 (sslmode={mode}): check the CA bundle (the key sslrootcert names, else the \
                 Secret's ca.crt) and that the certificate names the host"
            )
        );
    }
}

#[tokio::test]
async fn a_database_that_does_not_exist_stalls_naming_the_database_and_the_key() {
    let (user, pw, host, port, _) = parts();
    for connection_string in [
        format!("postgres://{user}:{pw}@{host}:{port}/no_such_db?sslmode=disable"),
        format!("Host={host};Port={port};Database=no_such_db;Username={user};Password=\"{pw}\""),
    ] {
        let err = connect_error(&connection_string).await;
        assert!(
            matches!(err, ConnectError::DatabaseNotFound { .. }),
            "{err:?}"
        );
        assert_stalls_saying(
            &err,
            Reason::DatabaseNotFound,
            &format!(
                "database \"no_such_db\" does not exist on PostgreSQL at {host}:{port}: correct \
                 dbname (Database in the Npgsql form) in the connection string, or create the \
                 database"
            ),
        );
        assert!(!format!("{err} {err:?}").contains(&pw));
    }
}

#[tokio::test]
async fn a_connection_string_without_the_password_the_server_asks_for_stalls_saying_so() {
    let (user, _, host, port, db) = parts();
    let err = connect_error(&format!(
        "Host={host};Port={port};Database={db};Username={user}"
    ))
    .await;
    assert!(
        matches!(err, ConnectError::PasswordMissing { .. }),
        "{err:?}"
    );
    assert_stalls_saying(
        &err,
        Reason::AuthenticationFailed,
        &format!(
            "PostgreSQL at {host}:{port} asked {user} for a password and the connection string has \
             none: add it (key password, or Password in the Npgsql form)"
        ),
    );
}

#[tokio::test]
async fn a_wrong_password_is_an_authentication_failure_that_never_shows_the_password() {
    let (_, _, host, port, db) = parts();
    let admin = support::connect(&support::database_url()).await;
    let role = format!("bt_auth_{}", std::process::id());
    let secret = "Uniq-Pw-7f3c9e1a";
    admin
        .batch(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD '{secret}-right'"
        ))
        .await;
    let ok = connect(
        &format!("postgres://{role}:{secret}-right@{host}:{port}/{db}"),
        "t",
    )
    .await;
    assert!(ok.is_ok(), "{:?}", ok.err());
    let err = connect_error(&format!(
        "Host={host};Port={port};Database={db};Username={role};Password={secret}"
    ))
    .await;
    assert_eq!(err.reason(), Reason::AuthenticationFailed, "{err:?}");
    let mut text = format!("{err} {err:?}");
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        text.push_str(&format!(" {s}"));
        source = s.source();
    }
    assert!(!text.contains(secret), "{text}");
    assert!(
        text.contains(&role) && text.contains(&format!("{host}:{port}")),
        "{text}"
    );
}

#[tokio::test]
async fn an_unreachable_port_fails_quickly_as_a_connection_failure() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let err = connect_error(&format!(
        "host=127.0.0.1 port={closed} user=u password=p connect_timeout=30"
    ))
    .await;
    assert!(matches!(err, ConnectError::Connect { .. }), "{err:?}");
    assert_eq!(err.reason(), Reason::ConnectionFailed);
    // A refused connection fails at once instead of sitting out the 30 s connect timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn sessions_keep_tcp_keepalives_on_and_can_cancel_a_running_statement() {
    let session = connect(&support::database_url(), "t").await.unwrap();
    // Our end of the socket, as the server sees it; Linux shows its keepalive timer (02) in /proc.
    let port: i32 = session
        .client()
        .value(
            "SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()",
            &[],
        )
        .await;
    let local = format!(":{port:04X} ");
    let table = std::fs::read_to_string("/proc/self/net/tcp").unwrap();
    // Only an established socket (state 01): a closed earlier one may linger on the same port.
    let line = table.lines().find(|l| {
        let mut fields = l.split_whitespace();
        fields
            .nth(1)
            .is_some_and(|a| format!("{a} ").ends_with(&local))
            && fields.nth(1) == Some("01")
    });
    let timer = line.and_then(|l| l.split_whitespace().nth(5)).unwrap();
    assert!(
        timer.starts_with("02:"),
        "no keepalive timer on the session socket: {line:?}"
    );
    let client = session.client();
    let observer = support::connect(&support::database_url()).await;
    let pid = session.backend_pid();
    let sleep = client.simple_query("SELECT pg_sleep(30)");
    // Cancel once the server runs the statement: a cancel request that arrives before it is
    // ignored, and the statement would then run its full 30 s.
    let cancel = async {
        let started = Instant::now();
        loop {
            let running: i64 = observer
                .value(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' \
                     AND query LIKE '%pg_sleep%'",
                    &[&pid],
                )
                .await;
            if running == 1 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "pg_sleep never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        session.cancel_running_statement().await.unwrap();
    };
    let (result, ()) = tokio::join!(sleep, cancel);
    let err = result.err().unwrap();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED)
    );
}

#[tokio::test]
async fn a_session_knows_its_servers_version_from_its_setup_and_the_server_is_supported() {
    let db = support::fresh_db().await;
    let session = db.session("boxtable-operator-test").await;
    let shown: String = session.client().value("SHOW server_version_num", &[]).await;

    assert_eq!(session.server_version_num().to_string(), shown);
    let table = boxtable_operator::ident::QualifiedName::parse(None, "outbox").unwrap();
    boxtable_operator::migrate::postgres_version::check_supported(
        session.server_version_num(),
        &table,
    )
    .unwrap();
}
