//! `boxtable-operator migrate`: BoxTable manifests applied straight to a database by separate
//! processes, with the same code path as the controller.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support;
use crate::support::Sql;

fn migrate(args: &[&str], database_url: Option<&str>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_boxtable-operator"));
    cmd.arg("migrate")
        .args(args)
        .args(["-o", "yaml"])
        .env_remove("DATABASE_URL");
    if let Some(url) = database_url {
        cmd.args(["--database-url", url]);
    }
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The printed results, one YAML document per BoxTable.
fn statuses(stdout: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple(stdout).unwrap()
}

fn ready_reason(doc: &serde_json::Value) -> (String, String) {
    let ready = support::reliability::ready_condition(doc).unwrap();
    (
        ready["status"].as_str().unwrap().to_owned(),
        ready["reason"].as_str().unwrap().to_owned(),
    )
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Writes `manifests` to `dir/name`, runs `migrate -f` on the file, and asserts that it succeeded
/// and that the first BoxTable printed was migrated.
fn assert_migrates(dir: &Path, name: &str, manifests: &str) {
    let file = write(dir, name, manifests);
    let out = migrate(&["-f", &file], None).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(ready_reason(&statuses(&stdout)[0]).1, "Migrated");
}

const OUTBOX: &str = "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: orders\n  namespace: shop\n\
spec:\n  box: Outbox\n  database:\n    secretRef:\n      name: shop-db\n";

#[tokio::test]
async fn the_examples_are_provisioned_and_every_status_is_printed_ready() {
    let db = support::fresh_db().await;
    db.connect().await.batch("CREATE SCHEMA billing").await;

    let out = migrate(&["-f", "examples/", "--concurrency", "2"], Some(&db.url))
        .output()
        .unwrap();

    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("skipped") && stderr.contains("v1/Namespace shop"),
        "{stderr}"
    );
    let docs = statuses(&stdout);
    let names: Vec<&str> = docs.iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "scratch-outbox",
            "orders-inbox",
            "orders-outbox",
            "billing-outbox"
        ]
    );
    for doc in &docs {
        assert_eq!(
            ready_reason(doc),
            ("True".to_owned(), "Migrated".to_owned()),
            "{doc:?}"
        );
    }
    let outbox = docs.iter().find(|d| d["name"] == "orders-outbox").unwrap();
    assert_eq!(
        outbox["status"]["lock"]["key"].as_str(),
        Some("-5469556670739463647")
    );
    assert_eq!(outbox["status"]["appliedVersion"].as_u64(), Some(8));
    assert_eq!(outbox["status"]["lastRun"]["path"].as_str(), Some("Fresh"));

    let again = migrate(&["-f", "examples/"], Some(&db.url))
        .output()
        .unwrap();
    let (stdout, _) = text(&again);
    assert!(again.status.success());
    for doc in statuses(&stdout) {
        assert_eq!(
            ready_reason(&doc),
            ("True".to_owned(), "UpToDate".to_owned())
        );
    }
}

#[tokio::test]
async fn eight_migrate_processes_at_once_create_the_table_once_and_leave_no_lock() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "outbox.yaml", OUTBOX);

    let children: Vec<_> = (0..8)
        .map(|_| migrate(&["-f", &file], Some(&db.url)).spawn().unwrap())
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();

    let mut reasons: Vec<String> = Vec::new();
    for out in &outputs {
        let (stdout, stderr) = text(out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        reasons.push(ready_reason(&statuses(&stdout)[0]).1);
    }
    reasons.sort();
    assert_eq!(
        reasons.iter().filter(|r| *r == "Migrated").count(),
        1,
        "{reasons:?}"
    );
    assert_eq!(
        reasons.iter().filter(|r| *r == "UpToDate").count(),
        7,
        "{reasons:?}"
    );
    let client = db.connect().await;
    let rows: Vec<String> = client
        .column(
            "SELECT \"Description\" FROM public.\"__BrighterMigrationHistory\"",
            &[],
        )
        .await;
    assert_eq!(rows, ["fresh install at V8"]);
    assert_eq!(support::advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn without_a_url_the_connection_string_comes_from_the_secret_among_the_files() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: shop-db\n  namespace: shop\nstringData:\n  connectionString: {:?}\n",
        db.url
    );
    let file = write(dir.path(), "all.yaml", &format!("{secret}---\n{OUTBOX}"));

    let out = migrate(&["-f", &file], None).output().unwrap();

    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(ready_reason(&statuses(&stdout)[0]).1, "Migrated");
}

