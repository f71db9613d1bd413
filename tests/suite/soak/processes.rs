//! The invariant soak: for a bounded time (`SOAK_SECONDS`, default 60), several real operator
//! processes (some with leader election, some without), `migrate` processes and application
//! racers that follow Brighter's lock and history rules work on many BoxTables in several schemas,
//! while operators are killed (SIGKILL, SIGTERM), their PostgreSQL sessions terminated, API
//! requests failed, stalled or their watches cut (through a fault-injecting proxy in front of the
//! real kube-apiserver; the leader-election Lease included), specs edited and BoxTables deleted
//! (Drop with consent, Retain). The soak's own checks talk to the API server directly.
//!
//! Checked while it runs and at the end:
//! - never two sessions holding one advisory lock (`pg_locks`, sampled every 20 ms);
//! - every table's columns match its highest history row, history versions run without gaps, and
//!   no table lacks history nor history its table (one statement, so one snapshot);
//! - no BoxTable is `Stalled` except for a lock timeout, which the racers really cause;
//! - a deleted Drop BoxTable leaves no table and no history rows; every deletion finishes;
//! - no operator exits by itself (API blips shorter than the renew deadline, Lease included, must
//!   not end leadership), a SIGTERMed one exits within a bound and no longer holds the Lease;
//! - once the faults stop, every BoxTable is Ready at its target within a bound;
//! - once every process has ended, no advisory lock is left.
//!
//! It prints one line of counts and fails listing every violation with its context.
//! `SOAK_SEED` replays a run's random choices (the chaos itself is timing-dependent).
//!
//! [`Mode::Node`] runs the same soak, the same invariants, with the operator as the two Pods of
//! `dist/install.yaml` on the real node instead of processes on the host: `soak_node` adds its
//! chaos (Pods deleted, containers killed, kubelet restarts, a rollout) and its checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boxtable_operator::controller::CONTROLLER_NAME;
use boxtable_operator::controller::leader::RENEW_DEADLINE;
use boxtable_operator::crd::{BoxTable, CONFIRM_DROP_ANNOTATION};
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use boxtable_operator::migrate::catalog::step_statements;
use boxtable_operator::migrate::history::{HISTORY_TABLE, HistoryTable};
use boxtable_operator::migrate::{BoxKind, HistoryScope};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio_postgres::Client;

use crate::soak::node::{self as soak_node, OnNode};
use crate::support;
use crate::support::Sql;
use crate::support::control_plane::OPERATOR_NAMESPACE;
use crate::support::e2e::{Cluster, Operator, Rule, connect};

pub(crate) const NAMESPACES: [&str; 3] = ["soak-a", "soak-b", "soak-c"];
const SCHEMAS: [&str; 3] = ["s0", "s1", "s2"];
/// BoxTables alive at any time.
const POPULATION: usize = 12;
/// How long a BoxTable may take to be Ready once the faults stop.
const READY_BOUND: Duration = Duration::from_secs(240);
/// How long a deletion may take.
const DELETE_BOUND: Duration = Duration::from_secs(240);
/// How long a SIGTERMed operator may take to exit.
const TERM_BOUND: Duration = Duration::from_secs(60);
/// The longest API outage a fault on the Lease may cause (a blip: the elected operator must keep
/// leadership through it). Well under the operator's renew deadline, which a busy machine's own
/// latency eats into.
const LEASE_BLIP: Duration = Duration::from_secs(3);
/// Stalled reasons the soak really causes: racers hold the lock past short lock timeouts.
const REAL_STALL_CAUSES: [&str; 1] = ["LockTimeout"];
/// `migrate` exit reasons the soak really causes (it terminates `migrate` sessions too).
const REAL_MIGRATE_FAILURES: [&str; 2] = ["LockTimeout", "ConnectionFailed"];

/// Where the soak's operators run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Five `boxtable-operator run` processes on the host, talking to kube-apiserver through the
    /// fault proxy: SIGKILLed, SIGTERMed, their API requests failed.
    Processes,
    /// The two Pods of `dist/install.yaml` on the real node, talking to kube-apiserver as Pods
    /// do (no fault proxy between): their Pods deleted, containers killed, the kubelet restarted,
    /// a rollout (`soak_node`).
    Node,
}

#[derive(Default)]
struct Counts {
    operations: AtomicU64,
    sigkills: AtomicU64,
    sigterms: AtomicU64,
    backend_terminations: AtomicU64,
    api_faults: AtomicU64,
    lease_faults: AtomicU64,
    watch_drops: AtomicU64,
    spec_edits: AtomicU64,
    drops: AtomicU64,
    /// Drop deletions that kept a table no pass had adopted (a `TableKept` event).
    unowned_kept: AtomicU64,
    /// Drop BoxTables the API server deleted at once, before the operator had put its finalizer
    /// on them, whose table a `migrate` run had created: kept, as the README says.
    unseen_kept: AtomicU64,
    retains: AtomicU64,
    creates: AtomicU64,
    migrates: AtomicU64,
    migrate_kills: AtomicU64,
    app_migrations: AtomicU64,
    app_lock_waits_lost: AtomicU64,
    lock_samples: AtomicU64,
    longest_term_ms: AtomicU64,
    table_checks: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// Violations, each with enough context to debug.
#[derive(Default)]
pub(crate) struct Violations {
    list: Mutex<Vec<String>>,
    seen: Mutex<BTreeSet<String>>,
}

impl Violations {
    pub(crate) fn add(&self, what: String) {
        eprintln!("soak: VIOLATION: {what}");
        self.list.lock().unwrap().push(what);
    }

    /// Records a violation once per `key` (a lasting state seen by many samples).
    pub(crate) fn add_once(&self, key: String, what: String) {
        if self.seen.lock().unwrap().insert(key) {
            self.add(what);
        }
    }

    fn count(&self) -> usize {
        self.list.lock().unwrap().len()
    }
}

/// One BoxTable the soak created.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) namespace: &'static str,
    pub(crate) name: String,
    pub(crate) schema: &'static str,
    pub(crate) table: String,
    pub(crate) kind: BoxKind,
    drop: bool,
    /// When its deletion was requested.
    deleting: Option<Instant>,
    /// Its deletion finished (the object is gone).
    gone: bool,
    /// Once the API server has answered its deletion: whether it deleted the object at once,
    /// which it does only while no finalizer is on it, so the operator had not taken it in
    /// (README, "Deleting a BoxTable": nothing to drop).
    went_unseen: Option<bool>,
}

impl Entry {
    pub(crate) fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    pub(crate) fn key(&self) -> i64 {
        LockIdentity::for_table(&QualifiedName::parse(Some(self.schema), &self.table).unwrap())
            .key()
    }

    pub(crate) fn latest(&self) -> u32 {
        self.kind.latest()
    }

