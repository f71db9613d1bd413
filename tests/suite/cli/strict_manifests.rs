//! `migrate` judges manifests as kubectl and the CRD do (unknown fields, schema, CEL rules),
//! reads every file and reports every error, prints a summary with each table's database, and
//! uses `DATABASE_URL` only when asked to.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support;
use crate::support::Sql;
use crate::support::boxtable::boxtable;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn migrate(args: &[&str], env_url: Option<&str>) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_boxtable-operator"));
    cmd.arg("migrate").args(args).env_remove("DATABASE_URL");
    if let Some(url) = env_url {
        cmd.env("DATABASE_URL", url);
    }
    let out = cmd
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The summary row of `name`: its cells.
fn row<'a>(stdout: &'a str, name: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no summary row for {name}:\n{stdout}"))
        .split_whitespace()
        .collect()
}

async fn tables(db: &support::TestDb) -> Vec<String> {
    db.connect()
        .await
        .column(
            "SELECT schemaname || '.' || tablename FROM pg_tables \
             WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1",
            &[],
        )
        .await
}

#[tokio::test]
async fn a_typo_in_a_field_name_is_refused_as_kubectl_refuses_it_and_nothing_is_touched() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = boxtable("orders")
        .namespace("shop")
        .raw_spec("  tabel: orders_outbox\n")
        .write_manifest(dir.path(), "typo.yaml");

    let run = migrate(&["-f", &file, "--database-url", &db.url], None);

    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "{file}: document 1 (line 2) (BoxTable shop/orders): strict decoding error: unknown field \"spec.tabel\""
        )),
        "{}",
        run.stderr
    );
    assert_eq!(
        row(&run.stdout, "shop/orders")[3..],
        ["Invalid", "InvalidSpec"]
    );
    assert!(
        tables(&db).await.is_empty(),
        "public.outbox must not be touched"
    );
}

#[tokio::test]
async fn the_crds_schema_and_cel_rules_judge_every_document_and_the_valid_one_still_runs() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let long = format!("t{}", "x".repeat(63));
    let docs = [
        ("good", "  table: good_outbox\n".to_owned()),
        ("pattern", "  schema: my-schema\n".to_owned()),
        ("enum", "  payload: Xml\n".to_owned()),
        ("range", "  targetVersion: 9\n".to_owned()),
        ("length", format!("  table: {long}\n")),
        ("cel-payload", "  payload: Json\n".to_owned()),
        ("duration", "  lock:\n    timeout: soon\n".to_owned()),
    ];
    let mut text: String = docs
        .iter()
        .map(|(n, s)| boxtable(n).namespace("shop").raw_spec(s).manifest())
        .collect();
    text.push_str(
        &boxtable("cel-inbox")
            .namespace("shop")
            .raw_spec("  targetVersion: 3\n")
            .manifest()
            .replace("box: Outbox", "box: Inbox"),
    );
    text.push_str(
        "---\napiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: required\n  namespace: shop\nspec:\n  box: Outbox\n",
    );
    let file = write(dir.path(), "all.yaml", &text);

    let run = migrate(&["-f", &file, "--database-url", &db.url], None);

    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    let expected = [
        ("pattern", 2, "spec.schema: Invalid value: \"my-schema\""),
        ("enum", 3, "spec.payload: Invalid value: \"Xml\""),
        ("range", 4, "spec.targetVersion: Invalid value: 9"),
        ("length", 5, "spec.table: Invalid value:"),
        (
            "cel-payload",
            6,
            "spec: Invalid value: Json and Jsonb payloads are for an Inbox only",
        ),
        ("duration", 7, "spec.lock.timeout: Invalid value: \"soon\""),
        (
            "cel-inbox",
            8,
            "spec: Invalid value: an Inbox has versions 1 to 2",
        ),
        ("required", 9, "spec.database: Required value"),
    ];
    for (name, index, message) in expected {
        let line = run
            .stderr
            .lines()
            .find(|l| l.contains(&format!("(BoxTable shop/{name})")))
            .unwrap_or_else(|| panic!("no error for {name}:\n{}", run.stderr));
        assert!(
            line.contains(&format!("{file}: document {index} ")) && line.contains(message),
            "{name}: {line}"
        );
        assert_eq!(
            row(&run.stdout, &format!("shop/{name}"))[3..],
            ["Invalid", "InvalidSpec"]
        );
    }
    assert_eq!(row(&run.stdout, "shop/good")[1], "public.good_outbox");
    assert_eq!(row(&run.stdout, "shop/good")[3..], ["Ready", "Migrated"]);
    let found = tables(&db).await;
    assert!(
        found.contains(&"public.good_outbox".to_owned()),
        "{found:?}"
    );
    assert_eq!(
        found.len(),
        2,
        "only the valid table and the history: {found:?}"
    );
}