#[test]
fn a_missing_database_fails_with_a_status_that_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "outbox.yaml", OUTBOX);

    let out = migrate(&["-f", &file], None).output().unwrap();

    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    let doc = &statuses(&stdout)[0];
    assert_eq!(
        ready_reason(doc),
        ("False".to_owned(), "SecretNotFound".to_owned())
    );
    let message = doc["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
        + doc["status"]["conditions"][1]["message"]
            .as_str()
            .unwrap_or_default()
        + doc["status"]["conditions"][2]["message"]
            .as_str()
            .unwrap_or_default();
    assert!(message.contains("--database-url"), "{message}");
}

#[test]
fn files_without_boxtables_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n",
    );

    let out = migrate(&["-f", &file], Some("postgres://nobody@127.0.0.1:1/none"))
        .output()
        .unwrap();

    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("no BoxTable manifests"), "{stderr}");
}

#[tokio::test]
async fn many_tables_share_at_most_concurrency_sessions() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let manifests: String = (1..=6)
        .map(|i| {
            format!(
                "---\n{}",
                OUTBOX
                    .replace("name: orders", &format!("name: orders-{i}"))
                    .replace(
                        "  box: Outbox\n",
                        &format!("  box: Outbox\n  table: outbox_{i}\n"),
                    )
            )
        })
        .collect();
    let file = write(dir.path(), "six.yaml", &manifests);
    let client = db.connect().await;
    // A trigger records the backend that wrote each history row, so the sessions that migrated
    // can be counted on every supported PostgreSQL (pg_stat_database.sessions only exists from 14).
    client
        .batch(&format!(
            "{};
             CREATE TABLE public.writers (pid int NOT NULL);
             CREATE FUNCTION public.note_writer() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN INSERT INTO public.writers VALUES (pg_backend_pid()); RETURN NULL; END $$;
             CREATE TRIGGER note_writer AFTER INSERT ON public.\"__BrighterMigrationHistory\"
               FOR EACH ROW EXECUTE FUNCTION public.note_writer();",
            support::migrate::create_history_table("public")
        ))
        .await;

    let out = migrate(&["-f", &file, "--concurrency", "2"], Some(&db.url))
        .output()
        .unwrap();

    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(statuses(&stdout).len(), 6);
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT pid) FROM public.writers",
            &[],
        )
        .await
        .unwrap();
    let (rows, sessions): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(rows, 6, "one history row per table");
    assert!(
        (1..=2).contains(&sessions),
        "six tables were migrated by {sessions} sessions"
    );
}

