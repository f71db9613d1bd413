//! How the controller reads Secrets, on the real kube-apiserver: a metadata-only watch (never a
//! list or watch of Secrets with their contents), one LIST by name of a referenced Secret per
//! resourceVersion and never a GET (a resync of an unchanged Secret reads nothing, a rotated one
//! is read again at once), `--secret-label-selector` sent to the API server with every read (a
//! referenced Secret without the labels is Stalled, saying so, and its data never sent), and
//! conflicts between BoxTables found across Secrets that name the same database, and a rotation
//! acted on however it falls: while the first pass that read the Secret still runs, while every
//! worker is busy (when one frees), or when the pass it starts fails on the API (by the retry).

use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use serde_json::json;

use crate::support;
use crate::support::Sql;
use crate::support::black_hole::BlackHole;
use crate::support::controller::*;
use crate::support::fault_proxy::{Rule, Seen};
use boxtable_operator::crd::{
    ChannelBindingParameter, ConnectionKeys, ConnectionParameters, SslModeParameter,
};

const LABEL: &str = "brighter.dev/connection";

/// The requests the controller has made on the Secrets collection so far, in order.
fn requests_on_secrets(h: &Harness) -> Vec<Seen> {
    h.api
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/secrets"))
        .collect()
}

/// Creates Secret `name` holding `value` under `connectionString`, with `labels`.
async fn create_secret(h: &Harness, name: &str, value: &str, labels: serde_json::Value) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": h.namespace, "labels": labels},
        "stringData": {"connectionString": value},
    }))
    .unwrap();
    h.secrets()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// Replaces the connection string in the test Secret.
async fn rotate(h: &Harness, value: &str) {
    h.patch_secret(SECRET, json!({"stringData": {"connectionString": value}}))
        .await;
}

/// The test database's URL with a wrong password.
fn wrong_password(h: &Harness) -> String {
    let config = h.db.config();
    let user = config.get_user().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("the test database is reached over TCP, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{user}:not-the-password@{host}:{port}/{}",
        h.db.name
    )
}

