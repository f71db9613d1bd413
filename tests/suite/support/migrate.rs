//! Fixtures for the migration tests: plan builders, sessions, and introspection of what a run left
//! in the database (columns, constraints, indexes, history rows, advisory locks).
// Fixtures fail the test at once on any setup error: unwrap is the point here, as in test bodies
// (clippy.toml allows it only inside #[test] functions, not in shared fixture modules).

use std::time::Duration;

use boxtable_operator::db::Session;
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::migrate::ownership::Owner;
use boxtable_operator::migrate::{
    self, BoxKind, DdlTimeouts, DropOutcome, DropRequest, HistoryScope, InvalidPlan, Outcome,
    Payload, Plan, RunError, RunPath,
};
use boxtable_operator::report::chain;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::support::db::Sql;
use crate::support::{TestDb, advisory_locks};

/// A plan under construction: `outbox("Outbox").in_schema("sales").binary().build()`.
pub struct PlanBuilder {
    kind: BoxKind,
    schema: Option<String>,
    table: String,
    payload: Payload,
    history_scope: HistoryScope,
    target: Option<u32>,
    lock_timeout: Duration,
    ddl: DdlTimeouts,
    owner: Option<Owner>,
}

/// An outbox plan for `table` in `public`, text payload, Global history, latest target.
pub fn outbox(table: &str) -> PlanBuilder {
    PlanBuilder::new(BoxKind::Outbox, table)
}

/// An inbox plan for `table` in `public`, text payload, Global history, latest target.
pub fn inbox(table: &str) -> PlanBuilder {
    PlanBuilder::new(BoxKind::Inbox, table)
}

impl PlanBuilder {
    fn new(kind: BoxKind, table: &str) -> Self {
        Self {
            kind,
            schema: None,
            table: table.to_owned(),
            payload: Payload::Text,
            history_scope: HistoryScope::Global,
            target: None,
            lock_timeout: Duration::from_secs(30),
            ddl: DdlTimeouts::default(),
            owner: None,
        }
    }

    pub fn in_schema(mut self, schema: &str) -> Self {
        self.schema = Some(schema.to_owned());
        self
    }

    pub fn payload(mut self, payload: Payload) -> Self {
        self.payload = payload;
        self
    }

    pub fn binary(self) -> Self {
        self.payload(Payload::Binary)
    }

    pub fn per_schema(mut self) -> Self {
        self.history_scope = HistoryScope::PerSchema;
        self
    }

    pub fn target(mut self, version: u32) -> Self {
        self.target = Some(version);
        self
    }

    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    pub fn ddl_lock_timeout(mut self, timeout: Duration) -> Self {
        self.ddl.lock_timeout = Some(timeout);
        self
    }

    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.ddl.statement_timeout = Some(timeout);
        self
    }

    /// Runs as the BoxTable with uid `uid` (namespace/name `shop/<uid>`).
    pub fn owned_by(mut self, uid: &str) -> Self {
        self.owner = Some(owner(uid));
        self
    }

    /// The plan, or why the catalog has no such combination of box, payload and target.
    pub fn try_build(self) -> Result<Plan, InvalidPlan> {
        let table = QualifiedName::parse(self.schema.as_deref(), &self.table).unwrap();
        let plan = Plan::new(self.kind, table)
            .with_payload(self.payload)?
            .with_target_version(self.target)?
            .with_history_scope(self.history_scope)
            .with_lock_timeout(self.lock_timeout)
            .with_ddl(self.ddl);
        Ok(match self.owner {
            Some(owner) => plan.with_owner(owner),
            None => plan,
        })
    }

    pub fn build(self) -> Plan {
        self.try_build().unwrap()
    }
}

/// The BoxTable with uid `uid`, named `shop/<uid>`, as an owner.
pub fn owner(uid: &str) -> Owner {
    Owner {
        cluster: "test".to_owned(),
        namespace: "shop".to_owned(),
        name: uid.to_owned(),
        uid: uid.to_owned(),
        takes_over: None,
    }
}

/// The drop request of `plan`'s owner (the plan must name one).
pub fn drop_request(plan: &Plan, consent: bool) -> DropRequest {
    DropRequest {
        owner: plan.owner().cloned().expect("the plan names its owner"),
        consent,
        suspended: false,
    }
}