#[tokio::test]
async fn database_url_in_the_environment_is_ignored_unless_a_flag_asks_for_it_and_then_it_is_said()
{
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = boxtable("orders")
        .namespace("shop")
        .write_manifest(dir.path(), "outbox.yaml");

    let ignored = migrate(&["-f", &file], Some(&db.url));

    assert_eq!(
        ignored.code,
        Some(1),
        "{}\n{}",
        ignored.stdout,
        ignored.stderr
    );
    assert!(
        ignored.stderr.contains(
            "DATABASE_URL is set in the environment and ignored; pass --database-url-from-env"
        ),
        "{}",
        ignored.stderr
    );
    assert_eq!(
        row(&ignored.stdout, "shop/orders")[3..],
        ["Failed", "SecretNotFound"]
    );
    assert!(tables(&db).await.is_empty());

    let used = migrate(&["-f", &file, "--database-url-from-env"], Some(&db.url));

    assert_eq!(used.code, Some(0), "{}\n{}", used.stdout, used.stderr);
    assert!(
        used.stderr
            .contains("every table uses the database in DATABASE_URL (--database-url-from-env)"),
        "{}",
        used.stderr
    );
    let config = db.config();
    let user = config.get_user().unwrap();
    let row = row(&used.stdout, "shop/orders");
    assert_eq!(row[1], "public.outbox");
    assert!(
        row[2].starts_with(&format!("{user}@")) && row[2].ends_with(&format!("/{}", db.name)),
        "the database target names user, host, port and database: {row:?}"
    );
    assert_eq!(row[3..], ["Ready", "Migrated"]);
    if let Some(password) = config.get_password() {
        let password = String::from_utf8_lossy(password);
        assert!(!used.stdout.contains(&*password) && !used.stderr.contains(&*password));
    }
}

#[tokio::test]
async fn every_file_is_read_every_error_reported_then_one_summary_and_the_worst_exit_code() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a-broken.yaml",
        "apiVersion: v1\nkind: [unclosed\n",
    );
    boxtable("typo")
        .namespace("shop")
        .raw_spec("  shcema: sales\n")
        .write_manifest(dir.path(), "b-typo.yaml");
    boxtable("good")
        .namespace("shop")
        .raw_spec("  table: good_outbox\n")
        .write_manifest(dir.path(), "c-good.yaml");
    write(
        dir.path(),
        "d-other.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n",
    );
    let dir_arg = dir.path().to_str().unwrap();

    let run = migrate(&["-f", dir_arg, "--database-url", &db.url], None);

    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("a-broken.yaml: document 1 (line ")
            && run.stderr.contains("): not valid YAML"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("b-typo.yaml: document 1 (line 2) (BoxTable shop/typo): strict decoding error: unknown field \"spec.shcema\""),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("skipped") && run.stderr.contains("v1/ConfigMap settings"));
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["BOXTABLE", "TABLE", "DATABASE", "RESULT", "REASON"]
    );
    assert_eq!(row(&run.stdout, "shop/good")[3..], ["Ready", "Migrated"]);
    assert_eq!(
        row(&run.stdout, "shop/typo")[3..],
        ["Invalid", "InvalidSpec"]
    );
    assert!(
        lines[1].contains("a-broken.yaml: document 1") && lines[1].contains("Invalid"),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("apiVersion") && !run.stderr.contains("unclosed\n"),
        "no YAML is echoed:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(tables(&db).await.contains(&"public.good_outbox".to_owned()));
}

