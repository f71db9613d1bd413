//! Fixtures for the reliability scenarios: the real `migrate` binary as a child process, a DDL hook
//! that pauses or fails the run at its Nth DDL statement, waits on server-side conditions with a
//! deadline, the outbox's expected columns per version, and private PostgreSQL clusters that a test
//! may restart or replicate without disturbing the shared test server.

pub mod cluster;
pub mod pooler;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::support::db::Sql;
use crate::support::migrate::history_exists;
use crate::support::wait::wait_until_within;
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

/// `application_name` of the `migrate` command's sessions.
pub const MIGRATE_APP: &str = "boxtable-operator-migrate";

/// The two-int advisory lock the DDL hook waits on (objsubid 2: never confused with Brighter's).
pub const PAUSE_LOCK: (i32, i32) = (7, 7);

/// An event trigger on `ddl_command_end` for the operator's sessions only: it counts the DDL
/// statements of the current transaction and, at `reliability.pause_at`, waits on [`PAUSE_LOCK`];
/// at `reliability.fail_at`, raises an error. Both settings are read per session (set them with
/// `ALTER DATABASE ... SET`).
pub const DDL_HOOK: &str = r#"
CREATE FUNCTION public.reliability_ddl_hook() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE
  n int := coalesce(nullif(current_setting('reliability.ddl_count', true), ''), '0')::int + 1;
BEGIN
  IF current_setting('application_name') NOT LIKE 'boxtable-operator%' THEN
    RETURN;
  END IF;
  PERFORM set_config('reliability.ddl_count', n::text, true);
  IF n::text = current_setting('reliability.pause_at', true) THEN
    PERFORM pg_advisory_xact_lock_shared(7, 7);
  END IF;
  IF n::text = current_setting('reliability.fail_at', true) THEN
    RAISE EXCEPTION 'step failure injected by the reliability test at ddl statement %', n;
  END IF;
END $$;
CREATE EVENT TRIGGER reliability_ddl_hook ON ddl_command_end
  EXECUTE FUNCTION public.reliability_ddl_hook();
"#;

/// DDL statements of a V1-to-V8 outbox bootstrap: the history table, then 18 step statements
/// (V2 1, V3 3, V4 1, V5 7, V6 2, V7 2, V8 column and index).
pub const BOOTSTRAP_DDL_STATEMENTS: u32 = 19;

/// Installs [`DDL_HOOK`] in the current database.
pub async fn install_ddl_hook(client: &Client) {
    client.batch(DDL_HOOK).await;
}

/// Sets (or with `None` resets) a `reliability.*` setting for new sessions of database `db`.
pub async fn set_db_setting(client: &Client, db: &str, name: &str, value: Option<u32>) {
    let sql = match value {
        Some(v) => format!("ALTER DATABASE \"{db}\" SET reliability.{name} = '{v}'"),
        None => format!("ALTER DATABASE \"{db}\" RESET reliability.{name}"),
    };
    client.batch(&sql).await;
}

/// Takes [`PAUSE_LOCK`] on `client`'s session, so the hook's wait blocks.
pub async fn hold_pause(client: &Client) {
    call_lock_function(client, "pg_advisory_lock", &[&PAUSE_LOCK.0, &PAUSE_LOCK.1]).await;
}

/// Releases [`PAUSE_LOCK`] on `client`'s session.
pub async fn release_pause(client: &Client) {
    call_lock_function(
        client,
        "pg_advisory_unlock",
        &[&PAUSE_LOCK.0, &PAUSE_LOCK.1],
    )
    .await;
}

/// `SELECT function(args)` in `client`'s session: an advisory-lock function called on
/// [`PAUSE_LOCK`] or on Brighter's lock.
async fn call_lock_function(client: &Client, function: &str, args: &[&(dyn ToSql + Sync)]) {
    let placeholders: Vec<String> = (1..=args.len()).map(|n| format!("${n}")).collect();
    let sql = format!("SELECT {function}({})", placeholders.join(", "));
    client.execute(&sql, args).await.unwrap();
}

/// The lock identity of `public.<table>`.
pub fn identity(table: &str) -> LockIdentity {
    LockIdentity::for_table(&QualifiedName::parse(None, table).unwrap())
}