#[tokio::test]
async fn a_run_prints_the_drifted_condition_the_controller_writes_and_the_plan_reports_the_same_drift()
 {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "outbox.yaml", OUTBOX);
    let out = migrate(&["-f", &file], Some(&db.url)).output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    // An extra NOT NULL column without a default: every insert Brighter makes fails.
    db.connect()
        .await
        .batch("ALTER TABLE public.outbox ADD COLUMN shard int NOT NULL")
        .await;

    let out = migrate(&["-f", &file], Some(&db.url)).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "drift is reported, it does not fail the run: {stdout}\n{stderr}"
    );
    let doc = &statuses(&stdout)[0];
    assert_eq!(
        ready_reason(doc),
        ("True".to_owned(), "UpToDate".to_owned())
    );
    let drifted = doc["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Drifted")
        .unwrap_or_else(|| panic!("no Drifted condition in the status: {stdout}"));
    assert_eq!(drifted["status"], "True", "{drifted}");
    assert_eq!(drifted["reason"], "Drifted", "{drifted}");
    let message = drifted["message"].as_str().unwrap();
    assert!(message.contains("shard"), "{message}");
    assert!(
        stderr.contains(&format!("shop/orders: DRIFT: {message}")),
        "the summary says so too: {stderr}"
    );

    let plan = Command::new(env!("CARGO_BIN_EXE_boxtable-operator"))
        .args(["plan", "-f", &file, "--database-url", &db.url, "-o", "json"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let plan: Vec<serde_json::Value> = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan[0]["plan"]["drift"]["drifted"], true);
    assert_eq!(
        plan[0]["plan"]["drift"]["message"], message,
        "the plan and the run report the same drift"
    );
}

/// The first printed result's reason and message.
fn verdict(stdout: &str) -> (String, String) {
    let doc = &statuses(stdout)[0];
    (
        doc["reason"].as_str().unwrap_or_default().to_owned(),
        doc["message"].as_str().unwrap_or_default().to_owned(),
    )
}

fn secret_manifest(pairs: &[(&str, &str)]) -> String {
    let mut out = String::from(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: shop-db\n  namespace: shop\nstringData:\n",
    );
    for (key, value) in pairs {
        out.push_str(&format!("  {key}: {value:?}\n"));
    }
    out
}

#[test]
fn seventeen_hosts_or_an_endless_connect_timeout_are_refused_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = (0..17)
        .map(|i| format!("h{i}.invalid"))
        .collect::<Vec<_>>()
        .join(",");
    let many = format!("postgres://app:pw@{hosts}/shop");
    let endless = "postgres://app:pw@127.0.0.1:1/shop?connect_timeout=18446744073709551615";
    let cases = [
        (
            many.as_str(),
            "connection string lists 17 hosts; at most 16 are allowed",
        ),
        (
            endless,
            "invalid value for connect_timeout at byte 35: expected whole seconds from 0 to 60",
        ),
    ];
    for (url, says) in cases {
        let outbox = write(dir.path(), "outbox.yaml", OUTBOX);
        let out = migrate(&["-f", &outbox], Some(url)).output().unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
        let (reason, message) = verdict(&stdout);
        assert_eq!(reason, "InvalidConnectionString", "{message}");
        assert_eq!(message, format!("invalid connection string: {says}"));

        let secret = secret_manifest(&[("connectionString", url)]);
        let file = write(dir.path(), "all.yaml", &format!("{secret}---\n{OUTBOX}"));
        let out = migrate(&["-f", &file], None).output().unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
        let (reason, message) = verdict(&stdout);
        assert_eq!(reason, "InvalidConnectionString", "{message}");
        assert_eq!(
            message,
            format!(
                "invalid connection string in secret shop/shop-db key \"connectionString\": {says}"
            )
        );
        assert!(!stdout.contains(":pw@") && !stderr.contains(":pw@"));
    }
}