/// One drop by `request` on a new session, never cancelled.
pub async fn drop_with(
    db: &TestDb,
    plan: &Plan,
    request: &DropRequest,
) -> Result<DropOutcome, RunError> {
    let mut session = session(db).await;
    migrate::drop_box_table(
        &mut session,
        plan,
        request,
        &CancellationToken::new(),
        |_| (),
    )
    .await
}

/// One drop by `plan`'s owner, with or without consent for the data.
pub async fn drop_as_owner(
    db: &TestDb,
    plan: &Plan,
    consent: bool,
) -> Result<DropOutcome, RunError> {
    drop_with(db, plan, &drop_request(plan, consent)).await
}

/// The comment on `qualified` (like `public.outbox`), `None` without one.
pub async fn table_comment(client: &Client, qualified: &str) -> Option<String> {
    client
        .value(
            "SELECT pg_catalog.obj_description(to_regclass($1), 'pg_class')",
            &[&qualified],
        )
        .await
}

/// A dedicated session on the test database, as the operator opens one.
pub async fn session(db: &TestDb) -> Session {
    db.session("boxtable-operator-test").await
}

/// One run on a new session, never cancelled.
pub async fn run(db: &TestDb, plan: &Plan) -> Result<Outcome, RunError> {
    let mut session = session(db).await;
    migrate::run(&mut session, plan, &CancellationToken::new(), |_| ()).await
}

/// Runs `plan`, expecting a failure; asserts nothing changed and no advisory lock is left.
pub async fn fails_without_change(db: &TestDb, plan: &Plan) -> RunError {
    let client = db.connect().await;
    let before = snapshot(&client).await;
    let err = run(db, plan).await.unwrap_err();
    assert_eq!(
        snapshot(&client).await,
        before,
        "the failed run changed the database: {}",
        chain(&err)
    );
    assert_eq!(advisory_locks(&client).await, 0);
    err
}

/// A column as `pg_catalog` shows it: name, formatted type, nullable.
pub type ColumnRow = (String, String, bool);

/// The table's columns in order, with their formatted types and nullability.
pub async fn columns(client: &Client, schema: &str, table: &str) -> Vec<ColumnRow> {
    client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&schema, &table],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The names of the table's columns in order.
pub async fn column_names_in_order(client: &Client, schema: &str, table: &str) -> Vec<String> {
    columns(client, schema, table)
        .await
        .into_iter()
        .map(|c| c.0)
        .collect()
}

/// A new session on `db` holding `qualified` (like `public.outbox`) in ACCESS SHARE mode, its
/// transaction left open: a step's DDL on the table waits until it rolls back.
pub async fn hold_access_share(db: &TestDb, qualified: &str) -> Client {
    let busy = db.connect().await;
    busy.batch(&format!(
        "BEGIN; LOCK TABLE {qualified} IN ACCESS SHARE MODE"
    ))
    .await;
    busy
}

/// What a run did, as the tests compare it: its path, and the versions it went from and to.
pub fn path_and_versions(outcome: &Outcome) -> (RunPath, u32, u32) {
    (outcome.path, outcome.from_version, outcome.to_version)
}

/// Runs `plan` again and asserts that it found its table up to date at `version` and changed
/// nothing in the database.
pub async fn assert_up_to_date_and_unchanged(
    db: &TestDb,
    client: &Client,
    plan: &Plan,
    version: u32,
) {
    let before = snapshot(client).await;
    let outcome = run(db, plan).await.unwrap();
    assert_eq!(
        path_and_versions(&outcome),
        (RunPath::UpToDate, version, version)
    );
    assert_eq!(snapshot(client).await, before);
}

/// The table's constraints as `pg_get_constraintdef` prints them, sorted.
pub async fn constraints(client: &Client, schema: &str, table: &str) -> Vec<String> {
    client
        .column(
            "SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k \
             JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND k.contype IN ('p', 'u') ORDER BY 1",
            &[&schema, &table],
        )
        .await
}

/// The table's index names and definitions, sorted by name.
pub async fn indexes(client: &Client, schema: &str, table: &str) -> Vec<(String, String)> {
    client
        .pairs(
            "SELECT indexname::text, indexdef FROM pg_indexes \
             WHERE schemaname = $1 AND tablename = $2 ORDER BY 1",
            &[&schema, &table],
        )
        .await
}

/// A history row: version, schema, table, description, AppliedAt (as text).
pub type HistoryRow = (i32, String, String, String, String);