#[tokio::test]
async fn a_suspended_table_behind_its_target_exits_2_and_one_at_its_target_exits_0() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let suspended = boxtable("orders")
        .namespace("shop")
        .raw_spec("  suspend: true\n")
        .write_manifest(dir.path(), "s.yaml");
    let active = boxtable("orders")
        .namespace("shop")
        .write_manifest(dir.path(), "a.yaml");

    let behind = migrate(&["-f", &suspended, "--database-url", &db.url], None);
    assert_eq!(behind.code, Some(2), "{}\n{}", behind.stdout, behind.stderr);
    assert_eq!(
        row(&behind.stdout, "shop/orders")[3..],
        ["Pending", "Suspended"]
    );

    assert_eq!(
        migrate(&["-f", &active, "--database-url", &db.url], None).code,
        Some(0)
    );
    let at_target = migrate(&["-f", &suspended, "--database-url", &db.url], None);
    assert_eq!(at_target.code, Some(0), "{}", at_target.stdout);
}

#[tokio::test]
async fn a_path_that_cannot_be_read_is_reported_and_the_other_files_still_run() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let good = boxtable("good")
        .namespace("shop")
        .write_manifest(dir.path(), "good.yaml");
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().unwrap();

    let run = migrate(
        &["-f", missing, "-f", &good, "--database-url", &db.url],
        None,
    );

    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains(&format!("error: {missing}: cannot be read")),
        "{}",
        run.stderr
    );
    assert_eq!(row(&run.stdout, missing)[3..], ["Invalid", "Unreadable"]);
    assert_eq!(row(&run.stdout, "shop/good")[3..], ["Ready", "Migrated"]);
}

/// A BoxTable whose only fault is one the run itself never looks at (the Secret's name breaks
/// its pattern, and `--database-url` names the database): the decoded document plans, so its
/// pass gets as far as the judge lets it.
fn refused_but_plannable(table: &str) -> String {
    format!(
        "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: {table}\n  namespace: shop\n\
         spec:\n  box: Outbox\n  table: {table}\n  lock:\n    timeout: 30s\n  database:\n    secretRef:\n      name: Not_A_Secret_Name\n"
    )
}

#[tokio::test]
async fn a_refused_manifest_changes_nothing_and_never_reports_ready_however_far_its_reads_got() {
    let db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let good = boxtable("ready")
        .namespace("shop")
        .table("ready")
        .write_manifest(dir.path(), "good.yaml");
    let run = migrate(&["-f", &good, "--database-url", &db.url], None);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let refusal = "spec.database.secretRef.name: Invalid value: \"Not_A_Secret_Name\"";

    // Up to date already: the lock-free read alone would say Ready; the verdict says Invalid.
    let file = write(dir.path(), "ready.yaml", &refused_but_plannable("ready"));
    let run = migrate(&["-f", &file, "--database-url", &db.url], None);
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        row(&run.stdout, "shop/ready")[3..],
        ["Invalid", "InvalidSpec"]
    );
    assert!(run.stderr.contains(refusal), "{}", run.stderr);

    // Not there yet and its lock free: the run reaches its gate, which withdraws it.
    let file = write(dir.path(), "fresh.yaml", &refused_but_plannable("fresh"));
    let run = migrate(&["-f", &file, "--database-url", &db.url], None);
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        row(&run.stdout, "shop/fresh")[3..],
        ["Invalid", "InvalidSpec"]
    );

    // Its lock held by another migrator: the refusal ends the wait at once, not after the 30s
    // lock timeout, and the holder keeps the lock.
    let holder = db.connect().await;
    let key = support::controller::lock_key("public", "held");
    holder
        .query_one("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let file = write(dir.path(), "held.yaml", &refused_but_plannable("held"));
    let started = std::time::Instant::now();
    let run = migrate(&["-f", &file, "--database-url", &db.url], None);
    let took = started.elapsed();
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        row(&run.stdout, "shop/held")[3..],
        ["Invalid", "InvalidSpec"]
    );
    assert!(
        took < std::time::Duration::from_secs(10),
        "a refused manifest waited {took:?} for its lock"
    );
    assert_eq!(
        support::advisory_locks(&holder).await,
        1,
        "only the holder's lock"
    );

    assert_eq!(
        tables(&db).await,
        ["public.__BrighterMigrationHistory", "public.ready"],
        "only the valid table and the history"
    );
    let history = support::migrate::history(&holder, "public").await;
    assert!(
        !history.is_empty() && history.iter().all(|(_, _, table, _, _)| table == "ready"),
        "no history row for a refused manifest: {history:?}"
    );
}
