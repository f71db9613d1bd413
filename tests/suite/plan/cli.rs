//! `boxtable-operator plan` / `migrate --dry-run`: what each run would do, read without the lock,
//! and the exact statements a run then sends (checked against what the server received).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::support;
use crate::support::Sql;
use crate::support::boxtable::boxtable;

fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_boxtable-operator"));
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out: Output = command(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The statements a run changed the database with: what the server received minus reads,
/// transaction control and session settings.
fn changes(sent: &[support::wire::Sent]) -> Vec<(String, Vec<Option<Vec<u8>>>)> {
    const NOT_CHANGES: [&str; 9] = [
        "SELECT",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
        "SET",
        "RESET",
        "SHOW",
    ];
    sent.iter()
        .filter(|s| {
            let head = s.sql.trim_start().to_ascii_uppercase();
            !s.sql.is_empty() && !NOT_CHANGES.iter().any(|k| head.starts_with(k))
        })
        .map(|s| (s.sql.clone(), s.params.clone()))
        .collect()
}

/// A plan's statements as the server would receive them: the SQL, and each parameter in the
/// binary form the driver sends (`int4` big-endian, text as UTF-8).
fn planned(results: &[Value]) -> Vec<(String, Vec<Option<Vec<u8>>>)> {
    results
        .iter()
        .flat_map(|r| {
            r["plan"]["statements"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|s| {
            let params = s["parameters"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|p| match p {
                    Value::Number(n) => Some(
                        i32::try_from(n.as_i64().unwrap())
                            .unwrap()
                            .to_be_bytes()
                            .to_vec(),
                    ),
                    Value::String(t) => Some(t.as_bytes().to_vec()),
                    other => panic!("unexpected parameter {other}"),
                })
                .collect();
            (s["sql"].as_str().unwrap().to_owned(), params)
        })
        .collect()
}

// The proxy runs on the runtime's other worker while the test blocks on the child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_lists_byte_for_byte_the_statements_the_run_then_sends() {
    let (db, client) = support::fresh_db_and_client().await;
    client.batch("CREATE SCHEMA sales").await;
    // An outbox an older Brighter left at V5 with no history: the run adopts it (Bootstrap).
    support::migrate::outbox_at(&client, "public.legacy_outbox", 5, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let first = boxtable("orders")
        .namespace("shop")
        .raw_spec("  targetVersion: 5\n")
        .write_manifest(dir.path(), "a-first.yaml");
    let (code, _, stderr) = run(&["migrate", "-f", &first, "--database-url", &db.url]);
    assert_eq!(code, Some(0), "{stderr}");
    let manifests = [
        // Normal: V5 to V8 on the table the first run created.
        boxtable("orders").namespace("shop").manifest(),
        // Bootstrap of the hand-made table.
        boxtable("legacy")
            .namespace("shop")
            .raw_spec("  table: legacy_outbox\n")
            .manifest(),
        // Fresh, with a per-schema history seeded from public's.
        boxtable("sales-inbox")
            .namespace("shop")
            .inbox()
            .raw_spec("  schema: sales\n  historyScope: PerSchema\n  payload: Jsonb\n")
            .manifest(),
    ]
    .concat();
    let file = write(dir.path(), "b-all.yaml", &manifests);
    let before = support::migrate::snapshot(&client).await;

    let (code, stdout, stderr) =
        run(&["plan", "-f", &file, "--database-url", &db.url, "-o", "json"]);

    assert_eq!(code, Some(2), "changes are pending: {stdout}\n{stderr}");
    assert_eq!(
        support::migrate::snapshot(&client).await,
        before,
        "a plan writes nothing"
    );
    let results: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    let paths: Vec<&str> = results
        .iter()
        .map(|r| r["plan"]["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["Normal", "Bootstrap", "Fresh"]);
    let plan = planned(&results);
    assert!(plan.len() > 10, "{plan:?}");
    assert!(
        plan.iter().any(|(sql, _)| sql
            .starts_with("INSERT INTO \"sales\".\"__BrighterMigrationHistory\"")
            && sql.contains("SELECT")),
        "the per-schema seed is listed: {plan:?}"
    );

    // The same plan as text shows every statement verbatim.
    let (code, text, _) = run(&[
        "migrate",
        "--dry-run",
        "-f",
        &file,
        "--database-url",
        &db.url,
    ]);
    assert_eq!(code, Some(2));
    for (sql, _) in &plan {
        assert!(text.contains(sql.as_str()), "{sql} missing from\n{text}");
    }
    assert!(text.contains("-- parameters: $1 = 5, $2 = 'public', $3 = 'legacy_outbox', $4 = 'bootstrap: detected at V5'"), "{text}");

    let proxy = support::wire::start(support::wire::upstream(&db.config())).await;
    let url = support::wire::through(&db.config(), proxy.addr);
    let (code, stdout, stderr) = run(&["migrate", "-f", &file, "--database-url", &url]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");

    assert_eq!(changes(&proxy.sent()), plan);
    let (code, stdout, _) = run(&["plan", "-f", &file, "--database-url", &db.url, "-o", "json"]);
    assert_eq!(code, Some(0), "nothing left to do: {stdout}");
    let results: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert!(
        results
            .iter()
            .all(|r| r["result"] == "Ready" && r["plan"]["statements"] == Value::Array(vec![])),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_plan_takes_no_lock_and_waits_for_none() {
    let db = support::fresh_db().await;
    let holder = db.connect().await;
    support::reliability::hold_brighter_lock(&holder, "outbox").await;
    let dir = tempfile::tempdir().unwrap();
    let file = boxtable("orders")
        .namespace("shop")
        .raw_spec("  lock:\n    timeout: 1h\n")
        .write_manifest(dir.path(), "outbox.yaml");

    let proxy = support::wire::start(support::wire::upstream(&db.config())).await;
    let url = support::wire::through(&db.config(), proxy.addr);
    let mut child = command(&["plan", "-f", &file, "--database-url", &url, "-o", "yaml"])
        .spawn()
        .unwrap();
    // A plan that queued for the held lock would wait up to its 1h timeout.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the plan waited for the held lock");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let out = child.wait_with_output().unwrap();
    let (code, stdout) = (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    );

    assert_eq!(code, Some(2), "{stdout}");
    let advisory: Vec<_> = proxy
        .sent()
        .into_iter()
        // Any function that takes, tries or releases an advisory lock (the session pool reads
        // pg_locks before keeping a session; reading is no lock).
        .filter(|s| s.sql.contains("advisory_lock") || s.sql.contains("advisory_unlock"))
        .collect();
    assert!(
        advisory.is_empty(),
        "a plan took or tried the lock: {advisory:?}"
    );
    let doc: Value = serde_saphyr::from_multiple::<Value>(&stdout)
        .unwrap()
        .remove(0);
    assert_eq!(doc["plan"]["path"], "Fresh");
    assert_eq!(doc["plan"]["lockKey"], "BrighterMigration_public.outbox");
    assert_eq!(doc["database"]["database"], db.name.as_str());
}

#[test]
fn a_plan_that_cannot_reach_its_database_exits_1_not_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = boxtable("orders")
        .namespace("shop")
        .write_manifest(dir.path(), "outbox.yaml");

    let (code, stdout, _) = run(&[
        "plan",
        "-f",
        &file,
        "--database-url",
        "postgres://nobody@127.0.0.1:1/none?connect_timeout=5",
    ]);

    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("Failed") && stdout.contains("ConnectionFailed"),
        "{stdout}"
    );
}

#[test]
fn a_usage_error_exits_1_so_it_never_reads_as_changes_pending() {
    let (code, _, stderr) = run(&["plan", "--no-such-flag"]);
    assert_eq!(code, Some(1), "{stderr}");
}

#[tokio::test]
async fn an_up_to_date_table_plans_no_statements_exits_0_and_reports_its_drift_as_json() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = boxtable("orders")
        .namespace("shop")
        .write_manifest(dir.path(), "outbox.yaml");
    let url_file = write(dir.path(), "database-url", &format!("{}\n", db.url));
    let (code, _, stderr) = run(&["migrate", "-f", &file, "--database-url-file", &url_file]);
    assert_eq!(code, Some(0), "{stderr}");

    let (code, stdout, stderr) = run(&[
        "plan",
        "-f",
        &file,
        "--database-url-file",
        &url_file,
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let doc: Value = serde_json::from_str::<Vec<Value>>(&stdout)
        .unwrap()
        .remove(0);
    assert_eq!(doc["plan"]["path"], "UpToDate");
    assert_eq!(doc["plan"]["statements"], serde_json::json!([]));
    assert_eq!(doc["plan"]["drift"]["drifted"], false);

    db.connect()
        .await
        .batch("ALTER TABLE public.outbox ALTER COLUMN topic TYPE text")
        .await;
    let (code, stdout, _) = run(&["plan", "-f", &file, "--database-url-file", &url_file]);
    assert_eq!(
        code,
        Some(0),
        "drift is reported, it is no change a run would make"
    );
    assert!(
        stdout.contains(
            "# DRIFT: public.outbox differs from the shape of version 8: column topic is text, expected character varying(255)"
        ),
        "{stdout}"
    );
    assert!(
        !stdout.contains(&db.url),
        "the connection string is never printed"
    );
}

#[test]
fn a_database_url_file_that_cannot_be_read_exits_1_naming_the_file() {
    let (code, _, stderr) = run(&[
        "plan",
        "-f",
        "examples/outbox.yaml",
        "--database-url-file",
        "/nonexistent/connectionString",
    ]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("--database-url-file /nonexistent/connectionString"),
        "{stderr}"
    );
}