#[tokio::test]
async fn a_secret_with_separate_keys_as_cloudnativepg_and_crossplane_write_them_reaches_the_database()
 {
    let db = support::fresh_db().await;
    let settings = boxtable_operator::db::ConnectionSettings::parse(&db.url).unwrap();
    let (host, port) = settings.endpoints()[0].clone();
    let port = port.to_string();
    let password = settings.password().unwrap().expose().to_owned();
    let dir = tempfile::tempdir().unwrap();
    // CloudNativePG's <cluster>-app Secret, read with every default key name.
    let cnpg = secret_manifest(&[
        ("host", &host),
        ("port", &port),
        ("dbname", &db.name),
        ("user", settings.user()),
        ("username", settings.user()),
        ("password", &password),
        ("uri", "postgresql://not-read"),
        ("pgpass", "not-read"),
    ]);
    let cnpg_outbox = OUTBOX.replace(
        "      name: shop-db\n",
        "      name: shop-db\n      keys: {}\n    parameters:\n      sslmode: disable\n      connect_timeout: 5\n",
    );
    assert_migrates(
        dir.path(),
        "cnpg.yaml",
        &format!("{cnpg}---\n{cnpg_outbox}"),
    );

    // Crossplane's connection Secret: the host is `endpoint`, the user `username`.
    let crossplane = secret_manifest(&[
        ("endpoint", &host),
        ("port", &port),
        ("username", settings.user()),
        ("password", &password),
        ("database", &db.name),
    ]);
    let crossplane_inbox = OUTBOX.replace("box: Outbox", "box: Inbox").replace(
        "      name: shop-db\n",
        "      name: shop-db\n      keys:\n        host: endpoint\n        user: username\n        dbname: database\n",
    );
    assert_migrates(
        dir.path(),
        "crossplane.yaml",
        &format!("{crossplane}---\n{crossplane_inbox}"),
    );
}

#[tokio::test]
async fn a_table_locked_by_a_long_transaction_fails_the_migration_after_the_default_ddl_lock_timeout()
 {
    let (db, client) = support::fresh_db_and_client().await;
    support::migrate::outbox_at(&client, "public.outbox", 6, 1).await;
    let holder = db.connect().await;
    holder
        .batch("BEGIN; LOCK TABLE public.outbox IN ACCESS EXCLUSIVE MODE")
        .await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "outbox.yaml", OUTBOX);

    let started = std::time::Instant::now();
    let mut child = tokio::process::Command::from(migrate(&["-f", &file], Some(&db.url)));
    let run = child.kill_on_drop(true).output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), run)
        .await
        .expect("the migration must give up waiting for the table lock")
        .unwrap();
    let took = started.elapsed();

    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let (reason, message) = verdict(&stdout);
    assert_eq!(reason, "MigrationFailed", "{message}");
    assert!(
        message.starts_with(
            "migration V7 (Add dataref, specversion columns) for public.outbox waited 10s for a lock on \
             the table that another transaction holds (lock_timeout, spec.ddl.lockTimeout) and was \
             rolled back; it is retried: end that transaction, or raise spec.ddl.lockTimeout"
        ),
        "{message}"
    );
    assert!(took >= std::time::Duration::from_secs(10), "{took:?}");
    holder.batch("ROLLBACK").await;
    assert_eq!(support::advisory_locks(&client).await, 0);
}

#[tokio::test]
async fn with_a_database_url_sslrootcert_sslcert_and_sslkey_name_files_as_for_psql() {
    use crate::support::reliability::cluster::{Cluster, Pki};
    let pki = Pki::new("boxtable-test-ca");
    let cluster = Cluster::primary_with_client_auth(&pki).await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pki.client("bt_cert");
    let ca = write(
        dir.path(),
        "root.crt",
        &String::from_utf8(pki.ca()).unwrap(),
    );
    let cert = write(dir.path(), "bt_cert.crt", &String::from_utf8(cert).unwrap());
    let key = write(dir.path(), "bt_cert.key", &String::from_utf8(key).unwrap());
    let outbox = write(dir.path(), "outbox.yaml", OUTBOX);
    let url = format!(
        "postgres://bt_cert@127.0.0.1:{}/postgres?sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}",
        cluster.port
    );

    let out = migrate(&["-f", &outbox], Some(&url)).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(ready_reason(&statuses(&stdout)[0]).1, "Migrated");

    let out = migrate(&["-f", &outbox, "--ca-file", &ca], Some(&url))
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        verdict(&stdout),
        (
            "InvalidConnectionString".to_owned(),
            "--ca-file and sslrootcert both name the CA bundle: give one".to_owned()
        )
    );
}
