//! Connection strings in the URL, libpq keyword and Npgsql forms, and password redaction.

use std::time::Duration;

use boxtable_operator::db::{ConnStrError, ConnectionSettings, TlsMode};
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