    fn box_name(&self) -> &'static str {
        match self.kind {
            BoxKind::Outbox => "Outbox",
            BoxKind::Inbox => "Inbox",
        }
    }
}

/// The soak's BoxTables, by sequence number.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<BTreeMap<u32, Entry>>,
    next: Mutex<u32>,
    /// Running `migrate` processes per table, so a Drop can wait for them first.
    migrates: Mutex<BTreeMap<String, Vec<Child>>>,
    /// Tables (`schema.table`) a staged disruption keeps to itself: no `migrate` run,
    /// application, edit or deletion touches them meanwhile.
    pub(crate) reserved: Mutex<BTreeSet<String>>,
}

impl Registry {
    pub(crate) fn live(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap()
            .values()
            .filter(|e| e.deleting.is_none())
            .cloned()
            .collect()
    }

    /// The live BoxTables whose tables are not reserved.
    fn unreserved(&self) -> Vec<Entry> {
        let reserved = self.reserved.lock().unwrap().clone();
        self.live()
            .into_iter()
            .filter(|e| !reserved.contains(&e.qualified()))
            .collect()
    }

    fn all(&self) -> Vec<Entry> {
        self.entries.lock().unwrap().values().cloned().collect()
    }

    /// Applies `change` to the BoxTable named `name`.
    fn update(&self, name: &str, change: impl FnOnce(&mut Entry)) {
        if let Some(e) = self
            .entries
            .lock()
            .unwrap()
            .values_mut()
            .find(|e| e.name == name)
        {
            change(e);
        }
    }

    fn kind_of(&self, schema: &str, table: &str) -> Option<BoxKind> {
        self.entries
            .lock()
            .unwrap()
            .values()
            .find(|e| e.schema == schema && e.table == table)
            .map(|e| e.kind)
    }
}