/// Every row of `"<schema>"."__BrighterMigrationHistory"`, ordered; empty when the table is absent.
pub async fn history(client: &Client, schema: &str) -> Vec<HistoryRow> {
    if !history_exists(client, schema).await {
        return Vec::new();
    }
    let sql = format!(
        "SELECT \"MigrationVersion\", \"SchemaName\"::text, \"BoxTableName\"::text, \
         \"Description\"::text, \"AppliedAt\"::text \
         FROM \"{schema}\".\"__BrighterMigrationHistory\" \
         ORDER BY \"SchemaName\", \"BoxTableName\", \"MigrationVersion\""
    );
    client
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

/// History rows without AppliedAt: version and description only.
pub async fn history_versions(client: &Client, schema: &str) -> Vec<(i32, String)> {
    history(client, schema)
        .await
        .into_iter()
        .map(|(v, _, _, d, _)| (v, d))
        .collect()
}

/// Whether `"<schema>"."__BrighterMigrationHistory"` exists.
pub async fn history_exists(client: &Client, schema: &str) -> bool {
    client
        .value(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables \
             WHERE table_schema = $1 AND table_name = '__BrighterMigrationHistory')",
            &[&schema],
        )
        .await
}

/// Everything a run could change, as sorted text: every column, constraint and index outside the
/// system schemas, and every history row (AppliedAt included).
pub async fn snapshot(client: &Client) -> String {
    let rows = client
        .query(
            "SELECT format('column %s.%s.%s %s %s', table_schema, table_name, column_name, data_type, is_nullable) \
               FROM information_schema.columns \
              WHERE table_schema NOT IN ('pg_catalog', 'information_schema') \
             UNION ALL \
             SELECT format('index %s %s', schemaname, indexdef) FROM pg_indexes \
              WHERE schemaname NOT IN ('pg_catalog', 'information_schema') \
             UNION ALL \
             SELECT format('schema %s', nspname) FROM pg_namespace \
              WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' \
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let mut out: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let schemas = client
        .query(
            "SELECT table_schema::text FROM information_schema.tables \
             WHERE table_name = '__BrighterMigrationHistory' ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    for row in schemas {
        let schema: String = row.get(0);
        for h in history(client, &schema).await {
            out.push(format!("history {schema} {h:?}"));
        }
    }
    out.join("\n")
}

/// The statement that creates Brighter's history table in `schema` unless it exists.
pub fn create_history_table(schema: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{schema}\".\"__BrighterMigrationHistory\" (
           \"MigrationVersion\" INT NOT NULL,
           \"SchemaName\" VARCHAR(256) NOT NULL DEFAULT 'public',
           \"BoxTableName\" VARCHAR(256) NOT NULL,
           \"Description\" VARCHAR(512) NOT NULL,
           \"AppliedAt\" TIMESTAMPTZ NOT NULL DEFAULT NOW(),
           PRIMARY KEY (\"SchemaName\", \"BoxTableName\", \"MigrationVersion\"))"
    )
}

/// Writes a history row as Brighter would (AppliedAt from the server's NOW()).
pub async fn write_history(
    client: &Client,
    hist_schema: &str,
    schema: &str,
    table: &str,
    version: i32,
    description: &str,
) {
    client.batch(&create_history_table(hist_schema)).await;
    client
        .execute(
            &format!(
                "INSERT INTO \"{hist_schema}\".\"__BrighterMigrationHistory\" \
                 (\"MigrationVersion\", \"SchemaName\", \"BoxTableName\", \"Description\") VALUES ($1, $2, $3, $4)"
            ),
            &[&version, &schema, &table, &description],
        )
        .await
        .unwrap();
}

/// The outbox as a 2019 Brighter created it (the historical V1 DDL; detects as V2).
pub const OUTBOX_V1_HISTORICAL: &str = "CREATE TABLE {t} (Id BIGSERIAL PRIMARY KEY, \
    MessageId UUID UNIQUE NOT NULL, Topic VARCHAR(255), MessageType VARCHAR(32), \
    Timestamp timestamptz, Dispatched timestamptz, HeaderBag TEXT, Body TEXT)";

/// The inbox as Brighter's V1 created it.
pub const INBOX_V1_HISTORICAL: &str = "CREATE TABLE {t} (CommandId uuid NOT NULL, \
    CommandType VARCHAR(256), CommandBody TEXT, Timestamp timestamptz, ContextKey VARCHAR(256), \
    PRIMARY KEY (CommandId, ContextKey))";

/// The columns each outbox step adds, as Brighter's steps declare them (to build tables at Vn).
pub const OUTBOX_STEP_COLUMNS: &[(u32, &str)] = &[
    (
        3,
        "correlationid varchar(255), ADD COLUMN replyto varchar(255), ADD COLUMN contenttype varchar(128)",
    ),
    (4, "partitionkey varchar(128)"),
    (
        5,
        "source varchar(255), ADD COLUMN type varchar(255), ADD COLUMN dataschema varchar(255), \
         ADD COLUMN subject varchar(255), ADD COLUMN traceparent varchar(255), \
         ADD COLUMN tracestate varchar(255), ADD COLUMN baggage text",
    ),
    (6, "workflowid varchar(255), ADD COLUMN jobid varchar(255)"),
    (
        7,
        "dataref varchar(255), ADD COLUMN specversion varchar(255)",
    ),
];

/// Creates an outbox shaped at version `n` (1..=7) from the historical V1 DDL, as an older Brighter
/// left it, with `rows` data rows. At V1 the `dispatched` column (added by V2) is dropped.
pub async fn outbox_at(client: &Client, qualified: &str, n: u32, rows: i32) {
    client
        .batch(&OUTBOX_V1_HISTORICAL.replace("{t}", qualified))
        .await;
    if n == 1 {
        client
            .batch(&format!("ALTER TABLE {qualified} DROP COLUMN Dispatched"))
            .await;
    }
    for (v, cols) in OUTBOX_STEP_COLUMNS {
        if *v <= n {
            client
                .batch(&format!("ALTER TABLE {qualified} ADD COLUMN {cols}"))
                .await;
        }
    }
    for i in 0..rows {
        client
            .execute(
                &format!("INSERT INTO {qualified} (MessageId, Topic, Body) VALUES (gen_random_uuid(), $1, 'body')"),
                &[&format!("topic-{i}")],
            )
            .await
            .unwrap();
    }
}

/// Asserts that a run on `public.outbox` that failed left nothing behind: no table, no history
/// row, no advisory lock.
pub async fn assert_nothing_committed_for_public_outbox(client: &Client) {
    assert!(
        columns(client, "public", "outbox").await.is_empty(),
        "the table was rolled back"
    );
    assert!(
        history_versions(client, "public").await.is_empty(),
        "the history row was rolled back"
    );
    assert_eq!(advisory_locks(client).await, 0, "no lock is left");
}

/// Makes every row written into `public`'s history release advisory lock `key` at once, inside
/// the runner's transaction and before its check that it still holds the lock. Creates
/// `public`'s history table if it is missing.
pub async fn release_lock_when_history_rows_are_written(client: &Client, key: i64) {
    history_trigger(client, &format!("PERFORM pg_advisory_unlock({key})"), false).await;
}

/// Makes every transaction that writes a row into `public`'s history release advisory lock `key`
/// as it commits (a deferred constraint trigger runs at `COMMIT`, after the runner's last check
/// that it still holds the lock), so the runner's `pg_advisory_unlock` afterwards returns false.
/// Creates `public`'s history table if it is missing.
pub async fn release_lock_at_commit_of_history_rows(client: &Client, key: i64) {
    history_trigger(client, &format!("PERFORM pg_advisory_unlock({key})"), true).await;
}

/// Makes every transaction that writes a row into `public`'s history sleep for `seconds` as it
/// commits (a deferred constraint trigger), so a test can act while its `COMMIT` runs. Creates
/// `public`'s history table if it is missing.
pub async fn slow_commit_of_history_rows(client: &Client, seconds: u32) {
    history_trigger(client, &format!("PERFORM pg_sleep({seconds})"), true).await;
}

/// A trigger on every insert into `public`'s history that runs `action` (PL/pgSQL), at once or,
/// `at_commit`, as a deferred constraint trigger when the transaction commits.
async fn history_trigger(client: &Client, action: &str, at_commit: bool) {
    let (trigger, timing) = if at_commit {
        ("CONSTRAINT TRIGGER", "DEFERRABLE INITIALLY DEFERRED")
    } else {
        ("TRIGGER", "")
    };
    client
        .batch(&format!(
            "{};
             CREATE FUNCTION public.history_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN {action}; RETURN NULL; END $$;
             CREATE {trigger} history_trigger
               AFTER INSERT ON public.\"__BrighterMigrationHistory\"
               {timing} FOR EACH ROW EXECUTE FUNCTION public.history_trigger();",
            create_history_table("public")
        ))
        .await;
}