/// The test database in libpq's keyword form (a different Secret, the same database).
fn keyword_form(h: &Harness) -> String {
    let config = h.db.config();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("the test database is reached over TCP, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let password = config
        .get_password()
        .map(|p| format!(" password='{}'", String::from_utf8_lossy(p)))
        .unwrap_or_default();
    format!(
        "host={} port={port} dbname={} user={}{password}",
        host.to_uppercase(),
        h.db.name,
        config.get_user().unwrap()
    )
}

/// The test database in the Npgsql form, asking for `database`, with the password under
/// `password_key` and `extra` appended.
fn npgsql_form(h: &Harness, database: &str, password_key: &str, extra: &str) -> String {
    let config = h.db.config();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("the test database is reached over TCP, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let password = String::from_utf8_lossy(config.get_password().unwrap()).into_owned();
    format!(
        "Host={host};Port={port};Database={database};Username={};{password_key}=\"{password}\"{extra}",
        config.get_user().unwrap()
    )
}

#[tokio::test]
async fn connection_string_mistakes_stall_naming_what_to_fix_and_the_corrected_secret_retries_at_once()
 {
    let h = Harness::without_resync().await;
    let password = String::from_utf8_lossy(h.db.config().get_password().unwrap()).into_owned();
    let name = h.db.name.clone();
    let mistakes = [
        (
            npgsql_form(&h, "no_such_db", "Password", ""),
            "DatabaseNotFound",
            "database \"no_such_db\" does not exist",
        ),
        (
            npgsql_form(&h, &name, "Password", ";SSL Mode=Require"),
            "TlsFailed",
            "does not offer TLS, which the connection string requires (sslmode=require)",
        ),
        (
            npgsql_form(&h, &name, "Passwrd", ""),
            "InvalidConnectionString",
            "keyword not supported: 'passwrd'",
        ),
    ];
    rotate(&h, &mistakes[0].0).await;
    h.apply(boxtable("orders")).await;
    for (connection_string, reason, says) in &mistakes {
        // No resync comes: only the Secret's change starts the pass that finds the next mistake.
        rotate(&h, connection_string).await;
        let bt = h.wait_stalled("orders", reason).await;
        let message = &condition(bt.status.as_ref().unwrap(), "Stalled")
            .unwrap()
            .message;
        assert!(message.contains(says), "{reason}: {message}");
        assert!(!message.contains(&password), "{reason}: {message}");
    }

    rotate(&h, &npgsql_form(&h, &name, "Password", "")).await;
    h.wait_ready("orders").await;
}

#[tokio::test]
async fn secrets_are_watched_by_metadata_only_and_read_once_per_resource_version() {
    let h = Harness::builder().faults().start().await;
    create_secret(
        &h,
        "unrelated",
        &"x".repeat(64 * 1024),
        json!({"app": "other"}),
    )
    .await;
    h.apply_ready(boxtable("orders")).await;
    let reads = h.secret_reads(SECRET);
    assert_eq!(reads, 1, "the first pass reads the Secret once");

    // Resyncs of an unchanged Secret read nothing.
    h.wait_for_passes(4).await;
    assert_eq!(
        h.secret_reads(SECRET),
        1,
        "a resync of an unchanged Secret must not GET it again"
    );
    assert_eq!(
        h.secret_reads("unrelated"),
        0,
        "an unreferenced Secret is never read"
    );

    let on_secrets = requests_on_secrets(&h);
    assert!(
        on_secrets.iter().any(|r| r.is_watch()),
        "the controller watches Secrets: {on_secrets:?}"
    );
    // With their data, only the referenced Secret, selected by name, and never watched.
    let full: Vec<_> = on_secrets
        .iter()
        .filter(|r| {
            !r.metadata_only()
                && (r.is_watch() || !decoded(&r.query).contains(&format!("metadata.name={SECRET}")))
        })
        .collect();
    assert!(
        full.is_empty(),
        "every watch, and every list but the referenced Secret's by name, must ask for metadata \
         only: {full:?}"
    );
}

#[tokio::test]
async fn a_rotated_secret_is_noticed_by_the_metadata_watch_and_read_again() {
    let h = Harness::without_resync().await;
    h.apply_ready(boxtable("orders")).await;
    assert_eq!(h.secret_reads(SECRET), 1);

    // No resync comes: only the watch can start the pass, and only a new GET can see the
    // new password.
    rotate(&h, &wrong_password(&h)).await;
    let bt = h.wait_stalled("orders", "AuthenticationFailed").await;
    let message = &condition(bt.status.as_ref().unwrap(), "Ready")
        .unwrap()
        .message;
    assert!(
        !message.contains("not-the-password"),
        "the password never appears in status: {message}"
    );
    assert_eq!(
        h.secret_reads(SECRET),
        2,
        "the rotated Secret was read once"
    );

    rotate(&h, &h.db.url.clone()).await;
    h.wait_ready("orders").await;
    assert_eq!(h.secret_reads(SECRET), 3);
}

/// How long the first pass's Event is held, so that a rotation lands while that pass is still
/// running (its Secret read and its status write done).
const EVENT_HELD: std::time::Duration = std::time::Duration::from_secs(10);

#[tokio::test]
async fn a_rotation_while_the_first_pass_finishes_is_acted_on_when_it_ends() {
    // The watch shows the Secret with a reader for the first time only once it is rotated, while
    // the pass that read the old version is still running: that is a change to what the pass
    // read, not the first sight of a Secret (which a first pass reads anyway).
    let h = Harness::builder().resync(NO_RESYNC).faults().start().await;
    let held = h.api.add(
        Rule::stall(EVENT_HELD)
            .method("POST")
            .path_contains("/events")
            .times(1),
    );
    h.apply_ready(boxtable("orders")).await;
    wait_until("the first pass's Event held", || async { held.hits() == 1 }).await;

    rotate(&h, &wrong_password(&h)).await;
    wait_until("the rotation in the operator's watch", || async {
        h.logs()
            .lines()
            .filter(|l| l.contains("secret changed") && l.contains(SECRET))
            .count()
            >= 2
    })
    .await;
    assert_eq!(
        h.reconciles(),
        0,
        "the rotation reached the operator while its first pass still held its Event"
    );
    h.wait_stalled("orders", "AuthenticationFailed").await;
    assert_eq!(h.secret_reads(SECRET), 2, "the rotated Secret was read");
}

#[tokio::test]
async fn a_rotation_whose_pass_fails_on_the_api_is_retried_before_the_resync() {
    // A Secret change is told to the schedule once, and the pass it starts takes it. When that
    // pass fails on the API (its status write answered 500, which the client does not retry by
    // itself as it does 429, 503 and 504), the retry must still run: no resync comes here to do
    // it instead.
    let h = Harness::builder().resync(NO_RESYNC).faults().start().await;
    h.apply_ready(boxtable("orders")).await;
    wait_until("the first pass to end", || async { h.reconciles() >= 1 }).await;

    let failed = h.api.add(
        Rule::status(500)
            .method("PATCH")
            .path_contains("/boxtables/orders/status")
            .times(1),
    );
    rotate(&h, &wrong_password(&h)).await;
    h.wait_stalled("orders", "AuthenticationFailed").await;
    assert_eq!(
        failed.hits(),
        1,
        "the pass that took the rotation failed its status write"
    );
}

/// The harness's `--concurrency`.
const WORKERS: usize = 4;

#[tokio::test]
async fn a_secret_rotated_while_every_worker_is_busy_is_acted_on_when_a_worker_frees() {
    // A Secret change is told to the schedule once. Its pass, queued because no worker was free,
    // must still run when its turn comes, not be found "not due" then and wait for a resync
    // that does not come here.
    let h = Harness::without_resync().await;
    h.apply_ready(boxtable("orders")).await;

    // One Secret each (a password of its own makes a target of its own), so that no pass waits
    // for another's session: each connects to the black hole and waits there.
    let hole = BlackHole::start().await;
    for i in 0..WORKERS {
        let name = format!("stuck-{i}");
        create_secret(&h, &name, &hole.url(&format!("pw-{i}")), json!({})).await;
        h.apply(
            boxtable(&name)
                .table(&format!("stuck_{i}"))
                .secret(&name)
                .lock_timeout("2s"),
        )
        .await;
    }
    wait_until("every worker to wait on the black hole", || async {
        hole.accepted() >= WORKERS
    })
    .await;

    rotate(&h, &wrong_password(&h)).await;
    wait_until("the rotated Secret's pass to be queued", || async {
        h.logs()
            .lines()
            .any(|l| l.contains("no free worker: queued") && l.contains("/orders"))
    })
    .await;
    assert!(
        is_ready(&h.get("orders").await),
        "nothing could run orders' pass while every worker waited"
    );
    // The stuck passes end at their budget (2 s + 15 s), and the first worker freed is kept
    // for orders.
    h.wait_stalled("orders", "AuthenticationFailed").await;
}

#[tokio::test]
async fn with_a_label_selector_an_unlabelled_secret_is_refused_until_it_is_labelled() {
    let h = Harness::builder()
        .without_secret()
        .resync(NO_RESYNC)
        .secret_label_selector(&format!("{LABEL}=true"))
        .start()
        .await;
    create_secret(&h, SECRET, &h.db.url, json!({})).await;
    let bt = h
        .apply_stalled(boxtable("orders"), "SecretNotSelected")
        .await;
    let message = &condition(bt.status.as_ref().unwrap(), "Ready")
        .unwrap()
        .message;
    assert!(
        message.contains(&format!("{}/{SECRET}", h.namespace))
            && message.contains(&format!("--secret-label-selector {LABEL}=true")),
        "the message names the Secret and the selector: {message}"
    );
    assert!(
        !h.table_exists("public.outbox").await,
        "nothing was done with an unselected Secret"
    );

    // Labelling it brings it into the watch, which starts the pass (no resync comes).
    h.patch_secret(SECRET, json!({"metadata": {"labels": {LABEL: "true"}}}))
        .await;
    h.wait_ready("orders").await;
    assert!(h.table_exists("public.outbox").await);
}

#[tokio::test]
async fn two_boxtables_on_one_database_conflict_across_secrets() {
    let h = Harness::start().await;
    h.apply_ready(boxtable("orders")).await;

    // Another Secret, another form of connection string, the same host, port and database.
    create_secret(&h, "same-db", &keyword_form(&h), json!({})).await;
    let bt = h
        .apply_stalled(boxtable("orders-copy").secret("same-db"), "TableConflict")
        .await;
    let message = &condition(bt.status.as_ref().unwrap(), "Ready")
        .unwrap()
        .message;
    assert!(
        message.contains(&format!(
            "public.outbox is already managed by BoxTable {}/orders",
            h.namespace
        )),
        "found from the Secrets, before connecting: {message}"
    );
    assert!(!message.contains("password"), "{message}");

    // The same table name on another database is no conflict.
    let admin = support::connect(&support::database_url()).await;
    let other = format!("{}_other", h.db.name);
    admin.batch(&format!("CREATE DATABASE \"{other}\"")).await;
    create_secret(
        &h,
        "other-db",
        &support::url_with_dbname(&h.db.url, &other),
        json!({}),
    )
    .await;
    h.apply_ready(boxtable("orders-elsewhere").secret("other-db"))
        .await;
}

/// The BoxTable's Stalled message once it says `says`.
async fn stalled_saying(h: &Harness, reason: &str, says: &str) -> String {
    let bt = h
        .wait_for(
            "orders",
            &format!("Stalled ({reason}) saying {says:?}"),
            |bt| {
                is_stalled_with(bt, reason)
                    && condition(bt.status.as_ref().unwrap(), "Stalled")
                        .is_some_and(|c| c.message.contains(says))
            },
        )
        .await;
    condition(bt.status.as_ref().unwrap(), "Stalled")
        .unwrap()
        .message
        .clone()
}

#[tokio::test]
async fn seventeen_hosts_or_an_endless_connect_timeout_stall_saying_what_is_allowed() {
    let hosts = (0..17)
        .map(|i| format!("h{i}.invalid"))
        .collect::<Vec<_>>()
        .join(",");
    let h = Harness::builder()
        .resync(NO_RESYNC)
        .connection_string(&format!("postgres://app:Zq7-pw@{hosts}/shop"))
        .start()
        .await;
    h.apply(boxtable("orders")).await;
    let says = "connection string lists 17 hosts; at most 16 are allowed";
    let message = stalled_saying(&h, "InvalidConnectionString", says).await;
    assert!(
        message.starts_with(&format!(
            "invalid connection string in secret {}/{SECRET} key \"connectionString\": {says}",
            h.namespace
        )),
        "{message}"
    );

    rotate(
        &h,
        "postgres://app:Zq7-pw@127.0.0.1:1/shop?connect_timeout=18446744073709551615",
    )
    .await;
    let message = stalled_saying(
        &h,
        "InvalidConnectionString",
        "invalid value for connect_timeout at byte 39: expected whole seconds from 0 to 60",
    )
    .await;
    assert!(!message.contains("Zq7-pw"), "{message}");
}

#[tokio::test]
async fn a_secret_with_separate_keys_as_cloudnativepg_writes_it_reaches_the_database() {
    let h = Harness::builder().without_secret().start().await;
    let config = h.db.config();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("the test database is reached over TCP, not {other:?}"),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let password = config.get_password().unwrap().to_vec();
    h.create_secret_data(
        SECRET,
        &[
            ("host", host.as_bytes()),
            ("port", port.as_bytes()),
            ("dbname", h.db.name.as_bytes()),
            ("user", config.get_user().unwrap().as_bytes()),
            ("password", &password),
            ("uri", b"postgresql://not-read"),
        ],
    )
    .await;
    let parameters = ConnectionParameters {
        sslmode: Some(SslModeParameter::Disable),
        ..ConnectionParameters::default()
    };
    h.apply_ready(boxtable("orders").separate_keys(ConnectionKeys::default(), parameters))
        .await;
    assert_eq!(h.history_versions("public", "outbox").await, vec![8]);
}

#[tokio::test]
async fn a_boxtable_reaches_a_server_that_admits_it_by_client_certificate_and_channel_binding() {
    use crate::support::reliability::cluster::{Cluster, Pki, SCRAM_PASSWORD};
    let pki = Pki::new("boxtable-test-ca");
    let cluster = Cluster::primary_with_client_auth(&pki).await;
    let h = Harness::builder().without_secret().start().await;
    let (cert, key) = pki.client("bt_both");
    let port = cluster.port.to_string();
    // bt_both needs its password (SCRAM, bound to TLS) and a certificate.
    h.create_secret_data(
        SECRET,
        &[
            ("host", b"127.0.0.1"),
            ("port", port.as_bytes()),
            ("dbname", b"postgres"),
            ("user", b"bt_both"),
            ("password", SCRAM_PASSWORD.as_bytes()),
            ("ca.crt", &pki.ca()),
            ("tls.crt", &cert),
            ("tls.key", &key),
        ],
    )
    .await;
    let parameters = ConnectionParameters {
        sslmode: Some(SslModeParameter::VerifyFull),
        channel_binding: Some(ChannelBindingParameter::Require),
        sslcert: Some("tls.crt".to_owned()),
        sslkey: Some("tls.key".to_owned()),
        ..ConnectionParameters::default()
    };
    h.apply_ready(boxtable("orders").separate_keys(ConnectionKeys::default(), parameters))
        .await;
    let admin = support::connect(&cluster.url("postgres")).await;
    let owner: String = admin
        .value(
            "SELECT tableowner::text FROM pg_tables WHERE schemaname = 'public' AND tablename = 'outbox'",
            &[],
        ).await;
    assert_eq!(owner, "bt_both");

    // Without the certificate the server refuses the role; the status says so.
    h.patch_spec(
        "orders",
        json!({"database": {"parameters": {"sslcert": null, "sslkey": null}}}),
    )
    .await;
    stalled_saying(&h, "AuthenticationFailed", "certificate").await;
}

/// The finalizers of Secret `name` (as the admin reads it), empty once it is gone.
async fn secret_finalizers(h: &Harness, name: &str) -> Vec<String> {
    h.secrets()
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|s| s.metadata.finalizers)
        .unwrap_or_default()
}

/// `query` with its `%XX` escapes decoded.
fn decoded(query: &str) -> String {
    let bytes = query.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = query.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn no_secret_is_fetched_with_get_and_an_unselected_secrets_data_never_reaches_the_operator() {
    let selector = format!("{LABEL}=true");
    let h = Harness::builder()
        .without_secret()
        .faults()
        .resync(NO_RESYNC)
        .secret_label_selector(&selector)
        .start()
        .await;
    // Both Secrets hold a working connection string: had the unselected one been read, its
    // BoxTable would have its table.
    create_secret(&h, SECRET, &h.db.url, json!({LABEL: "true"})).await;
    create_secret(&h, "unselected", &h.db.url, json!({"app": "other"})).await;
    h.apply(boxtable("orders").drop_policy()).await;
    h.apply(boxtable("other").table("other_outbox").secret("unselected"))
        .await;
    let orders = h.wait_ready("orders").await;
    h.wait_stalled("other", "SecretNotSelected").await;
    assert!(!h.table_exists("public.other_outbox").await);

    // The Drop BoxTable's finalizer goes onto its Secret, and off again once it is deleted.
    let guard = format!(
        "{}{}",
        boxtable_operator::crd::SECRET_FINALIZER_PREFIX,
        kube::ResourceExt::uid(&orders).unwrap()
    );
    wait_until(
        "the Secret to carry the Drop BoxTable's finalizer",
        || async { secret_finalizers(&h, SECRET).await.contains(&guard) },
    )
    .await;
    h.delete("orders").await;
    h.wait_gone("orders").await;
    assert!(!secret_finalizers(&h, SECRET).await.contains(&guard));
    // One of a BoxTable that never existed here (left behind while no operator ran) is taken
    // off too.
    let orphan = format!(
        "{}00000000-0000-4000-8000-000000000029",
        boxtable_operator::crd::SECRET_FINALIZER_PREFIX
    );
    h.patch_secret(SECRET, json!({"metadata": {"finalizers": [orphan]}}))
        .await;
    wait_until("the orphaned finalizer to be taken off", || async {
        !secret_finalizers(&h, SECRET).await.contains(&orphan)
    })
    .await;

    let gets = h.secret_requests("get");
    assert!(gets.is_empty(), "the operator GETs no Secret: {gets:?}");
    let on_secrets = requests_on_secrets(&h);
    let with_data: Vec<_> = on_secrets.iter().filter(|r| !r.metadata_only()).collect();
    assert!(
        with_data
            .iter()
            .any(|r| decoded(&r.query).contains(&format!("metadata.name={SECRET}"))),
        "the selected Secret was read by a list by name: {on_secrets:?}"
    );
    let unselected: Vec<_> = with_data
        .iter()
        .filter(|r| !decoded(&r.query).contains(&format!("labelSelector={selector}")))
        .collect();
    assert!(
        unselected.is_empty(),
        "every request for Secrets' data carries the label selector, so the API server sends \
         none of an unselected Secret: {unselected:?}"
    );
}
