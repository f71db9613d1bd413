//! The controller under test: the real control plane (kube-apiserver with `deploy/` installed, see
//! `tests/suite/support/control_plane.rs`) with a namespace of the test's own, a fresh PostgreSQL database
//! with its connection Secret, and `controller::run` in a tokio task authenticated as the
//! operator's ServiceAccount, plus helpers (acting as the admin) to apply BoxTables, wait for
//! their status (polling the API with a deadline), read events, metrics and captured logs, and
//! look into the database. With [`HarnessBuilder::faults`] the controller talks to the server
//! through a fault-injecting proxy ([`Faults`]) that the test steers.
// Fixtures fail the test at once on any setup error, as test bodies do.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boxtable_operator::controller::{self, RunError, Settings};
use boxtable_operator::crd::{BoxTable, BoxTableStatus, LockState};
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use boxtable_operator::telemetry::{Metrics, Readiness};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::support::TestDb;
pub use crate::support::boxtable::{BoxTableBuilder, boxtable};
use crate::support::control_plane::{ControlPlane, OperatorToken, control_plane};
use crate::support::db::Sql;
use crate::support::fault_proxy::{FaultProxy, Faults};
use crate::support::migrate::history_exists;
pub use crate::support::wait::{DEADLINE, wait_for_value, wait_until};

/// The prefix of each test's namespace (the controller watches only that one).
pub const NAMESPACE: &str = "ctl";
/// The Secret holding the test database's connection string.
pub const SECRET: &str = "shop-db";
/// The drift-check interval: short, so that "the next resync" comes quickly.
pub const RESYNC: Duration = Duration::from_secs(2);
/// A resync interval (ten minutes) no test lasts long enough to see: every pass was started by a
/// watch or a request.
pub const NO_RESYNC: Duration = Duration::from_secs(600);
/// How often waits poll the API server.
const POLL: Duration = Duration::from_millis(100);

/// How the harness starts.
pub struct HarnessBuilder {
    namespaces: Vec<String>,
    secret: Option<String>,
    resync: Duration,
    faults: bool,
    secret_label_selector: Option<String>,
}

