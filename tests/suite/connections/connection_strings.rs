//! Connection strings in the URL, libpq keyword and Npgsql forms, and password redaction.

use std::time::Duration;

use boxtable_operator::db::{
    ChannelBinding, ConnStrError, ConnectionSettings, RootCert, TlsMode, TlsVersion,
};
use boxtable_operator::reason::Reason;
use proptest::prelude::*;

const SECRET: &str = "Zq7SecretPw42x";

fn parse(s: &str) -> ConnectionSettings {
    ConnectionSettings::parse(s).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(s: &str) -> ConnStrError {
    ConnectionSettings::parse(s).expect_err("should be refused")
}

#[test]
fn the_three_forms_parse_to_the_same_settings() {
    let url = parse(
        "postgres://app:Zq7SecretPw42x@db.example:6432/shop?sslmode=require&connect_timeout=7",
    );
    let keywords = parse(
        "host=db.example port=6432 dbname=shop user=app password=Zq7SecretPw42x sslmode=require connect_timeout=7",
    );
    let npgsql = parse(
        "Host=db.example;Port=6432;Database=shop;Username=app;Password=Zq7SecretPw42x;SSL Mode=Require;Timeout=7",
    );
    assert_eq!(url, keywords);
    assert_eq!(url, npgsql);
    assert_eq!(url.hosts(), ["db.example"]);
    assert_eq!(url.ports(), [6432]);
    assert_eq!(url.dbname(), Some("shop"));
    assert_eq!(url.user(), "app");
    assert_eq!(url.password().map(|p| p.expose()), Some(SECRET));
    assert_eq!(url.tls_mode(), TlsMode::Require);
    assert_eq!(url.connect_timeout(), Some(Duration::from_secs(7)));
}

#[test]
fn the_default_port_is_5432_and_the_default_tls_mode_is_prefer() {
    let s = parse("postgresql://app@db/shop");
    assert_eq!(s.ports(), [5432]);
    assert_eq!(s.tls_mode(), TlsMode::Prefer);
    assert_eq!(s.password(), None);
}

#[test]
fn url_parts_are_percent_decoded() {
    let s = parse("postgres://us%40er:p%40ss%2Fw%3Ard@db/my%20db?application_name=orders%20api");
    assert_eq!(s.user(), "us@er");
    assert_eq!(s.password().map(|p| p.expose()), Some("p@ss/w:rd"));
    assert_eq!(s.dbname(), Some("my db"));
    assert_eq!(s.application_name(), Some("orders api"));
}

#[test]
fn url_hosts_may_list_several_with_ports_and_ipv6() {
    let s = parse("postgres://app@a:5433,[::1]:5434,c/shop?target_session_attrs=read-write");
    assert_eq!(s.hosts(), ["a", "::1", "c"]);
    assert_eq!(s.ports(), [5433, 5434, 5432]);
    assert_eq!(
        s.redacted(),
        "postgres://app@a:5433,[::1]:5434,c:5432/shop?sslmode=prefer"
    );
}

#[test]
fn keyword_values_may_be_quoted_and_escaped() {
    let s = parse(r"host = db user=app password='it\'s a \\ secret' dbname=sh\ op");
    assert_eq!(s.password().map(|p| p.expose()), Some(r"it's a \ secret"));
    assert_eq!(s.dbname(), Some("sh op"));
}

#[test]
fn npgsql_keys_are_case_insensitive_with_synonyms_and_quotes() {
    let s = parse(
        r#"server=db; PORT=5433 ;db=shop;User ID=app;PWD="a;b""c";sslmode=VerifyFull;Application Name='orders'"#,
    );
    assert_eq!(s.hosts(), ["db"]);
    assert_eq!(s.ports(), [5433]);
    assert_eq!(s.dbname(), Some("shop"));
    assert_eq!(s.user(), "app");
    assert_eq!(s.password().map(|p| p.expose()), Some(r#"a;b"c"#));
    assert_eq!(s.tls_mode(), TlsMode::VerifyFull);
    assert_eq!(s.application_name(), Some("orders"));
    for user_key in ["Username", "User Name", "UserId", "Uid", "User Id"] {
        assert_eq!(
            parse(&format!("Host=h;{user_key}=app")).user(),
            "app",
            "{user_key}"
        );
    }
    assert_eq!(
        parse("Host=h;Username=u;Pwd=x")
            .password()
            .map(|p| p.expose()),
        Some("x")
    );
}

#[test]
fn npgsql_pool_and_command_keys_are_accepted_and_ignored() {
    let s = parse(
        "Host=db;Username=app;Maximum Pool Size=20;Include Error Detail=true;Command Timeout=60;\
         Krbsrvname=postgres;Socket Receive Buffer Size=8192;Integrated Security=false",
    );
    assert_eq!(s.hosts(), ["db"]);
}

#[test]
fn an_unknown_npgsql_key_is_refused_as_npgsql_refuses_it() {
    let err = parse_err(&format!(
        "Host=db;Username=app;Passwrd={SECRET};SSL Mode=Require"
    ));
    assert_eq!(
        err.to_string(),
        "keyword not supported: 'passwrd' at byte 21"
    );
    assert_eq!(err.reason(), Reason::InvalidConnectionString);
    assert!(err.reason().is_stalled());
    assert_eq!(
        parse_err("Host=db;Username=app;SSL  Mdoe=Require").to_string(),
        "keyword not supported: 'ssl  mdoe' at byte 21"
    );
}

#[test]
fn unknown_libpq_keywords_are_refused_as_libpq_refuses_them() {
    assert_eq!(
        parse_err("host=db user=app passwrd=x").to_string(),
        "invalid connection option \"passwrd\" at byte 17"
    );
    assert_eq!(
        parse_err("postgres://app@db/shop?sslmode=require&sslmdoe=require").to_string(),
        "invalid URI query parameter \"sslmdoe\" at byte 39"
    );
}

#[test]
fn a_key_that_may_be_the_rest_of_an_unquoted_password_is_refused_without_being_named() {
    // Each password below holds a separator, unquoted: what follows it reads as a key.
    let cases = [
        (
            "Host=db;Username=app;Password=Zq7;Secret=1;Port=5432",
            "keyword not supported at byte 34, right after an unquoted password: a password with ';' must be quoted (Password=\"...\")",
        ),
        (
            "host=db user=app password=Zq7 Secret=1",
            "invalid connection option at byte 30, right after an unquoted password: a password with spaces must be quoted (password='...')",
        ),
        (
            "postgres://app@db/shop?password=Zq7&Secret=1",
            "invalid URI query parameter at byte 36, right after the password: a password with '&' must be percent-encoded (%26)",
        ),
    ];
    for (input, message) in cases {
        let err = parse_err(input);
        assert_eq!(err.to_string(), message, "{input}");
        assert!(!err.to_string().contains("Secret"), "{err}");
    }
    // A key that a password contains, wherever it stands, is not named either.
    assert_eq!(
        parse_err("Host=db;Username=app;Zq7key=1;Password=xZq7keyx").to_string(),
        "keyword not supported at byte 21"
    );
}

#[test]
fn npgsql_host_may_carry_ports() {
    let s = parse("Host=a:5433,b;Port=6000;Username=app");
    assert_eq!(s.hosts(), ["a", "b"]);
    assert_eq!(s.ports(), [5433, 6000]);
}

#[test]
fn every_tls_mode_parses_in_every_spelling() {
    let cases = [
        ("disable", "Disable", TlsMode::Disable),
        ("allow", "Allow", TlsMode::Prefer),
        ("prefer", "Prefer", TlsMode::Prefer),
        ("require", "Require", TlsMode::Require),
        ("verify-ca", "VerifyCA", TlsMode::VerifyCa),
        ("verify-full", "VerifyFull", TlsMode::VerifyFull),
    ];
    for (libpq, npgsql, mode) in cases {
        assert_eq!(
            parse(&format!("postgres://u@h/d?sslmode={libpq}")).tls_mode(),
            mode,
            "{libpq}"
        );
        assert_eq!(
            parse(&format!("host=h user=u sslmode={libpq}")).tls_mode(),
            mode,
            "{libpq}"
        );
        assert_eq!(
            parse(&format!("Host=h;Username=u;SSL Mode={npgsql}")).tls_mode(),
            mode,
            "{npgsql}"
        );
        assert_eq!(
            parse(&format!("Host=h;Username=u;SslMode={npgsql}")).tls_mode(),
            mode,
            "{npgsql}"
        );
    }
}

#[test]
fn trust_server_certificate_cannot_weaken_a_verifying_mode() {
    let ok = parse("Host=h;Username=u;SSL Mode=Require;Trust Server Certificate=true");
    assert_eq!(ok.tls_mode(), TlsMode::Require);
    let err = parse_err("Host=h;Username=u;SSL Mode=VerifyFull;Trust Server Certificate=true");
    assert!(
        matches!(
            err,
            ConnStrError::TrustWithVerification {
                mode: TlsMode::VerifyFull
            }
        ),
        "{err}"
    );
}

#[test]
fn display_debug_and_redacted_hide_the_password() {
    let s = parse("postgres://app:Zq7SecretPw42x@db:5432/shop?sslmode=require");
    assert_eq!(
        s.redacted(),
        "postgres://app:***@db:5432/shop?sslmode=require"
    );
    assert_eq!(s.to_string(), s.redacted());
    assert!(!format!("{s:?}").contains(SECRET));
    assert!(!format!("{s:#?}").contains(SECRET));
}

#[test]
fn errors_name_the_key_and_position() {
    let err = parse_err("host=h user=u port=abc");
    assert_eq!(
        err.to_string(),
        "invalid value for port at byte 14: expected port numbers from 1 to 65535 separated by commas"
    );
    assert_eq!(
        parse_err("host=h sslmdoe=require").to_string(),
        "invalid connection option \"sslmdoe\" at byte 7"
    );
    assert_eq!(parse_err("  ").to_string(), "connection string is empty");
    assert_eq!(
        parse_err("mysql://u@h/db").to_string(),
        "unsupported url scheme: expected postgres:// or postgresql://"
    );
    assert_eq!(
        parse_err("Port=5432;Username=u").to_string(),
        "connection string has no host"
    );
    assert_eq!(
        parse_err("Host=h;Port=1").to_string(),
        "connection string has no user"
    );
    assert_eq!(
        parse_err("host=h,i port=1,2,3 user=u").to_string(),
        "connection string lists 2 hosts but 3 ports"
    );
    assert_eq!(parse_err("x").reason(), Reason::InvalidConnectionString);
}

/// Malformed strings that all carry the password; none may echo it.
const MALFORMED: [&str; 25] = [
    "postgres://app:Zq7SecretPw42x@db:notaport/shop",
    "postgres://app:Zq7SecretPw42x@db/shop?sslmode=sometimes",
    "postgres://app:Zq7SecretPw42x@db/shop?bogus=1",
    "postgres://app:Zq7SecretPw42x@db/shop?Zq7SecretPw42x",
    "postgres://app:Zq7SecretPw42x%zz@db/shop",
    "postgres://app:Zq7SecretPw42x/@db/shop",
    "postgres://app:Zq7SecretPw42x@/shop",
    "postgres://app:Zq7SecretPw42x@db:0/shop",
    "mysql://app:Zq7SecretPw42x@db/shop",
    "host=db password='Zq7SecretPw42x",
    "host=db password=Zq7SecretPw42x port=x",
    "host=db Zq7SecretPw42x user=u",
    "host=db password Zq7SecretPw42x",
    "host=db user=u password=Zq7SecretPw42x sslmode=maybe",
    "host=db user=u password=Zq7SecretPw42x\\",
    "host=db user=u password=Zq7SecretPw42x Zq7SecretPw42x=1",
    "Host=db;Password=\"Zq7SecretPw42x",
    "Host=db;Password='Zq7SecretPw42x' trailing;Username=u",
    "Host=db;Password=Zq7SecretPw42x;Zq7SecretPw42x",
    "Host=db;Password=Zq7SecretPw42x;Port=-1;Username=u",
    "Host=db;Password=Zq7SecretPw42x;Timeout=soon;Username=u",
    "Host=db;Password=Zq7SecretPw42x;SSL Mode=VerifyCA;TrustServerCertificate=yes;Username=u",
    "Host=db;Password=Zq7Secret;Pw42x=1;Username=u",
    "Host=db;Zq7SecretPw42x=1;Password=Zq7SecretPw42x;Username=u",
    "postgres://app@db/shop?password=Zq7SecretPw42x&Zq7SecretPw42x=1",
];

#[test]
fn malformed_strings_never_echo_the_password() {
    for input in MALFORMED {
        let err = parse_err(input);
        assert!(!err.to_string().contains(SECRET), "{input}: {err}");
        assert!(!format!("{err:?}").contains(SECRET), "{input}: {err:?}");
        assert_eq!(err.reason(), Reason::InvalidConnectionString);
    }
}

/// Renders everything a parse result can show; the caller checks it for the password.
fn rendered(result: &Result<ConnectionSettings, ConnStrError>) -> String {
    match result {
        Ok(s) => format!("{s} {s:?} {}", s.redacted()),
        Err(e) => format!("{e} {e:?}"),
    }
}

/// The fields where a password may legitimately land when junk moves it out of its slot.
fn non_secret_fields(s: &ConnectionSettings) -> String {
    format!(
        "{:?} {:?} {} {:?} {:?}",
        s.hosts(),
        s.dbname(),
        s.user(),
        s.application_name(),
        s.options()
    )
}

fn quote_keyword(pw: &str) -> String {
    format!("'{}'", pw.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn quote_npgsql(pw: &str) -> String {
    format!("\"{}\"", pw.replace('"', "\"\""))
}

fn percent(pw: &str) -> String {
    pw.bytes().map(|b| format!("%{b:02X}")).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn parsing_arbitrary_text_never_panics(input in "\\PC{0,80}") {
        let _ = ConnectionSettings::parse(&input);
    }

    #[test]
    fn well_formed_strings_keep_any_password_secret(pw in "Pw[ -~]{8,24}", form in 0..3usize) {
        let input = match form {
            0 => format!("postgres://app:{}@db/shop", percent(&pw)),
            1 => format!("host=db user=app password={}", quote_keyword(&pw)),
            _ => format!("Host=db;Username=app;Password={}", quote_npgsql(&pw)),
        };
        let s = ConnectionSettings::parse(&input).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(s.password().map(|p| p.expose()), Some(pw.as_str()));
        prop_assert!(!rendered(&Ok(s)).contains(&pw));
    }

    #[test]
    fn damaged_strings_never_echo_the_password(
        pw in "Pw[A-Za-z0-9]{10,20}",
        form in 0..3usize,
        cut in 0..120usize,
        junk in prop::sample::select(vec!['\'', '"', ';', '=', ' ', '\\', '@', '/', ':', '?', '%', ',', '[']),
        at in 0..120usize,
    ) {
        let template = match form {
            0 => format!("postgres://app:{pw}@db:5432/shop?sslmode=require"),
            1 => format!("host=db port=5432 user=app password={pw} sslmode=require"),
            _ => format!("Host=db;Port=5432;Username=app;Password={pw};SSL Mode=Require"),
        };
        let mut input: String = template.chars().take(cut.max(1)).collect();
        let at = at.min(input.len());
        input.insert(at, junk);
        let result = ConnectionSettings::parse(&input);
        let shown = rendered(&result);
        let landed_elsewhere = result.as_ref().is_ok_and(|s| non_secret_fields(s).contains(&pw));
        prop_assert!(landed_elsewhere || !shown.contains(&pw), "input {:?} showed {:?}", input, shown);
    }
}

#[test]
fn more_than_16_hosts_are_refused_in_every_form() {
    let hosts = |n: usize| {
        (0..n)
            .map(|i| format!("h{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let sixteen = parse(&format!("postgres://app@{}/shop", hosts(16)));
    assert_eq!(sixteen.hosts().len(), 16);
    for input in [
        format!("postgres://app@{}/shop", hosts(17)),
        format!("host={} user=app", hosts(17)),
        format!("Host={};Username=app", hosts(17)),
        format!("hostaddr={} user=app", vec!["10.0.0.1"; 17].join(",")),
    ] {
        let err = parse_err(&input);
        assert_eq!(
            err.to_string(),
            "connection string lists 17 hosts; at most 16 are allowed",
            "{input}"
        );
        assert_eq!(err.reason(), Reason::InvalidConnectionString);
    }
    let err = parse_err(&format!(
        "postgres://app:{SECRET}@{}/shop?connect_timeout=18446744073709551615",
        hosts(500_001)
    ));
    assert_eq!(
        err.to_string(),
        "connection string lists 500001 hosts; at most 16 are allowed"
    );
}

#[test]
fn a_connect_timeout_above_60_seconds_is_refused() {
    assert_eq!(
        parse("host=h user=u connect_timeout=60").connect_timeout(),
        Some(Duration::from_secs(60))
    );
    for (input, position) in [
        ("postgres://u@h/d?connect_timeout=18446744073709551615", 17),
        ("host=h user=u connect_timeout=61", 14),
        ("Host=h;Username=u;Timeout=1024", 18),
        ("host=h user=u connect_timeout=99999999999999999999999", 14),
    ] {
        let err = parse_err(input);
        assert_eq!(
            err.to_string(),
            format!(
                "invalid value for connect_timeout at byte {position}: expected whole seconds from 0 to 60"
            ),
            "{input}"
        );
    }
}

#[test]
fn tls_files_and_channel_binding_read_the_same_in_every_form() {
    let url = parse(
        "postgres://app@db/shop?sslmode=verify-full&sslrootcert=root.pem&sslcert=tls.crt&sslkey=tls.key&channel_binding=require",
    );
    let keywords = parse(
        "host=db user=app dbname=shop sslmode=verify-full sslrootcert=root.pem sslcert=tls.crt sslkey=tls.key channel_binding=require",
    );
    let npgsql = parse(
        "Host=db;Username=app;Database=shop;SSL Mode=VerifyFull;Root Certificate=root.pem;SSL Certificate=tls.crt;SSL Key=tls.key;Channel Binding=Require",
    );
    let obsolete_npgsql = parse(
        "Host=db;Username=app;Database=shop;SSL Mode=VerifyFull;Root Certificate=root.pem;Client Certificate=tls.crt;Client Certificate Key=tls.key;Channel Binding=Require",
    );
    assert_eq!(url, keywords);
    assert_eq!(url, npgsql);
    assert_eq!(url, obsolete_npgsql);
    assert_eq!(
        url.root_cert(),
        Some(&RootCert::Named("root.pem".to_owned()))
    );
    assert_eq!(url.client_cert(), Some("tls.crt"));
    assert_eq!(url.client_key(), Some("tls.key"));
    assert_eq!(url.channel_binding(), ChannelBinding::Require);
    assert!(url.send_client_cert());
    let defaults = parse("host=db user=app");
    assert_eq!(defaults.channel_binding(), ChannelBinding::Prefer);
    assert_eq!(defaults.root_cert(), None);
    assert_eq!(
        defaults.tls_versions(),
        (TlsVersion::Tls12, TlsVersion::Tls13)
    );
    assert!(defaults.sni());
    let narrowed = parse(
        "host=db user=app sslmode=require ssl_min_protocol_version=TLSv1.3 sslsni=0 sslcertmode=disable gssencmode=prefer",
    );
    assert_eq!(
        narrowed.tls_versions(),
        (TlsVersion::Tls13, TlsVersion::Tls13)
    );
    assert!(!narrowed.sni());
    assert!(!narrowed.send_client_cert());
    assert_eq!(
        parse("host=db user=app sslmode=verify-full sslrootcert=system").root_cert(),
        Some(&RootCert::System)
    );
}

#[test]
fn security_settings_the_operator_cannot_honour_are_refused_saying_why() {
    let cases = [
        (
            "host=h user=u require_auth=scram-sha-256",
            "require_auth at byte 14 is not supported: the operator's PostgreSQL driver cannot restrict which authentication method the server asks for; remove it (channel_binding=require insists on SCRAM authentication bound to TLS)",
        ),
        (
            "Host=h;Username=u;Require Auth=ScramSHA256",
            "require_auth at byte 18 is not supported",
        ),
        (
            "postgres://u@h/d?sslmode=require&sslcert=c&sslkey=k&sslpassword=Zq7SecretPw42x",
            "sslpassword at byte 52 is not supported: an encrypted client key cannot be used",
        ),
        (
            "Host=h;Username=u;SSL Password=Zq7SecretPw42x",
            "sslpassword at byte 18 is not supported",
        ),
        (
            "host=h user=u sslcrl=crl.pem",
            "sslcrl at byte 14 is not supported: certificate revocation lists are not checked",
        ),
        (
            "host=h user=u sslcrldir=crls",
            "sslcrldir at byte 14 is not supported",
        ),
        (
            "Host=h;Username=u;Check Certificate Revocation=true",
            "check certificate revocation at byte 18 is not supported: certificate revocation is not checked",
        ),
        (
            "host=/var/run/postgresql user=u requirepeer=postgres",
            "requirepeer at byte 32 is not supported",
        ),
        (
            "host=h user=u sslcertmode=require",
            "sslcertmode at byte 14 is not supported: the operator cannot tell whether the server asked for the client certificate",
        ),
        (
            "host=h user=u gssencmode=require",
            "gssencmode at byte 14 is not supported: GSSAPI encryption is not available",
        ),
        (
            "Host=h;Username=u;GSS Encryption Mode=Require",
            "gssencmode at byte 18 is not supported",
        ),
        (
            "host=h user=u ssl_max_protocol_version=TLSv1.1",
            "ssl_max_protocol_version at byte 14 is not supported: the operator speaks TLS 1.2 and 1.3 only",
        ),
    ];
    for (input, says) in cases {
        let err = parse_err(input);
        assert!(
            matches!(err, ConnStrError::Unsupported { .. }),
            "{input}: {err:?}"
        );
        assert!(err.to_string().starts_with(says), "{input}: {err}");
        assert!(!err.to_string().contains(SECRET), "{err}");
        assert_eq!(err.reason(), Reason::InvalidConnectionString);
    }
    // Empty or harmless values of the same keys change nothing and are accepted.
    parse(
        "host=h user=u require_auth='' sslpassword='' sslcrl='' requirepeer='' gssencmode=disable sslcertmode=allow",
    );
    parse("Host=h;Username=u;Check Certificate Revocation=false");
}

#[test]
fn contradicting_security_settings_are_refused() {
    let cases = [
        (
            "host=h user=u sslmode=disable channel_binding=require",
            "channel_binding=require needs TLS: set sslmode to prefer, require, verify-ca or verify-full",
        ),
        (
            "host=h user=u sslmode=verify-ca sslrootcert=system",
            "sslrootcert=system checks the server against public roots, which only means something with its host name: set sslmode to verify-full",
        ),
        (
            "Host=h;Username=u;Root Certificate=ca.crt",
            "sslrootcert names the CA that verifies the server, which sslmode disable or prefer never does: set sslmode to require, verify-ca or verify-full",
        ),
        (
            "host=h user=u sslmode=require sslcert=tls.crt",
            "sslcert and sslkey name the client certificate and its private key: give both",
        ),
        (
            "host=h user=u sslmode=disable sslcert=tls.crt sslkey=tls.key",
            "sslcert is sent in the TLS handshake, which sslmode=disable never makes: set sslmode to require, verify-ca or verify-full",
        ),
        (
            "host=h user=u ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=TLSv1.2",
            "ssl_min_protocol_version is above ssl_max_protocol_version",
        ),
    ];
    for (input, message) in cases {
        let err = parse_err(input);
        assert_eq!(err.to_string(), message, "{input}");
        assert_eq!(err.reason(), Reason::InvalidConnectionString);
    }
}