/// Takes Brighter's lock for `public.<table>` on `client`'s session (a competing holder).
pub async fn hold_brighter_lock(client: &Client, table: &str) {
    call_lock_function(client, "pg_advisory_lock", &[&identity(table).key()]).await;
}

/// Releases Brighter's lock for `public.<table>` on `client`'s session.
pub async fn release_brighter_lock(client: &Client, table: &str) {
    call_lock_function(client, "pg_advisory_unlock", &[&identity(table).key()]).await;
}

/// Sessions holding Brighter's lock for `public.<table>` in the current database.
pub async fn brighter_lock_holders(client: &Client, table: &str) -> i64 {
    let id = identity(table);
    client
        .value(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND classid = $1::int8::oid AND objid = $2::int8::oid AND objsubid = 1",
            &[&i64::from(id.classid()), &i64::from(id.objid())],
        )
        .await
}

/// Backends of this database whose `application_name` is `app`, optionally filtered by an extra
/// SQL condition on `pg_stat_activity`.
pub async fn backends(client: &Client, app: &str, condition: &str) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND application_name = $1 AND pid <> pg_backend_pid() AND ({condition})"
    );
    client.value(&sql, &[&app]).await
}

/// How long a wait on a server-side condition may take before the test fails: generous, because
/// the suite runs on busy machines and a wait returns as soon as its condition holds.
pub const WAIT: Duration = Duration::from_secs(60);

/// How long a process may take to exit after a signal and still count as prompt: far below
/// anything it would otherwise wait for (a lock timeout, a held lock), with room for a busy host.
pub const PROMPT: Duration = Duration::from_secs(10);

/// The backend pid of `client`'s session.
pub async fn backend_pid(client: &Client) -> i32 {
    client.value("SELECT pg_backend_pid()", &[]).await
}

/// Waits until the backend `pid` has ended. A client that disconnects returns before its backend
/// has exited and freed its locks, so count locks only after this.
pub async fn wait_until_backend_gone(client: &Client, pid: i32) {
    wait_until_within(
        &format!("backend {pid} is gone from pg_stat_activity"),
        WAIT,
        || async {
            let n: i64 = client
                .value(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                    &[&pid],
                )
                .await;
            n == 0
        },
    )
    .await;
}

/// Waits until the migrate session is blocked in the DDL hook.
pub async fn wait_until_paused(client: &Client, app: &str) {
    wait_for_backends(
        "the migrate session waits in the DDL hook",
        client,
        app,
        "wait_event_type = 'Lock' AND wait_event = 'advisory'",
        1,
    )
    .await;
}

/// Waits until the migrate session is polling for Brighter's lock: idle between tries, its last
/// statement either the try itself or the "has the holder finished the work?" catalog check that
/// follows each failed try.
pub async fn wait_until_polling(client: &Client, app: &str) {
    wait_for_backends(
        "the migrate session polls pg_try_advisory_lock",
        client,
        app,
        "state = 'idle' AND (query LIKE '%pg_try_advisory_lock%' OR query LIKE '%format_type%')",
        1,
    )
    .await;
}

/// Waits until no session of `app` is left in this database.
pub async fn wait_until_gone(client: &Client, app: &str) {
    wait_for_backends(
        "the migrate session is gone from pg_stat_activity",
        client,
        app,
        "true",
        0,
    )
    .await;
}

/// Waits (up to [`WAIT`], failing with `what`) until exactly `count` sessions of `app` meet
/// `condition` ([`backends`]).
async fn wait_for_backends(what: &str, client: &Client, app: &str, condition: &str, count: i64) {
    wait_until_within(what, WAIT, || async {
        backends(client, app, condition).await == count
    })
    .await;
}

/// The outbox columns at version `v` for a table built from the historical V1 DDL (`outbox_at`),
/// as lowercase names.
pub fn outbox_columns_at(v: u32) -> BTreeSet<String> {
    let steps: &[(u32, &[&str])] = &[
        (
            1,
            &[
                "id",
                "messageid",
                "topic",
                "messagetype",
                "timestamp",
                "headerbag",
                "body",
            ],
        ),
        (2, &["dispatched"]),
        (3, &["correlationid", "replyto", "contenttype"]),
        (4, &["partitionkey"]),
        (
            5,
            &[
                "source",
                "type",
                "dataschema",
                "subject",
                "traceparent",
                "tracestate",
                "baggage",
            ],
        ),
        (6, &["workflowid", "jobid"]),
        (7, &["dataref", "specversion"]),
        (8, &["causationid"]),
    ];
    steps
        .iter()
        .filter(|(n, _)| *n <= v)
        .flat_map(|(_, cols)| cols.iter().map(|c| (*c).to_owned()))
        .collect()
}