impl Drop for Registry {
    /// No `migrate` process outlives the soak, even when it fails half-way.
    fn drop(&mut self) {
        if let Ok(migrates) = self.migrates.get_mut() {
            for child in migrates.values_mut().flatten() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// An operator replica: the real binary, started again after each kill.
struct Replica {
    name: String,
    /// Takes part in leader election.
    elected: bool,
    args: Vec<String>,
    log: PathBuf,
    process: Option<Operator>,
}

impl Replica {
    fn start(&mut self, kubeconfig: &Path) {
        self.process = Some(Operator::spawn(
            &operator_binary(),
            &self.args,
            kubeconfig,
            "info,boxtable_operator=debug",
            &self.log,
            true,
        ));
    }

    fn signal(&self, signal: &str) {
        if let Some(process) = &self.process {
            process.try_signal(signal);
        }
    }

    fn running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Operator::running)
    }

    /// Waits for the process to end, if there is one.
    fn reap(&mut self) {
        if let Some(process) = &mut self.process {
            let _ = process.child.wait();
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        self.process
            .as_ref()
            .map(|p| p.log_tail(lines))
            .unwrap_or_default()
    }
}

/// The operator binary: `SOAK_OPERATOR_BINARY` (scripts/soak.sh runs a copy, so rebuilding the
/// tree during a long soak changes nothing under it), else the one cargo built for this test.
fn operator_binary() -> PathBuf {
    std::env::var_os("SOAK_OPERATOR_BINARY")
        .map_or_else(support::e2e::operator_binary, PathBuf::from)
}

/// `SOAK_SECONDS`, by default 60 s with processes and 90 s on the node (whose disruptions take
/// seconds each: every kind then happens at least once).
fn soak_seconds(mode: Mode) -> u64 {
    std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(match mode {
            Mode::Processes => 60,
            Mode::Node => 90,
        })
}

fn seed() -> u64 {
    std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

pub(crate) struct Soak {
    mode: Mode,
    pub(crate) cluster: Cluster,
    /// No new fault that can reach the Lease before this: one blip at a time.
    lease_quiet_until: Mutex<Instant>,
    /// The leader-election Lease, read directly.
    leases: Api<Lease>,
    boxtables: BTreeMap<&'static str, Api<DynamicObject>>,
    pub(crate) registry: Registry,
    replicas: Vec<Mutex<Replica>>,
    /// The operator's Pods and the node's chaos ([`Mode::Node`]).
    pub(crate) node: Option<OnNode>,
    counts: Counts,
    pub(crate) violations: Violations,
    pub(crate) stop: AtomicBool,
    manifests: PathBuf,
}

impl Soak {
    fn api(&self, ns: &str) -> &Api<DynamicObject> {
        &self.boxtables[ns]
    }

    /// Creates a new BoxTable with a table name never used before.
    async fn create(&self, rng: &mut StdRng) {
        let n = {
            let mut next = self.registry.next.lock().unwrap();
            *next += 1;
            *next
        };
        let kind = if n % 4 == 3 {
            BoxKind::Inbox
        } else {
            BoxKind::Outbox
        };
        let entry = Entry {
            namespace: NAMESPACES[rng.random_range(0..NAMESPACES.len())],
            name: format!("bt-{n}"),
            schema: SCHEMAS[n as usize % SCHEMAS.len()],
            table: format!("t{n}"),
            kind,
            drop: n % 2 == 0,
            deleting: None,
            gone: false,
            went_unseen: None,
        };
        let target = rng.random_range(1..=entry.latest());
        let timeout = ["0s", "1s", "3s", "10s"][rng.random_range(0..4)];
        let mut object = json!({
            "apiVersion": "brighter.dev/v1alpha1",
            "kind": "BoxTable",
            "metadata": {"name": entry.name, "namespace": entry.namespace},
            "spec": {
                "box": entry.box_name(),
                "schema": entry.schema,
                "table": entry.table,
                "targetVersion": target,
                "deletionPolicy": if entry.drop { "Drop" } else { "Retain" },
                "lock": {"timeout": timeout},
                "database": {"secretRef": {"name": "db"}},
            },
        });
        if entry.drop {
            // Consent up front: a `migrate` may create the table before the operator does, and
            // the operator then adopts it.
            object["metadata"]["annotations"] = json!({CONFIRM_DROP_ANNOTATION: entry.qualified()});
        }
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let api = self.api(entry.namespace).clone();
        retry_api(&format!("create {}", entry.name), || {
            let api = api.clone();
            let object = object.clone();
            async move {
                match api.create(&Default::default(), &object).await {
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    other => other.map(drop),
                }
            }
        })
        .await;
        self.registry.entries.lock().unwrap().insert(n, entry);
        bump(&self.counts.creates);
    }

    pub(crate) async fn patch(&self, entry: &Entry, patch: Value) {
        let api = self.api(entry.namespace).clone();
        let name = entry.name.clone();
        retry_api(&format!("patch {name}"), || {
            let api = api.clone();
            let name = name.clone();
            let patch = patch.clone();
            async move {
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    other => other.map(drop),
                }
            }
        })
        .await;
    }

    async fn edit(&self, rng: &mut StdRng) {
        let live = self.registry.unreserved();
        if live.is_empty() {
            return;
        }
        let entry = &live[rng.random_range(0..live.len())];
        let Some(object) = self.fetch(entry).await else {
            return;
        };
        let spec = &object.data["spec"];
        let patch = match rng.random_range(0..3) {
            0 => {
                let current = spec["targetVersion"].as_u64().unwrap_or(1) as u32;
                if current >= entry.latest() {
                    return;
                }
                json!({"spec": {"targetVersion": current + 1}})
            }
            1 => {
                let timeout = ["0s", "1s", "3s", "10s", "30s"][rng.random_range(0..5)];
                json!({"spec": {"lock": {"timeout": timeout}}})
            }
            _ => {
                let suspended = spec["suspend"].as_bool().unwrap_or(false);
                json!({"spec": {"suspend": !suspended}})
            }
        };
        self.patch(entry, patch).await;
        bump(&self.counts.spec_edits);
    }

    pub(crate) async fn fetch(&self, entry: &Entry) -> Option<DynamicObject> {
        let api = self.api(entry.namespace).clone();
        let name = entry.name.clone();
        retry_api(&format!("get {name}"), || {
            let api = api.clone();
            let name = name.clone();
            async move { api.get_opt(&name).await }
        })
        .await
    }

    /// Deletes a BoxTable (after stopping the `migrate` runs on its table, which could otherwise
    /// create the table again after the drop, as a Brighter application may) and creates another.
    async fn delete(&self, rng: &mut StdRng) {
        let live = self.registry.unreserved();
        if live.len() < POPULATION / 2 {
            return;
        }
        let entry = live[rng.random_range(0..live.len())].clone();
        self.registry
            .update(&entry.name, |e| e.deleting = Some(Instant::now()));
        self.stop_migrates(&entry);
        if entry.drop {
            // A suspended BoxTable changes nothing, drops included (it reports DropBlocked until
            // resumed): a user asking for the drop resumes it first.
            self.patch(&entry, json!({"spec": {"suspend": false}}))
                .await;
        }
        let api = self.api(entry.namespace).clone();
        let name = entry.name.clone();
        // The server answers with the object when a finalizer holds it and with a Status when it
        // deleted it at once; a 404 (a retry after a lost answer) tells neither.
        let went_at_once = retry_api(&format!("delete {name}"), || {
            let api = api.clone();
            let name = name.clone();
            async move {
                match api.delete(&name, &DeleteParams::default()).await {
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
                    other => other.map(|answer| answer.is_right()),
                }
            }
        })
        .await;
        self.registry
            .update(&entry.name, |e| e.went_unseen = Some(went_at_once));
        if entry.drop {
            bump(&self.counts.drops);
        } else {
            bump(&self.counts.retains);
        }
        self.create(rng).await;
    }

    /// Stops the `migrate` runs on `entry`'s table.
    pub(crate) fn stop_migrates(&self, entry: &Entry) {
        let running = self
            .registry
            .migrates
            .lock()
            .unwrap()
            .remove(&entry.qualified())
            .unwrap_or_default();
        for mut child in running {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts `migrate` for a live table, sometimes SIGKILLing it soon after.
    fn migrate(&self, rng: &mut StdRng) {
        let live = self.registry.unreserved();
        if live.is_empty() {
            return;
        }
        let entry = &live[rng.random_range(0..live.len())];
        let target = rng.random_range(1..=entry.latest());
        let path = self.manifests.join(format!("{}-{target}.yaml", entry.name));
        std::fs::write(
            &path,
            format!(
                "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: {}\n  \
                 namespace: {}\nspec:\n  box: {}\n  schema: {}\n  table: {}\n  targetVersion: \
                 {target}\n  lock:\n    timeout: 5s\n  database:\n    secretRef:\n      name: db\n",
                entry.name,
                entry.namespace,
                entry.box_name(),
                entry.schema,
                entry.table
            ),
        )
        .unwrap();
        let child = Command::new(operator_binary())
            .arg("migrate")
            .arg("-f")
            .arg(&path)
            .arg("--database-url")
            .arg(&self.cluster.db.url)
            .args(["-o", "yaml"])
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        bump(&self.counts.migrates);
        let mut migrates = self.registry.migrates.lock().unwrap();
        let list = migrates.entry(entry.qualified()).or_default();
        if rng.random_bool(0.1) {
            let _ = Command::new("kill")
                .args(["-KILL", &child.id().to_string()])
                .status();
            bump(&self.counts.migrate_kills);
        }
        list.push(child);
    }

    /// Collects finished `migrate` runs; a failure other than a real cause is a violation.
    fn reap_migrates(&self, wait: bool) {
        let mut migrates = self.registry.migrates.lock().unwrap();
        for (table, children) in migrates.iter_mut() {
            let mut keep = Vec::new();
            for mut child in children.drain(..) {
                let done = if wait {
                    wait_child(&mut child, Duration::from_secs(180))
                } else {
                    matches!(child.try_wait(), Ok(Some(_)))
                };
                if !done {
                    keep.push(child);
                    continue;
                }
                let out = child.wait_with_output().unwrap();
                if out.status.code().is_none() || out.status.success() {
                    continue; // killed by the soak, or succeeded
                }
                let stdout = String::from_utf8_lossy(&out.stdout);
                if REAL_MIGRATE_FAILURES
                    .iter()
                    .any(|r| stdout.contains(&format!("reason: {r}")))
                {
                    continue;
                }
                let stderr = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
                self.violations.add(format!(
                    "migrate on {table} exited {:?} without a real cause:\n{stdout}\n{}",
                    out.status.code(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
            *children = keep;
        }
    }

    async fn terminate_backend(&self, observer: &Client) {
        let rows = observer
            .query(
                "SELECT pg_terminate_backend(pid) FROM (SELECT pid FROM pg_stat_activity \
                 WHERE application_name LIKE 'boxtable-operator%' AND datname = current_database() \
                 ORDER BY random() LIMIT 1) p",
                &[],
            )
            .await
            .unwrap();
        if !rows.is_empty() {
            bump(&self.counts.backend_terminations);
        }
    }

    /// Injects one API fault in front of the operators: an error status (5xx, 429, 409), a
    /// stalled request (then forwarded, or answered 504), or cut watches. Faults on BoxTables,
    /// core resources (Secrets) and Events last 1 to 5 requests and stall up to 5 s. A fault that
    /// can reach the Lease (on coordination.k8s.io, or on every path) is a blip of at most
    /// [`LEASE_BLIP`], and the next one waits until it is long over, so together they stay
    /// within the renew deadline: an elected operator must keep leadership through them.
    fn fault(&self, rng: &mut StdRng) {
        let prefixes = [
            "/apis/brighter.dev",
            "/api/v1",
            "/apis/events.k8s.io",
            "/apis/coordination.k8s.io",
            "/",
        ];
        let prefix = prefixes[rng.random_range(0..prefixes.len())];
        let lease = matches!(prefix, "/apis/coordination.k8s.io" | "/");
        if lease {
            let mut quiet = self.lease_quiet_until.lock().unwrap();
            if Instant::now() < *quiet {
                return;
            }
            *quiet = Instant::now() + LEASE_BLIP + RENEW_DEADLINE;
        }
        let status = [503, 500, 429, 409][rng.random_range(0..4)];
        let rule = match rng.random_range(0..6) {
            0 if !lease => {
                self.cluster.api.drop_watches();
                bump(&self.counts.watch_drops);
                bump(&self.counts.api_faults);
                return;
            }
            0 | 1 => Rule::drop_watch(),
            2 | 3 => Rule::status(status),
            4 => Rule::stall(self.stall(rng, lease)).then_status(504),
            _ => Rule::stall(self.stall(rng, lease)),
        };
        let mut rule = rule.path_prefix(prefix);
        if lease {
            // Every matching request for up to LEASE_BLIP; a request arriving at its end is held
            // at most LEASE_BLIP more, and still well within the renew deadline.
            rule = rule.during(Duration::from_millis(
                rng.random_range(500..=LEASE_BLIP.as_millis() as u64),
            ));
            bump(&self.counts.lease_faults);
        } else {
            rule = rule.times(rng.random_range(1..6));
            if rng.random_bool(0.5) {
                rule = rule.method(["GET", "PATCH", "PUT", "POST"][rng.random_range(0..4)]);
            }
        }
        self.cluster.api.add(rule);
        bump(&self.counts.api_faults);
    }

    fn stall(&self, rng: &mut StdRng, lease: bool) -> Duration {
        let most = if lease {
            LEASE_BLIP.as_millis() as u64
        } else {
            5000
        };
        Duration::from_millis(rng.random_range(300..=most))
    }

    /// The Lease's holder, read directly (`None` when free or absent; retried through errors).
    pub(crate) async fn lease_holder(&self) -> Option<String> {
        let leases = self.leases.clone();
        retry_api("get the Lease", || {
            let leases = leases.clone();
            async move { leases.get_opt(CONTROLLER_NAME).await }
        })
        .await
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
    }

    fn kill_replica(&self, rng: &mut StdRng) {
        let index = rng.random_range(0..self.replicas.len());
        let mut replica = self.replicas[index].lock().unwrap();
        if !replica.running() {
            return;
        }
        if rng.random_bool(0.5) {
            replica.signal("KILL");
            bump(&self.counts.sigkills);
            replica.reap();
        } else {
            self.terminate(&mut replica, "SIGTERM");
        }
        replica.start(&self.cluster.operator_kubeconfig);
    }

    /// SIGTERMs a replica: it must exit within [`TERM_BOUND`] and, if elected, must not hold the
    /// Lease afterwards (it hands it back) unless a Lease fault may have failed the hand-back.
    fn terminate(&self, replica: &mut Replica, what: &str) {
        let sent = Instant::now();
        replica.signal("TERM");
        bump(&self.counts.sigterms);
        let exited = replica
            .process
            .as_mut()
            .is_some_and(|p| wait_child(&mut p.child, TERM_BOUND));
        let took = sent.elapsed();
        self.counts
            .longest_term_ms
            .fetch_max(took.as_millis() as u64, Ordering::Relaxed);
        if !exited {
            self.violations.add(format!(
                "operator {} did not exit within {TERM_BOUND:?} of the {what}; log:\n{}",
                replica.name,
                replica.log_tail(30)
            ));
            replica.signal("KILL");
        }
        replica.reap();
        if !(exited && replica.elected) {
            return;
        }
        let lease_fault_window = {
            let quiet = *self.lease_quiet_until.lock().unwrap();
            let injected = quiet.checked_sub(LEASE_BLIP + RENEW_DEADLINE);
            injected.is_some_and(|at| at < Instant::now() && at + 2 * LEASE_BLIP > sent)
        };
        if lease_fault_window {
            return;
        }
        let holder = tokio::runtime::Handle::current().block_on(self.lease_holder());
        if holder.as_deref() == Some(replica.name.as_str()) {
            self.violations.add(format!(
                "operator {} exited {took:?} after the {what} but still holds the Lease (no \
                 Lease fault in between); log:\n{}",
                replica.name,
                replica.log_tail(30)
            ));
        }
    }

    /// An operator that exited without being signalled is a violation; it is started again.
    fn check_replicas(&self) {
        for replica in &self.replicas {
            let mut replica = replica.lock().unwrap();
            let status = replica
                .process
                .as_mut()
                .and_then(|p| p.child.try_wait().ok().flatten());
            if let Some(status) = status {
                self.violations.add(format!(
                    "operator {} exited by itself ({status}); log:\n{}",
                    replica.name,
                    replica.log_tail(30)
                ));
                replica.start(&self.cluster.operator_kubeconfig);
            }
        }
    }

    /// Every table's shape against its history, from one snapshot.
    async fn check_tables(&self, client: &Client) {
        bump(&self.counts.table_checks);
        let row = client
            .query_one(
                &format!(
                    "SELECT \
                     (SELECT coalesce(json_agg(json_build_array(n.nspname, c.relname, \
                       (SELECT json_agg(a.attname::text) FROM pg_attribute a \
                        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))), '[]') \
                      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                      WHERE c.relkind = 'r' AND n.nspname = ANY($1))::text, \
                     (SELECT coalesce(json_agg(json_build_array(h.\"SchemaName\", h.\"BoxTableName\", \
                       h.\"MigrationVersion\")), '[]') FROM public.{HISTORY_TABLE} h)::text"
                ),
                &[&SCHEMAS.to_vec()],
            )
            .await;
        let Ok(row) = row else {
            return;
        };
        let tables: Vec<(String, String, Vec<String>)> =
            serde_json::from_str(row.get::<_, &str>(0)).unwrap();
        let history: Vec<(String, String, i32)> =
            serde_json::from_str(row.get::<_, &str>(1)).unwrap();
        let mut versions: BTreeMap<(String, String), Vec<i32>> = BTreeMap::new();
        for (schema, table, version) in history {
            versions.entry((schema, table)).or_default().push(version);
        }
        let mut shapes: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for (schema, table, columns) in tables {
            shapes.insert((schema, table), columns.into_iter().collect());
        }
        for ((schema, table), columns) in &shapes {
            let Some(kind) = self.registry.kind_of(schema, table) else {
                continue;
            };
            let Some(recorded) = versions.get(&(schema.clone(), table.clone())) else {
                self.violations.add_once(
                    format!("nohistory {schema}.{table}"),
                    format!("{schema}.{table} exists without history rows; columns {columns:?}"),
                );
                continue;
            };
            let max = *recorded.iter().max().unwrap_or(&0);
            let expected: BTreeSet<String> = kind
                .columns_at(max as u32)
                .into_iter()
                .map(str::to_owned)
                .collect();
            let actual: BTreeSet<String> = columns.iter().filter(|c| *c != "id").cloned().collect();
            if actual != expected {
                self.violations.add_once(
                    format!("shape {schema}.{table} {max}"),
                    format!(
                        "{schema}.{table} is recorded at V{max} (history {recorded:?}) but has \
                         columns {actual:?}, expected {expected:?}"
                    ),
                );
            }
        }
        for ((schema, table), recorded) in &versions {
            if self.registry.kind_of(schema, table).is_none() {
                continue;
            }
            let mut sorted = recorded.clone();
            sorted.sort_unstable();
            let min = sorted[0];
            let contiguous: Vec<i32> = (min..min + sorted.len() as i32).collect();
            if sorted != contiguous {
                self.violations.add_once(
                    format!("history {schema}.{table} {sorted:?}"),
                    format!("{schema}.{table} history has gaps or duplicates: {sorted:?}"),
                );
            }
            if !shapes.contains_key(&(schema.clone(), table.clone())) {
                self.violations.add_once(
                    format!("notable {schema}.{table}"),
                    format!(
                        "history records {schema}.{table} at {sorted:?} but the table is missing"
                    ),
                );
            }
        }
    }

    /// Stalled conditions and deletions.
    async fn check_boxtables(&self, client: &Client, deadline_for_deletes: bool) {
        let mut present: BTreeMap<String, DynamicObject> = BTreeMap::new();
        for ns in NAMESPACES {
            let Ok(list) = self.api(ns).list(&ListParams::default()).await else {
                return; // a transient error; the next round looks again
            };
            for object in list.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                present.insert(name, object);
            }
        }
        for object in present.values() {
            let name = object.metadata.name.clone().unwrap_or_default();
            let stalled = conditions(object)
                .into_iter()
                .find(|c| c["type"] == "Stalled" && c["status"] == "True");
            if let Some(c) = stalled {
                let reason = c["reason"].as_str().unwrap_or_default();
                if !REAL_STALL_CAUSES.contains(&reason) {
                    self.violations.add_once(
                        format!("stalled {name} {reason}"),
                        format!(
                            "{name} is Stalled without a real cause: {c}; status {}",
                            object.data["status"]
                        ),
                    );
                }
            }
        }
        for entry in self.registry.all() {
            let Some(since) = entry.deleting else {
                continue;
            };
            if entry.gone || entry.went_unseen.is_none() {
                continue; // gone and checked, or its deletion not answered yet
            }
            if present.contains_key(&entry.name) {
                if deadline_for_deletes && since.elapsed() > DELETE_BOUND {
                    let object = &present[&entry.name];
                    self.violations.add_once(
                        format!("slowdelete {}", entry.name),
                        format!(
                            "{} still exists {:?} after its deletion; status {}",
                            entry.name,
                            since.elapsed(),
                            object.data["status"]
                        ),
                    );
                }
                continue;
            }
            if entry.drop {
                let table_left: bool = client
                    .value(
                        "SELECT to_regclass($1) IS NOT NULL",
                        &[&format!("\"{}\".\"{}\"", entry.schema, entry.table)],
                    )
                    .await;
                let rows: i64 = client
                    .value(
                        &format!(
                            "SELECT count(*) FROM public.{HISTORY_TABLE} \
                             WHERE \"SchemaName\" = $1 AND \"BoxTableName\" = $2"
                        ),
                        &[&entry.schema, &entry.table],
                    )
                    .await;
                if table_left || rows > 0 {
                    self.survived_drop(client, &entry, table_left, rows).await;
                }
            }
            self.registry.update(&entry.name, |e| e.gone = true);
        }
    }

    /// A Drop BoxTable is gone and its table is not. Allowed only as the ownership rules say
    /// (README, "Deleting a BoxTable"): the table carries no ownership record of this BoxTable (a
    /// `migrate` run created it and the BoxTable was deleted before any pass adopted it) and the
    /// operator said so with a `TableKept` event; or the BoxTable went before the operator took it
    /// in (no finalizer yet), so it never created or adopted the table, which therefore carries
    /// no ownership record of it. Anything else is a violation.
    async fn survived_drop(&self, client: &Client, entry: &Entry, table_left: bool, rows: i64) {
        let record: Option<String> = if table_left {
            client
                .query_one(
                    "SELECT obj_description(to_regclass($1), 'pg_class')",
                    &[&format!("\"{}\".\"{}\"", entry.schema, entry.table)],
                )
                .await
                .ok()
                .and_then(|row| row.get(0))
        } else {
            None
        };
        let owned = record
            .as_deref()
            .is_some_and(|r| r.contains(&format!("boxtable={}/{} ", entry.namespace, entry.name)));
        let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(
            self.leases.clone().into_client(),
            entry.namespace,
        );
        let kept = events
            .list(&ListParams::default().fields(&format!(
                "involvedObject.name={},reason=TableKept",
                entry.name
            )))
            .await
            .map(|list| list.items.len())
            .unwrap_or(0);
        if table_left && !owned && kept > 0 {
            bump(&self.counts.unowned_kept);
            return;
        }
        if table_left && record.is_none() && entry.went_unseen == Some(true) {
            bump(&self.counts.unseen_kept);
            return;
        }
        self.violations.add(format!(
            "Drop BoxTable {}/{} is gone but {} survives (table present: {table_left}, history \
             rows: {rows}, ownership record: {record:?}, TableKept events: {kept}, deleted at \
             once: {})",
            entry.namespace,
            entry.name,
            entry.qualified(),
            entry.went_unseen == Some(true)
        ));
    }

    /// BoxTables not yet Ready at their target, with why.
    async fn not_ready(&self) -> Option<Vec<String>> {
        let mut waiting = Vec::new();
        for entry in self.registry.live() {
            let object = self
                .api(entry.namespace)
                .get_opt(&entry.name)
                .await
                .ok()??;
            let generation = object.metadata.generation.unwrap_or(0);
            let status = &object.data["status"];
            let ready = conditions(&object)
                .into_iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let target = object.data["spec"]["targetVersion"].as_u64().unwrap_or(0);
            let applied = status["appliedVersion"].as_u64().unwrap_or(0);
            let observed = status["observedGeneration"].as_i64().unwrap_or(-1);
            if !(ready && observed == generation && applied >= target) {
                waiting.push(format!("{}/{}: {status}", entry.namespace, entry.name));
            }
        }
        Some(waiting)
    }
}

fn conditions(object: &DynamicObject) -> Vec<Value> {
    object.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn wait_child(child: &mut Child, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Retries an API call through a busy server's transient errors (the soak's own requests go
/// straight to kube-apiserver, around the fault proxy).
pub(crate) async fn retry_api<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match call().await {
            Ok(value) => return value,
            Err(e) => {
                assert!(Instant::now() < deadline, "{what} kept failing: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// An application following Brighter's rules: try the table's advisory lock with Brighter's
/// backoff, and under it bring an existing table up to this application's version, one step and
/// one history row at a time in one transaction; then release. Applications never create tables
/// here, so a dropped table stays dropped.
async fn application(soak: Arc<Soak>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut config: tokio_postgres::Config = soak.cluster.db.url.parse().unwrap();
    config.application_name("soak-application");
    let mut client: Option<Client> = None;
    while !soak.stop.load(Ordering::Relaxed) {
        if client.as_ref().is_none_or(Client::is_closed) {
            let Ok((c, conn)) = config.connect(tokio_postgres::NoTls).await else {
                continue;
            };
            tokio::spawn(conn);
            client = Some(c);
        }
        let c = client.as_ref().unwrap();
        let live = soak.registry.unreserved();
        if live.is_empty() {
            tokio::task::yield_now().await;
            continue;
        }
        let entry = &live[rng.random_range(0..live.len())];
        let version = rng.random_range(1..=entry.latest());
        let hold_ms = rng.random_range(0..400);
        match brighter_migrate(c, entry, version, hold_ms).await {
            Ok(true) => bump(&soak.counts.app_migrations),
            // The lock was not had within Brighter's budget, or the session broke.
            Ok(false) | Err(_) => bump(&soak.counts.app_lock_waits_lost),
        }
    }
}

async fn brighter_migrate(
    client: &Client,
    entry: &Entry,
    version: u32,
    hold_ms: u64,
) -> Result<bool, tokio_postgres::Error> {
    let key = entry.key();
    let mut acquired = false;
    for delay in [100, 200, 400, 800, 1000, 1000] {
        acquired = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await?
            .get(0);
        if acquired {
            break;
        }
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if !acquired {
        return Ok(false);
    }
    let result = async {
        let table = QualifiedName::parse(Some(entry.schema), &entry.table).unwrap();
        let history = HistoryTable::for_table(&table, HistoryScope::Global);
        client.batch_execute("BEGIN").await?;
        let row = client
            .query_one(
                &format!(
                    "SELECT to_regclass($1) IS NOT NULL, (SELECT max(\"MigrationVersion\") FROM {} \
                     WHERE \"SchemaName\" = $2 AND \"BoxTableName\" = $3)",
                    history.quoted()
                ),
                &[&table.quoted(), &entry.schema, &entry.table],
            )
            .await?;
        let exists: bool = row.get(0);
        let max: Option<i32> = row.get(1);
        if let (true, Some(max)) = (exists, max) {
            for step in entry.kind.versions() {
                if step.number as i32 <= max || step.number > version {
                    continue;
                }
                for statement in step_statements(step, &table) {
                    client.batch_execute(&statement).await?;
                }
                client
                    .execute(
                        &format!(
                            "INSERT INTO {} (\"MigrationVersion\", \"SchemaName\", \"BoxTableName\", \
                             \"Description\") VALUES ($1, $2, $3, $4)",
                            history.quoted()
                        ),
                        &[&(step.number as i32), &entry.schema, &entry.table, &step.description],
                    )
                    .await?;
            }
        }
        // A migration takes a while: the DDL's locks are held until the commit.
        tokio::time::sleep(Duration::from_millis(hold_ms)).await;
        client.batch_execute("COMMIT").await?;
        Ok(())
    }
    .await;
    if result.is_err() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    let _ = client
        .query_one("SELECT pg_advisory_unlock($1)", &[&key])
        .await;
    result.map(|()| true)
}

/// Samples `pg_locks`: no advisory lock may be granted to two sessions.
async fn lock_sampler(soak: Arc<Soak>) {
    let client = connect(&soak.cluster.db.url).await;
    while !soak.stop.load(Ordering::Relaxed) {
        let rows = client
            .query(
                "SELECT l.classid::int8, l.objid::int8, l.objsubid::int4, \
                 string_agg(l.pid || ' ' || coalesce(a.application_name, '?') || ' since ' || \
                 coalesce(a.xact_start::text, '-') || ': ' || coalesce(left(a.query, 120), ''), '; ') \
                 FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.locktype = 'advisory' AND l.granted \
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 GROUP BY 1, 2, 3 HAVING count(DISTINCT l.pid) > 1",
                &[],
            )
            .await;
        bump(&soak.counts.lock_samples);
        if let Ok(rows) = rows {
            for row in rows {
                let (classid, objid, subid): (i64, i64, i32) = (row.get(0), row.get(1), row.get(2));
                let holders: String = row.get(3);
                soak.violations.add(format!(
                    "two sessions hold advisory lock ({classid}, {objid}, {subid}): {holders}"
                ));
            }
        }
        check_ddl_under_lock(&soak, &client).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every session holding a box table in `ACCESS EXCLUSIVE` mode (`ALTER TABLE`, `DROP TABLE`) also
/// holds that table's advisory lock: nobody migrates or drops a table outside Brighter's lock.
/// `pg_locks` is read once (materialised), so both sides come from one lock-manager snapshot.
async fn check_ddl_under_lock(soak: &Soak, client: &Client) {
    let rows = client
        .query(
            "WITH l AS MATERIALIZED (SELECT * FROM pg_locks WHERE granted                AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))              SELECT l.pid, n.nspname::text, c.relname::text,                coalesce((SELECT array_agg((a.classid::int8 << 32) | a.objid::int8) FROM l a                  WHERE a.pid = l.pid AND a.locktype = 'advisory' AND a.objsubid = 1), '{}'),                coalesce((SELECT application_name || ': ' || left(query, 160)                  FROM pg_stat_activity s WHERE s.pid = l.pid), '?')              FROM l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace              WHERE l.locktype = 'relation' AND l.mode = 'AccessExclusiveLock' AND c.relkind = 'r'                AND n.nspname = ANY($1)",
            &[&SCHEMAS.to_vec()],
        )
        .await;
    let Ok(rows) = rows else {
        return;
    };
    for row in rows {
        let (pid, schema, table): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
        let held: Vec<i64> = row.get(3);
        let Ok(name) = QualifiedName::parse(Some(&schema), &table) else {
            continue;
        };
        let wanted = LockIdentity::for_table(&name).key();
        if !held.contains(&wanted) {
            let activity: String = row.get(4);
            soak.violations.add(format!(
                "session {pid} ({activity}) holds {schema}.{table} ACCESS EXCLUSIVE without its \
                 advisory lock (it holds {held:?})"
            ));
        }
    }
}

async fn checker(soak: Arc<Soak>) {
    let client = connect(&soak.cluster.db.url).await;
    let mut round = 0u64;
    while !soak.stop.load(Ordering::Relaxed) {
        soak.check_tables(&client).await;
        if round.is_multiple_of(4) {
            soak.check_boxtables(&client, true).await;
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_keeps_every_invariant() {
    soak(Mode::Processes).await;
}

/// Three replicas with leader election over two namespaces, two without over the third.
fn replicas(cluster: &Cluster) -> Vec<Mutex<Replica>> {
    let mut replicas = Vec::new();
    for i in 0..5 {
        let elected = i < 3;
        let name = if elected {
            format!("elected-{i}")
        } else {
            format!("free-{i}")
        };
        let mut args: Vec<String> = ["run", "--metrics-addr", "127.0.0.1:0"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let watched: &[&str] = if elected {
            &["soak-a", "soak-b"]
        } else {
            &["soak-c"]
        };
        for ns in watched {
            args.extend(["--namespace".to_owned(), (*ns).to_owned()]);
        }
        args.extend(
            [
                "--resync-interval",
                "3s",
                "--retry-backoff",
                "200ms",
                "--concurrency",
                "4",
                "--instance",
                &name,
            ]
            .iter()
            .map(|s| (*s).to_owned()),
        );
        if elected {
            args.extend(
                [
                    "--leader-election",
                    "--leader-election-namespace",
                    OPERATOR_NAMESPACE,
                ]
                .iter()
                .map(|s| (*s).to_owned()),
            );
        }
        let log = cluster.dir.path().join(format!("{name}.log"));
        replicas.push(Mutex::new(Replica {
            name,
            elected,
            args,
            log,
            process: None,
        }));
    }
    replicas
}

/// One turn of the soak's own chaos (the node's runs beside it, see `soak_node`).
enum Action {
    KillReplica,
    TerminateBackend,
    ApiFault,
    Edit,
    Delete,
    Migrate,
}

impl Action {
    /// Operators are killed and API faults injected only where they are processes behind the
    /// fault proxy; on the node the Pods' disruptions take their place.
    fn pick(mode: Mode, rng: &mut StdRng) -> Action {
        loop {
            let action = match rng.random_range(0..100) {
                0..8 => Action::KillReplica,
                8..20 => Action::TerminateBackend,
                20..32 => Action::ApiFault,
                32..55 => Action::Edit,
                55..63 => Action::Delete,
                _ => Action::Migrate,
            };
            if mode == Mode::Processes || !matches!(action, Action::KillReplica | Action::ApiFault)
            {
                return action;
            }
        }
    }
}

/// The soak: operators as `mode` says, the same chaos on the database and the BoxTables, the same
/// invariants.
pub(crate) async fn soak(mode: Mode) {
    let seconds = soak_seconds(mode);
    let seed = seed();
    eprintln!("soak: {seconds} s, {mode:?}, SOAK_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    // As processes, the operators talk to kube-apiserver through the fault proxy, as the
    // operator's ServiceAccount (so deploy/rbac.yaml alone authorises them). As Pods, they talk
    // to it as the Pods of dist/install.yaml do.
    let cluster = match mode {
        Mode::Processes => Cluster::start_with_faults().await,
        Mode::Node => Cluster::start().await,
    };
    let admin = connect(&cluster.db.url).await;
    for schema in SCHEMAS {
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .unwrap();
    }
    // The Global history table exists from the start, so one statement can read it with the
    // tables (Brighter's shape, as the operator would create it).
    let history = HistoryTable::for_table(
        &QualifiedName::parse(None, "outbox").unwrap(),
        HistoryScope::Global,
    );
    admin.batch_execute(&history.create_sql()).await.unwrap();

    // The soak's own client: the admin, straight to kube-apiserver.
    let client = cluster.admin_client().await;
    // The Lease lives in the operator's namespace (deploy/rbac.yaml grants it there).
    let leases = Api::<Lease>::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let (replicas, node) = match mode {
        Mode::Processes => {
            for ns in NAMESPACES {
                cluster.secret(ns, "db").await;
            }
            // An earlier test's holder would make the first leader wait a whole lease duration.
            let _ = leases
                .delete(CONTROLLER_NAME, &DeleteParams::default())
                .await;
            (replicas(&cluster), None)
        }
        Mode::Node => {
            let node = OnNode::install(client.clone()).await;
            for ns in NAMESPACES {
                node.secret(&cluster, ns).await;
            }
            (Vec::new(), Some(node))
        }
    };
    let resource = ApiResource::erase::<BoxTable>(&());
    let boxtables = NAMESPACES
        .iter()
        .map(|ns| {
            (
                *ns,
                Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource),
            )
        })
        .collect();
    let manifests = cluster.dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();

    let soak = Arc::new(Soak {
        mode,
        cluster,
        lease_quiet_until: Mutex::new(Instant::now()),
        leases,
        boxtables,
        registry: Registry::default(),
        replicas,
        node,
        counts: Counts::default(),
        violations: Violations::default(),
        stop: AtomicBool::new(false),
        manifests,
    });
    for replica in &soak.replicas {
        replica
            .lock()
            .unwrap()
            .start(&soak.cluster.operator_kubeconfig);
    }
    for _ in 0..POPULATION {
        soak.create(&mut rng).await;
    }

    let mut background = Vec::new();
    background.push(tokio::spawn(lock_sampler(soak.clone())));
    background.push(tokio::spawn(checker(soak.clone())));
    for i in 0..3 {
        background.push(tokio::spawn(application(
            soak.clone(),
            seed.wrapping_add(i),
        )));
    }
    if soak.node.is_some() {
        background.push(tokio::spawn(soak_node::memory_sampler(soak.clone())));
        background.push(tokio::spawn(soak_node::chaos(
            soak.clone(),
            Duration::from_secs(seconds),
            rng.random(),
        )));
    }

    // The chaos.
    let end = Instant::now() + Duration::from_secs(seconds);
    let observer = connect(&soak.cluster.db.url).await;
    while Instant::now() < end {
        bump(&soak.counts.operations);
        match Action::pick(mode, &mut rng) {
            Action::KillReplica => {
                let s = soak.clone();
                let mut r = StdRng::seed_from_u64(rng.random());
                tokio::task::spawn_blocking(move || s.kill_replica(&mut r))
                    .await
                    .unwrap();
            }
            Action::TerminateBackend => soak.terminate_backend(&observer).await,
            Action::ApiFault => soak.fault(&mut rng),
            Action::Edit => soak.edit(&mut rng).await,
            Action::Delete => soak.delete(&mut rng).await,
            Action::Migrate => soak.migrate(&mut rng),
        }
        soak.reap_migrates(false);
        soak.check_replicas();
        let pause = rng.random_range(100..500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }

    // Settle: no more faults or racers (the node's chaos ends its disruption and waits for the
    // operator to be back); every replica up; nothing suspended.
    soak.stop.store(true, Ordering::Relaxed);
    for task in background {
        task.await.unwrap();
    }
    if mode == Mode::Processes {
        soak.cluster.api.clear();
    }
    {
        let s = soak.clone();
        tokio::task::spawn_blocking(move || s.reap_migrates(true))
            .await
            .unwrap();
    }
    for replica in &soak.replicas {
        let mut replica = replica.lock().unwrap();
        if !replica.running() {
            replica.start(&soak.cluster.operator_kubeconfig);
        }
    }
    for entry in soak.registry.live() {
        soak.patch(&entry, json!({"spec": {"suspend": false}}))
            .await;
    }
    let ready_after = soak.settle(&observer).await;
    soak.check_tables(&observer).await;

    // Every process ends: no advisory lock may be left, and the last leader hands the Lease back.
    match &soak.node {
        None => {
            let s = soak.clone();
            tokio::task::spawn_blocking(move || {
                for replica in &s.replicas {
                    s.terminate(&mut replica.lock().unwrap(), "final SIGTERM");
                }
            })
            .await
            .unwrap();
        }
        Some(node) => node.stop_all(&soak).await,
    }
    if let Some(holder) = soak.lease_holder().await {
        soak.violations.add(format!(
            "every elected operator has exited but the Lease is still held by {holder}"
        ));
    }
    soak.no_lock_left(&observer).await;
    soak.report(seconds, seed, ready_after);
}

impl Soak {
    /// Waits until every BoxTable is Ready at its target and every deletion has finished; a
    /// violation for each that is not within [`READY_BOUND`]. Returns how long that took.
    async fn settle(&self, observer: &Client) -> Duration {
        let settle = Instant::now();
        let mut last = Vec::new();
        loop {
            self.check_boxtables(observer, true).await;
            let pending_deletes = self
                .registry
                .all()
                .iter()
                .filter(|e| e.deleting.is_some() && !e.gone)
                .count();
            if let Some(waiting) = self.not_ready().await {
                if waiting.is_empty() && pending_deletes == 0 {
                    break;
                }
                last = waiting;
            }
            if settle.elapsed() > READY_BOUND {
                for w in &last {
                    self.violations.add(format!(
                        "not Ready within {READY_BOUND:?} after the faults stopped: {w}"
                    ));
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        settle.elapsed()
    }

    /// Once every operator has ended, no advisory lock may be left (within 60 s).
    async fn no_lock_left(&self, observer: &Client) {
        let locks_deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let rows = observer
                .query(
                    "SELECT l.pid, coalesce(a.application_name, '?'), l.objid::int8 FROM pg_locks l \
                     LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' \
                     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                    &[],
                )
                .await
                .unwrap();
            if rows.is_empty() {
                break;
            }
            if Instant::now() > locks_deadline {
                let held: Vec<String> = rows
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {} {}",
                            r.get::<_, i32>(0),
                            r.get::<_, String>(1),
                            r.get::<_, i64>(2)
                        )
                    })
                    .collect();
                self.violations.add(format!(
                    "advisory locks left after every process ended: {held:?}"
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Prints the line of counts; fails listing every violation, keeping the operators' logs.
    fn report(&self, seconds: u64, seed: u64, ready_after: Duration) {
        let c = &self.counts;
        let violations = self.violations.count();
        let operators = match &self.node {
            None => format!(
                "kills {} (SIGKILL {}, SIGTERM {}, migrate SIGKILL {}; longest SIGTERM exit {:.1} s), \
                 faults {} (API {}: Lease blips {}, watch cuts {}; PostgreSQL backend terminations {})",
                get(&c.sigkills) + get(&c.sigterms) + get(&c.migrate_kills),
                get(&c.sigkills),
                get(&c.sigterms),
                get(&c.migrate_kills),
                get(&c.longest_term_ms) as f64 / 1000.0,
                get(&c.api_faults) + get(&c.backend_terminations),
                get(&c.api_faults),
                get(&c.lease_faults),
                get(&c.watch_drops),
                get(&c.backend_terminations),
            ),
            Some(node) => format!(
                "{}, migrate SIGKILL {}, PostgreSQL backend terminations {}",
                node.summary(),
                get(&c.migrate_kills),
                get(&c.backend_terminations),
            ),
        };
        let node_checks = self.node.as_ref().map_or(0, OnNode::checks);
        println!(
            "soak: {seconds} s seed {seed} {:?}: operations {} (spec edits {}, creates {}, drops {} \
             (unowned tables kept {}, kept as never taken in {}), retains {}, migrate runs {}, application migrations {}, application lock give-ups {}), \
             {operators}, checks {} (lock samples {}, table snapshots {}{}), ready {:.1} s after the faults stopped, \
             violations {violations}",
            self.mode,
            get(&c.operations) + get(&c.app_migrations) + get(&c.app_lock_waits_lost),
            get(&c.spec_edits),
            get(&c.creates),
            get(&c.drops),
            get(&c.unowned_kept),
            get(&c.unseen_kept),
            get(&c.retains),
            get(&c.migrates),
            get(&c.app_migrations),
            get(&c.app_lock_waits_lost),
            get(&c.lock_samples) + get(&c.table_checks) + node_checks,
            get(&c.lock_samples),
            get(&c.table_checks),
            if self.node.is_some() {
                format!(", operator Pod checks {node_checks}")
            } else {
                String::new()
            },
            ready_after.as_secs_f64(),
        );
        if violations == 0 {
            return;
        }
        // The run's directory goes with the test; keep the operators' whole logs.
        let kept = std::env::temp_dir().join(format!("boxtable-soak-{seed}"));
        let _ = std::fs::create_dir_all(&kept);
        for replica in &self.replicas {
            let replica = replica.lock().unwrap();
            let _ = std::fs::copy(&replica.log, kept.join(format!("{}.log", replica.name)));
            eprintln!(
                "--- {} (last lines) ---\n{}",
                replica.name,
                replica.log_tail(40)
            );
        }
        if let Some(node) = &self.node {
            node.keep_logs(&kept);
        }
        eprintln!("soak: the operators' logs are kept in {}", kept.display());
        panic!(
            "{violations} invariant violations:\n{}",
            self.violations.list.lock().unwrap().join("\n")
        );
    }
}
