//! A unique password never shows in `migrate`'s debug logs, its printed status or its error
//! messages: across authentication failures, an unreachable host and malformed connection strings
//! in all three forms.

use crate::support;
use crate::support::Sql;
use crate::support::reliability::*;

#[tokio::test]
async fn a_password_never_appears_in_logs_status_or_errors() {
    let db = support::fresh_db().await;
    let admin = db.connect().await;
    let nonce = std::process::id();
    let secret = format!("Sekret{nonce}Xq7");
    let wrong = format!("Wrong{nonce}Zr4");
    let role = format!("rel_secret_{nonce}_{}", db.name.len());
    admin
        .batch(&format!("CREATE ROLE \"{role}\" LOGIN PASSWORD '{secret}'"))
        .await;
    let config = db.config();
    let port = *config.get_ports().first().unwrap();
    let name = &db.name;
    let cases: Vec<(&str, String)> = vec![
        (
            "url, wrong password",
            format!("postgres://{role}:{wrong}@127.0.0.1:{port}/{name}"),
        ),
        (
            "url, right password, wrong user",
            format!("postgres://nobody_{nonce}:{secret}@127.0.0.1:{port}/{name}"),
        ),
        (
            "keyword, wrong user",
            format!(
                "host=127.0.0.1 port={port} dbname={name} user=nobody_{nonce} password={secret}"
            ),
        ),
        (
            "npgsql, wrong user",
            format!(
                "Host=127.0.0.1;Port={port};Database={name};Username=nobody_{nonce};Password={secret}"
            ),
        ),
        (
            "url, unreachable host",
            format!("postgres://{role}:{secret}@127.0.0.1:1/{name}?connect_timeout=2"),
        ),
        (
            "npgsql, unreachable host",
            format!("Host=127.0.0.1;Port=1;Username={role};Password={secret};Timeout=2"),
        ),
        (
            "url, malformed",
            format!("postgres://{role}:{secret}@[::1/{name}"),
        ),
        (
            "url, bad escape",
            format!("postgres://{role}:{secret}%zz@127.0.0.1/{name}"),
        ),
        (
            "url, unknown parameter",
            format!("postgres://{role}:{secret}@127.0.0.1/{name}?pass={secret}"),
        ),
        (
            "keyword, unterminated quote",
            format!("host=127.0.0.1 password='{secret}"),
        ),
        ("keyword, junk", format!("host=127.0.0.1 {secret} password")),
        (
            "npgsql, unterminated quote",
            format!("Host=127.0.0.1;Password=\"{secret}"),
        ),
        (
            "npgsql, bad port",
            format!("Host=127.0.0.1;Port={secret};Password={secret}"),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_outbox_manifest(dir.path(), "outbox", "");
    let mut leaks = Vec::new();
    for (label, url) in &cases {
        let run = migrate(&manifest, url).await;
        assert_ne!(run.code, Some(0), "{label}: {run:?}");
        assert!(!run.reason().is_empty(), "{label}: {run:?}");
        for needle in [&secret, &wrong] {
            if run.stdout.contains(needle.as_str()) || run.stderr.contains(needle.as_str()) {
                leaks.push(format!("{label}: {run:?}"));
            }
        }
    }
    println!("secrets: runs={} leaks={}", cases.len(), leaks.len());
    assert!(leaks.is_empty(), "{leaks:#?}");
}