/// Log lines written by the operator while the harness runs (see [`Harness::logs`]).
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLogs {
    type Writer = CapturedLogs;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// A running controller against the real API server and a fresh database.
pub struct Harness {
    /// The control plane.
    pub plane: &'static ControlPlane,
    /// The fault-injecting proxy in front of the API server, with [`HarnessBuilder::faults`].
    pub api: Faults,
    /// This test's namespace.
    pub namespace: String,
    /// More namespaces the controller watches (see [`HarnessBuilder::namespaces`]), empty by
    /// default.
    pub others: Vec<String>,
    /// The admin: what the test does as a user.
    pub client: Client,
    /// The operator's ServiceAccount, which the controller runs as (through the proxy with
    /// [`HarnessBuilder::faults`]).
    pub operator_client: Client,
    /// The operator's token; every request made with it must be allowed by `deploy/rbac.yaml`.
    pub token: OperatorToken,
    pub db: TestDb,
    pub metrics: Arc<Metrics>,
    pub readiness: Readiness,
    pub shutdown: CancellationToken,
    pub logs: CapturedLogs,
    resync: Duration,
    secret_label_selector: Option<String>,
    controller: Option<JoinHandle<Result<(), RunError>>>,
    _log_guard: tracing::subscriber::DefaultGuard,
}

impl Harness {
    /// Everything started, with the Secret holding the test database's URL.
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    /// Everything started as [`Harness::start`] does, but never resyncing ([`NO_RESYNC`]).
    pub async fn without_resync() -> Self {
        Self::builder().resync(NO_RESYNC).start().await
    }

    pub fn builder() -> HarnessBuilder {
        HarnessBuilder {
            namespaces: vec![NAMESPACE.to_owned()],
            secret: Some(String::new()),
            resync: RESYNC,
            faults: false,
            secret_label_selector: None,
        }
    }
}

impl HarnessBuilder {
    /// Watch a namespace per prefix (one controller, as with several `--namespace` flags); the
    /// first is [`Harness::namespace`], which gets the Secret, the rest are [`Harness::others`].
    pub fn namespaces(mut self, prefixes: &[&str]) -> Self {
        self.namespaces = prefixes.iter().map(|p| (*p).to_owned()).collect();
        self
    }

    /// Start without the connection Secret (create it later with [`Harness::create_secret`]).
    pub fn without_secret(mut self) -> Self {
        self.secret = None;
        self
    }

    /// Put `value` in the Secret instead of the test database's URL.
    pub fn connection_string(mut self, value: &str) -> Self {
        self.secret = Some(value.to_owned());
        self
    }

    /// Put a fault-injecting proxy between the controller and the API server ([`Harness::api`]).
    pub fn faults(mut self) -> Self {
        self.faults = true;
        self
    }

    /// Run the controller with `--secret-label-selector selector`.
    pub fn secret_label_selector(mut self, selector: &str) -> Self {
        self.secret_label_selector = Some(selector.to_owned());
        self
    }

    /// Use `resync` instead of [`RESYNC`] (a long one shows that a watch, not the drift check,
    /// started a pass).
    pub fn resync(mut self, resync: Duration) -> Self {
        self.resync = resync;
        self
    }

    pub async fn start(self) -> Harness {
        // Logs go to a buffer for this test only: the runtime is single-threaded, so the
        // thread's default subscriber sees every task the controller spawns.
        let logs = CapturedLogs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish();
        let log_guard = tracing::subscriber::set_default(subscriber);

        let plane = control_plane();
        let mut namespaces: Vec<String> = self
            .namespaces
            .iter()
            .map(|prefix| plane.create_namespace(prefix))
            .collect();
        let namespace = namespaces.remove(0);
        let others = namespaces;
        let client = plane.admin_client().await;
        let token = plane.operator_token();
        let direct = plane.client_for_token(&token).await;
        let (api, operator_client) = if self.faults {
            let proxy = FaultProxy::start(direct).await;
            let through = proxy.client();
            (Faults::started(proxy), through)
        } else {
            (Faults::not_started("Harness::builder().faults()"), direct)
        };
        let db = crate::support::fresh_db().await;
        db.connect().await.batch("CREATE SCHEMA sales").await;
        let metrics = Arc::new(Metrics::new());
        let readiness = Readiness::new();
        let shutdown = CancellationToken::new();
        let controller = spawn_controller(
            &operator_client,
            &watched(&namespace, &others),
            self.resync,
            self.secret_label_selector.clone(),
            metrics.clone(),
            readiness.clone(),
            shutdown.clone(),
        );
        let harness = Harness {
            plane,
            api,
            namespace,
            others,
            client,
            operator_client,
            token,
            db,
            metrics,
            readiness,
            shutdown,
            logs,
            resync: self.resync,
            secret_label_selector: self.secret_label_selector,
            controller: Some(controller),
            _log_guard: log_guard,
        };
        match self.secret {
            Some(value) if value.is_empty() => harness.create_secret().await,
            Some(value) => harness.create_secret_with(&value).await,
            None => {}
        }
        harness
    }
}

/// Every namespace the harness's controller watches.
fn watched(namespace: &str, others: &[String]) -> Vec<String> {
    std::iter::once(namespace.to_owned())
        .chain(others.iter().cloned())
        .collect()
}

fn spawn_controller(
    client: &Client,
    namespaces: &[String],
    resync: Duration,
    secret_label_selector: Option<String>,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> JoinHandle<Result<(), RunError>> {
    let settings = Settings {
        namespaces: namespaces.to_vec(),
        concurrency: 4,
        resync,
        retry_base: std::time::Duration::from_millis(500),
        instance: "controller-test".to_owned(),
        leader_election_namespace: None,
        leader_timing: Default::default(),
        secret_label_selector,
        sessions: Default::default(),
        cluster_name: "test".to_owned(),
    };
    tokio::spawn(controller::run(
        client.clone(),
        settings,
        metrics,
        readiness,
        shutdown,
    ))
}

/// The condition of `type_` in `status`, if present.
pub fn condition<'a>(status: &'a BoxTableStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether `status` has condition `type_` with status `value` ("True"/"False").
pub fn has(status: &BoxTableStatus, type_: &str, value: &str) -> bool {
    condition(status, type_).is_some_and(|c| c.status == value)
}

/// The Ready condition's reason, or "" when there is none yet.
pub fn reason(status: &BoxTableStatus) -> &str {
    condition(status, "Ready").map_or("", |c| c.reason.as_str())
}

/// Ready=True for the object's current generation.
pub fn is_ready(bt: &BoxTable) -> bool {
    bt.status
        .as_ref()
        .is_some_and(|s| has(s, "Ready", "True") && s.observed_generation == bt.metadata.generation)
}

/// The Ready condition's message.
pub fn ready_message(bt: &BoxTable) -> String {
    condition(bt.status.as_ref().unwrap(), "Ready")
        .unwrap()
        .message
        .clone()
}

/// Stalled=True with `reason`.
pub fn is_stalled_with(bt: &BoxTable, reason_name: &str) -> bool {
    bt.status
        .as_ref()
        .is_some_and(|s| has(s, "Stalled", "True") && reason(s) == reason_name)
}

impl Harness {
    pub fn boxtables(&self) -> Api<BoxTable> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates the Secret with the test database's URL.
    pub async fn create_secret(&self) {
        let url = self.db.url.clone();
        self.create_secret_with(&url).await;
    }

    /// Creates the Secret with `value` under `connectionString`.
    pub async fn create_secret_with(&self, value: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": self.namespace},
            "stringData": {"connectionString": value},
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Creates the BoxTable.
    pub async fn apply(&self, builder: BoxTableBuilder) -> BoxTable {
        let mut bt = builder.build();
        bt.metadata.namespace = Some(self.namespace.clone());
        self.boxtables()
            .create(&PostParams::default(), &bt)
            .await
            .unwrap()
    }

    /// Creates the BoxTable and waits for it to be Ready.
    pub async fn apply_ready(&self, builder: BoxTableBuilder) -> BoxTable {
        let created = self.apply(builder).await;
        self.wait_ready(&created.name_any()).await
    }

    /// Creates the BoxTable and waits for it to be Stalled with `reason_name`.
    pub async fn apply_stalled(&self, builder: BoxTableBuilder, reason_name: &str) -> BoxTable {
        let created = self.apply(builder).await;
        self.wait_stalled(&created.name_any(), reason_name).await
    }

    /// Merge-patches the BoxTable's spec with `spec`.
    pub async fn patch_spec(&self, name: &str, spec: Value) -> BoxTable {
        self.boxtables()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .unwrap()
    }

    pub async fn delete(&self, name: &str) {
        self.boxtables()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// The BoxTable as the API server has it now.
    pub async fn get(&self, name: &str) -> BoxTable {
        self.boxtables().get(name).await.unwrap()
    }

    /// The BoxTable's status as the API server has it now.
    pub async fn status(&self, name: &str) -> BoxTableStatus {
        self.get(name).await.status.unwrap_or_default()
    }

    /// The BoxTable as raw JSON, to check the wire types of status fields.
    pub async fn raw(&self, name: &str) -> Value {
        let resource = ApiResource::erase::<BoxTable>(&());
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.namespace, &resource);
        serde_json::to_value(api.get(name).await.unwrap()).unwrap()
    }

    /// Polls the BoxTable until `ready` holds, failing with `what` and the last status after
    /// [`DEADLINE`].
    pub async fn wait_for(
        &self,
        name: &str,
        what: &str,
        ready: impl Fn(&BoxTable) -> bool,
    ) -> BoxTable {
        let started = Instant::now();
        loop {
            let current = self.boxtables().get_opt(name).await.unwrap();
            if let Some(bt) = &current
                && ready(bt)
            {
                return bt.clone();
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{name}: gave up waiting for {what} after {DEADLINE:?}; last seen: {}",
                serde_json::to_string_pretty(&current.map(|bt| bt.status)).unwrap()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for Ready=True at the object's current generation.
    pub async fn wait_ready(&self, name: &str) -> BoxTable {
        self.wait_for(name, "Ready=True", is_ready).await
    }

    /// Waits until the Ready condition's reason is `reason_name`.
    pub async fn wait_for_reason(&self, name: &str, reason_name: &str) -> BoxTable {
        self.wait_for(name, &format!("Ready reason {reason_name}"), |bt| {
            bt.status.as_ref().is_some_and(|s| reason(s) == reason_name)
        })
        .await
    }

    /// Waits for Stalled=True with `reason_name`.
    pub async fn wait_stalled(&self, name: &str, reason_name: &str) -> BoxTable {
        self.wait_for(name, &format!("Stalled=True ({reason_name})"), |bt| {
            is_stalled_with(bt, reason_name)
        })
        .await
    }

    /// Waits until the BoxTable's lock is in `state`.
    pub async fn wait_for_lock(&self, name: &str, state: LockState) -> BoxTable {
        self.wait_for(name, &format!("lock state {state:?}"), |bt| {
            bt.status
                .as_ref()
                .and_then(|s| s.lock.as_ref())
                .is_some_and(|l| l.state == state)
        })
        .await
    }

    /// Waits until the object is gone from the API server.
    pub async fn wait_gone(&self, name: &str) {
        wait_until(&format!("{name} to be deleted"), || async {
            self.boxtables().get_opt(name).await.unwrap().is_none()
        })
        .await;
    }

    /// Events (events.k8s.io/v1) about the BoxTable `name`.
    pub async fn events(&self, name: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect()
    }

    /// The counter `name` (`boxtable_reconciles_total`), summed over its labels.
    pub fn counter_total(&self, name: &str) -> u64 {
        let labelled = format!("{name}{{");
        self.metrics
            .encode()
            .unwrap()
            .lines()
            .filter(|l| l.starts_with(&labelled))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// `boxtable_reconciles_total`, summed over results.
    pub fn reconciles(&self) -> u64 {
        self.counter_total("boxtable_reconciles_total")
    }

    /// Waits until `n` more reconcile passes have finished (resyncs, with nothing to do).
    pub async fn wait_for_passes(&self, n: u64) {
        let target = self.reconciles() + n;
        wait_until(&format!("{n} more reconcile passes"), || async {
            self.reconciles() >= target
        })
        .await;
    }

    /// Everything the operator logged so far.
    pub fn logs(&self) -> String {
        String::from_utf8_lossy(&self.logs.0.lock().unwrap()).into_owned()
    }

    /// Fires the shutdown token and waits for `run` to return; returns how long that took.
    pub async fn stop(&mut self) -> Duration {
        let started = Instant::now();
        self.shutdown.cancel();
        let handle = self.controller.take().expect("controller already stopped");
        tokio::time::timeout(DEADLINE, handle)
            .await
            .expect("controller::run did not return after shutdown")
            .unwrap()
            .unwrap();
        started.elapsed()
    }

    /// Starts a new controller after [`Harness::stop`], as the next replica of a rolling update
    /// would (same API server, same database, fresh in-memory state).
    pub fn restart(&mut self) {
        assert!(self.controller.is_none(), "stop the controller first");
        self.shutdown = CancellationToken::new();
        self.controller = Some(spawn_controller(
            &self.operator_client,
            &watched(&self.namespace, &self.others),
            self.resync,
            self.secret_label_selector.clone(),
            self.metrics.clone(),
            Readiness::new(),
            self.shutdown.clone(),
        ));
    }

    /// Requests the operator has made so far, counted in the API server's audit log.
    pub fn api_requests(&self) -> u64 {
        self.plane
            .audit_events()
            .iter()
            .filter(|e| self.token.made(e))
            .count() as u64
    }

    /// Reads of Secret `name` the controller made (LISTs selecting it by name, with its contents
    /// or metadata only; the operator has no GET on Secrets), counted in the API server's audit
    /// log, which names the Secret a list selects by `metadata.name`.
    pub fn secret_reads(&self, name: &str) -> usize {
        self.plane
            .audit_events()
            .iter()
            .filter(|e| {
                self.token.made(e)
                    && (e["verb"] == "get" || e["verb"] == "list")
                    && e["objectRef"]["resource"] == "secrets"
                    && e["objectRef"]["namespace"] == self.namespace.as_str()
                    && e["objectRef"]["name"] == name
            })
            .count()
    }

    /// Requests on Secrets the controller made with verb `verb`, as `verb resource (URI)`,
    /// from the API server's audit log.
    pub fn secret_requests(&self, verb: &str) -> Vec<String> {
        self.plane
            .audit_events()
            .iter()
            .filter(|e| {
                self.token.made(e) && e["verb"] == verb && e["objectRef"]["resource"] == "secrets"
            })
            .map(crate::support::control_plane::describe)
            .collect()
    }

    /// What the controller keeps per BoxTable and per Secret now (`boxtable_cache_entries`).
    pub fn cache_entries(&self) -> boxtable_operator::telemetry::CacheEntries {
        self.metrics.cache_entries()
    }

    /// Status writes (`patch` of `boxtables/status`) the controller made to `name`, counted in
    /// the API server's audit log.
    pub fn status_writes(&self, name: &str) -> usize {
        self.plane
            .audit_events()
            .iter()
            .filter(|e| {
                self.token.made(e)
                    && e["verb"] == "patch"
                    && e["objectRef"]["resource"] == "boxtables"
                    && e["objectRef"]["subresource"] == "status"
                    && e["objectRef"]["namespace"] == self.namespace.as_str()
                    && e["objectRef"]["name"] == name
            })
            .count()
    }

    /// Creates another Secret `name` holding the test database's URL.
    pub async fn create_secret_named(&self, name: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace},
            "stringData": {"connectionString": self.db.url.clone()},
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Creates Secret `name` holding `data` (key, bytes).
    pub async fn create_secret_data(&self, name: &str, data: &[(&str, &[u8])]) {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.to_owned());
        secret.metadata.namespace = Some(self.namespace.clone());
        secret.data = Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), k8s_openapi::ByteString(v.to_vec())))
                .collect(),
        );
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Deletes the Secret `name` for good: its finalizers (the operator keeps one for each Drop
    /// BoxTable that needs it) are removed first, as someone forcing the deletion would.
    pub async fn delete_secret(&self, name: &str) {
        self.patch_secret(name, json!({"metadata": {"finalizers": null}}))
            .await;
        self.secrets()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// The Secrets in the test's namespace, as the admin sees them.
    pub fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Merge-patches the Secret `name` with `patch`, as the admin.
    pub async fn patch_secret(&self, name: &str, patch: Value) {
        self.secrets()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// Sets annotation `key` to `value` on the BoxTable and waits for the pass that follows.
    pub async fn annotate_and_wait_for_a_pass(&self, name: &str, key: &str, value: &str) {
        let passes = self.reconciles();
        self.annotate(name, key, value).await;
        wait_until(&format!("a pass after annotating {key}"), || async {
            self.reconciles() > passes
        })
        .await;
    }

    /// Sets annotation `key` to `value` on the BoxTable (also while it is being deleted).
    pub async fn annotate(&self, name: &str, key: &str, value: &str) {
        self.boxtables()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap();
    }

    /// A plain connection to the test database.
    pub async fn sql(&self) -> tokio_postgres::Client {
        self.db.connect().await
    }

    /// Whether `qualified` (like `public.outbox`) exists.
    pub async fn table_exists(&self, qualified: &str) -> bool {
        self.sql()
            .await
            .value("SELECT to_regclass($1) IS NOT NULL", &[&qualified])
            .await
    }

    /// The versions in `public."__BrighterMigrationHistory"` for `schema.table`, ordered (empty
    /// when the history table does not exist).
    pub async fn history_versions(&self, schema: &str, table: &str) -> Vec<i32> {
        let client = self.sql().await;
        if !history_exists(&client, "public").await {
            return Vec::new();
        }
        client
            .column(
                "SELECT \"MigrationVersion\" FROM public.\"__BrighterMigrationHistory\" \
                 WHERE \"SchemaName\" = $1 AND \"BoxTableName\" = $2 ORDER BY 1",
                &[&schema, &table],
            )
            .await
    }

    /// Sessions the operator has open on the test database.
    pub async fn operator_sessions(&self) -> i64 {
        self.sql()
            .await
            .value(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = $1 AND application_name LIKE 'boxtable-operator%'",
                &[&self.db.name],
            )
            .await
    }

    /// The operator's sessions whose backend waits for a table lock.
    pub async fn operator_backends_waiting_for_a_lock(&self) -> i64 {
        self.sql()
            .await
            .value(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name LIKE 'boxtable-operator/%' AND wait_event_type = 'Lock'",
                &[],
            )
            .await
    }

    /// A session named `application_name` holding Brighter's lock for `schema.table`, as a
    /// running Brighter application would; drop it (or call `release`) to let go.
    pub async fn hold_lock(&self, application_name: &str, schema: &str, table: &str) -> LockHolder {
        let mut config = self.db.config();
        config.application_name(application_name);
        let client = crate::support::connect_config(&config).await;
        let key = lock_key(schema, table);
        let taken: bool = client
            .value("SELECT pg_try_advisory_lock($1)", &[&key])
            .await;
        assert!(taken, "the test could not take the lock itself");
        let pid: i32 = client.value("SELECT pg_backend_pid()", &[]).await;
        LockHolder { client, key, pid }
    }
}

impl Drop for Harness {
    /// A test that ends early (or fails) still stops its controller; a test whose controller made
    /// a call that `deploy/rbac.yaml` does not allow fails.
    fn drop(&mut self) {
        self.shutdown.cancel();
        crate::support::control_plane::assert_no_forbidden_requests(self.plane, &self.token);
    }
}

/// The derived advisory-lock key for `schema.table`.
pub fn lock_key(schema: &str, table: &str) -> i64 {
    LockIdentity::for_table(&QualifiedName::parse(Some(schema), table).unwrap()).key()
}

/// A test session holding the advisory lock.
pub struct LockHolder {
    pub client: tokio_postgres::Client,
    pub key: i64,
    pub pid: i32,
}

impl LockHolder {
    pub async fn release(&self) {
        let released: bool = self
            .client
            .value("SELECT pg_advisory_unlock($1)", &[&self.key])
            .await;
        assert!(released, "the test session did not hold the lock");
    }
}