/// The columns of `public.<table>`.
pub async fn column_names(client: &Client, table: &str) -> BTreeSet<String> {
    client
        .column(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name = $1",
            &[&table],
        )
        .await
        .into_iter()
        .collect()
}

/// The highest recorded version of `public.<table>`, or `None` without history.
pub async fn recorded_version(client: &Client, table: &str) -> Option<i32> {
    if !history_exists(client, "public").await {
        return None;
    }
    client
        .value(
            "SELECT max(\"MigrationVersion\") FROM public.\"__BrighterMigrationHistory\" \
             WHERE \"SchemaName\" = 'public' AND \"BoxTableName\" = $1",
            &[&table],
        )
        .await
}

/// A BoxTable manifest for an outbox `table`, with `extra` appended to `spec` (YAML, 2-space
/// indented keys), written to `dir`.
pub fn write_outbox_manifest(dir: &Path, table: &str, extra: &str) -> PathBuf {
    let path = dir.join(format!("{table}.yaml"));
    let yaml = format!(
        "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: reliability\n  \
         namespace: default\nspec:\n  box: Outbox\n  table: {table}\n  database:\n    \
         secretRef:\n      name: db\n{extra}"
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// `boxtable-operator migrate -o yaml -f <manifest> --database-url <url>`, stdout and stderr piped.
pub fn migrate_command(manifest: &Path, url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_boxtable-operator"));
    cmd.arg("migrate")
        .args(["-o", "yaml"])
        .arg("-f")
        .arg(manifest)
        .arg("--database-url")
        .arg(url)
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Starts `migrate` for `manifest` against `url`.
pub fn spawn_migrate(manifest: &Path, url: &str) -> Child {
    migrate_command(manifest, url).spawn().unwrap()
}

/// The Ready condition of `doc`, a BoxTable with its status as `migrate` prints it; `None`
/// without one.
pub fn ready_condition(doc: &Value) -> Option<&Value> {
    doc["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// What a finished `migrate` printed.
#[derive(Debug)]
pub struct MigrateRun {
    /// Exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// The printed results (one YAML document per BoxTable, with its status).
    pub stdout: String,
    /// The logs.
    pub stderr: String,
}

impl MigrateRun {
    /// The Ready condition of the first printed status.
    pub fn ready(&self) -> Value {
        let doc = self
            .stdout
            .split("---\n")
            .find(|d| !d.trim().is_empty())
            .unwrap_or_else(|| panic!("no status printed: {self:?}"));
        let status: Value = serde_saphyr::from_str(doc).unwrap();
        ready_condition(&status)
            .cloned()
            .unwrap_or_else(|| panic!("no Ready condition: {self:?}"))
    }

    /// The Ready condition's reason.
    pub fn reason(&self) -> String {
        self.ready()["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The Ready condition's message.
    pub fn message(&self) -> String {
        self.ready()["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Asserts that the run failed with Ready reason `reason` and a message containing each of
    /// `phrases`.
    pub fn assert_failed_with(&self, reason: &str, phrases: &[&str]) {
        assert_ne!(self.code, Some(0), "{self:?}");
        assert_eq!(self.reason(), reason, "{self:?}");
        let message = self.message();
        for phrase in phrases {
            assert!(message.contains(phrase), "{phrase:?} is not in: {message}");
        }
    }
}

/// Waits for `child` and collects its output.
pub async fn finish(child: Child) -> MigrateRun {
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("migrate must finish within 120 s")
        .unwrap();
    MigrateRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `migrate` to completion.
pub async fn migrate(manifest: &Path, url: &str) -> MigrateRun {
    finish(spawn_migrate(manifest, url)).await
}

/// Sends `signal` (by number) to `child`.
pub fn signal(child: &Child, signal: i32) {
    let pid = child.id().expect("child is running");
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// SIGTERM.
pub const SIGTERM: i32 = 15;
