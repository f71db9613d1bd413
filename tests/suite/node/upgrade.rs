//! The operator upgraded in place on the real node, from an older commit's release to this one, the
//! two ways the README says: `kubectl apply` of `dist/install.yaml` (the image overridden by the
//! overlay a user keeps) and `helm upgrade` of the chart. The older release is [`PREVIOUS`]'s, as
//! `scripts/previous-image.sh` builds it (its own image, `dist/install.yaml` and chart, built once
//! and cached by commit). It installs and brings [`FLEET`] BoxTables to Ready; then the upgrade
//! rolls out this commit's image, and once its leader has reconciled every BoxTable:
//!
//! - no migration ran again: the history table holds exactly the rows it held, and the new
//!   leader's `boxtable_migrations_applied_total` is 0;
//! - no status changed beyond the one-time changes listed in [`ONE_TIME_CHANGES`], and no
//!   BoxTable was seen in any state but its Ready one and those listed in [`TRANSIENT`] while the
//!   Pods were replaced (a watch records every state);
//! - nothing stalled, no advisory lock is left, and `/metrics` of the new leader serves this
//!   commit's `boxtable_build_info`.
//!
//! The times are printed: 50 Ready under the old release, the rollout, the `helm upgrade`.
//! Like every node test, they run one at a time (`scripts/test-node.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use boxtable_operator::crd::BoxTable;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;

use crate::support::Sql;
use crate::support::control_plane::{ControlPlane, OPERATOR_NAMESPACE, control_plane, root};
use crate::support::helm::helm;
use crate::support::node::{
    Node, assert_succeeded, get_json, node, operator_image, printed, wait_for,
};
use crate::support::node_install::{Install, is_ready, name, secret_for};
use crate::support::{TestDb, fresh_db};

/// The release upgraded from: a commit before ownership records named their cluster and before
/// the Drifted condition said Unknown after a pass that did not compare the table's shape, whose
/// `scripts/image.sh`, `dist/install.yaml` and chart work as this commit's do.
const PREVIOUS: &str = "8b7174a";
/// BoxTables brought to Ready under the older release.
const FLEET: usize = 50;
/// The Secret the fleet's BoxTables name.
const SECRET: &str = "upgrade-db";
/// Added to the upgraded operator's arguments (by the overlay, or the chart's `extraArgs`). The
/// new leader spreads the passes of current BoxTables over the resync interval, and the checks
/// wait until it has passed over every one: at the shipped 5 minutes that wait was most of each
/// test. The upgrade itself (image, manifests, chart) is the release's.
const UPGRADED_ARGS: [&str; 1] = ["--resync-interval=20s"];

/// The status fields an upgrade from [`PREVIOUS`] changes once, as this release documents them:
/// (path in the status, with conditions named by type; why). None: the ownership records
/// [`PREVIOUS`] wrote (without a cluster name) count as this cluster's and are kept as they are
/// (README, "Ownership"), and a Ready BoxTable's status is written again only when a pass
/// computes another one, which no pass of an unchanged table does.
const ONE_TIME_CHANGES: &[(&str, &str)] = &[];

/// States (the Ready condition's status and reason) a BoxTable may pass through while the
/// operator's Pods are replaced, besides its Ready one: a check the old leader ([`PREVIOUS`],
/// which still did so) had in flight when it was stopped writes `Cancelled` ("stopped by an
/// operator shutdown ...; nothing was changed"), and the new leader's pass makes it Ready again.
/// This release leaves a Ready BoxTable's status alone then (README, "On SIGTERM").
const TRANSIENT: &[(&str, &str)] = &[("False", "Cancelled")];

/// The older release, built and loaded into the node once per run.
struct Previous {
    /// What `scripts/previous-image.sh` left: `dist/install.yaml`, `charts/`, `image/`.
    dir: PathBuf,
    /// The name its image is loaded under.
    image: String,
    /// Its `boxtable_build_info` revision.
    revision: String,
}

fn previous() -> &'static Previous {
    static PREVIOUS_RELEASE: OnceLock<Previous> = OnceLock::new();
    PREVIOUS_RELEASE.get_or_init(|| {
        let started = Instant::now();
        let out = Command::new(root().join("scripts/previous-image.sh"))
            .arg(PREVIOUS)
            .current_dir(root())
            .output()
            .expect("run scripts/previous-image.sh");
        assert!(
            out.status.success(),
            "scripts/previous-image.sh {PREVIOUS}: {}",
            printed(&out)
        );
        let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        let commit = std::fs::read_to_string(dir.join("revision")).unwrap();
        let revision = commit.trim()[..12].to_owned();
        let image = format!("localhost/boxtable-operator:{revision}");
        node().load_image(&dir.join("image/boxtable-operator.tar"), &image);
        eprintln!(
            "the image of {PREVIOUS} built (or found cached) and loaded into the node in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        Previous {
            dir,
            image,
            revision,
        }
    })
}

/// This commit's `boxtable_build_info` revision, as `build.rs` records it.
fn this_revision() -> String {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root())
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The fleet's database, namespace and watch.
struct Fleet {
    plane: &'static ControlPlane,
    node: &'static Node,
    namespace: String,
    db: TestDb,
    runtime: tokio::runtime::Runtime,
}

impl Fleet {
    fn new(namespace: &str) -> Fleet {
        let plane = control_plane();
        let node = node();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let db = runtime.block_on(fresh_db());
        plane.fresh_namespace(namespace);
        plane
            .kubectl_admin(
                &["apply", "-f", "-"],
                Some(&secret_for(node, namespace, SECRET, &db)),
            )
            .unwrap_or_else(|m| panic!("{m}"));
        Fleet {
            plane,
            node,
            namespace: namespace.to_owned(),
            db,
            runtime,
        }
    }

    /// Applies the fleet, half outboxes and half inboxes, as YAML both releases' CRDs take, and
    /// waits for all of it to be Ready; returns the time from the apply.
    fn apply_and_wait_ready(&self) -> Duration {
        let mut manifests = String::new();
        for i in 0..FLEET {
            let (kind, table) = if i % 2 == 0 {
                ("Outbox", format!("outbox_{i:02}"))
            } else {
                ("Inbox", format!("inbox_{i:02}"))
            };
            manifests.push_str(&format!(
                "---\napiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  \
                 name: fleet-{i:02}\n  namespace: {}\nspec:\n  box: {kind}\n  table: {table}\n  \
                 database:\n    secretRef:\n      name: {SECRET}\n",
                self.namespace
            ));
        }
        let started = Instant::now();
        self.plane
            .kubectl_admin(&["apply", "-f", "-"], Some(&manifests))
            .unwrap_or_else(|m| panic!("{m}"));
        wait_for(
            &format!("{FLEET} BoxTables Ready"),
            Duration::from_secs(600),
            || {
                let statuses = self.statuses();
                (statuses.len() == FLEET && statuses.values().all(|s| ready_state(s).0 == "True"))
                    .then_some(())
            },
        );
        started.elapsed()
    }

    /// Every BoxTable's status, by name.
    fn statuses(&self) -> BTreeMap<String, Value> {
        get_json(self.plane, &["-n", &self.namespace, "boxtables"])["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|bt| (name(bt), bt["status"].clone()))
            .collect()
    }

    /// Every row of the history table, whole, in order.
    fn history(&self) -> Vec<String> {
        self.runtime.block_on(async {
            self.db
                .connect()
                .await
                .column(
                    "SELECT row_to_json(h)::text FROM public.\"__BrighterMigrationHistory\" h \
                     ORDER BY \"BoxTableName\", \"MigrationVersion\"",
                    &[],
                )
                .await
        })
    }

    /// The comment of every table in `public` (where the ownership records live), by table.
    fn comments(&self) -> BTreeMap<String, Option<String>> {
        self.runtime.block_on(async {
            self.db
                .connect()
                .await
                .pairs(
                    "SELECT c.relname::text, obj_description(c.oid, 'pg_class') FROM pg_class c \
                     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
                     AND c.relname <> '__BrighterMigrationHistory'",
                    &[],
                )
                .await
                .into_iter()
                .collect()
        })
    }

    fn advisory_locks(&self) -> i64 {
        self.runtime
            .block_on(async { crate::support::db::advisory_locks(&self.db.connect().await).await })
    }

    /// Starts recording every (name, Ready status, Ready reason, Stalled status) the BoxTables
    /// are seen in, until the returned recorder is stopped.
    fn watch(&self) -> Recorder {
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let api: Api<DynamicObject> = self.runtime.block_on(async {
            Api::namespaced_with(
                self.plane.admin_client().await,
                &self.namespace,
                &ApiResource::erase::<BoxTable>(&()),
            )
        });
        let record = seen.clone();
        let task = self.runtime.spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(bt) | watcher::Event::InitApply(bt)) = event {
                    let status = bt.data.get("status").cloned().unwrap_or(Value::Null);
                    let (ready, reason) = ready_state(&status);
                    let stalled = condition(&status, "Stalled").0;
                    record.lock().unwrap().insert(State {
                        name: bt.metadata.name.unwrap_or_default(),
                        ready,
                        reason,
                        stalled,
                    });
                }
            }
        });
        Recorder { seen, task }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.plane.delete_namespace(&self.namespace);
    }
}

/// One state a BoxTable was seen in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct State {
    name: String,
    ready: String,
    reason: String,
    stalled: String,
}

struct Recorder {
    seen: Arc<Mutex<BTreeSet<State>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    fn stop(self) -> BTreeSet<State> {
        self.task.abort();
        self.seen.lock().unwrap().clone()
    }
}

/// (status, reason) of condition `type_` in `status`, empty when absent.
fn condition(status: &Value, type_: &str) -> (String, String) {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_owned(),
                c["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .unwrap_or_default()
}

fn ready_state(status: &Value) -> (String, String) {
    condition(status, "Ready")
}

/// `status` flattened to (path, value) pairs without timestamps, conditions named by type:
/// `conditions[Ready].reason`.
fn flatten(status: &Value) -> BTreeMap<String, Value> {
    fn walk(path: String, value: &Value, out: &mut BTreeMap<String, Value>) {
        match value {
            Value::Object(fields) => {
                for (key, value) in fields {
                    let timestamp = key.ends_with("Time") || key.ends_with("At");
                    if !timestamp {
                        let path = if path.is_empty() {
                            key.clone()
                        } else {
                            format!("{path}.{key}")
                        };
                        walk(path, value, out);
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let key = item["type"].as_str().map_or(i.to_string(), str::to_owned);
                    walk(format!("{path}[{key}]"), item, out);
                }
            }
            leaf => {
                out.insert(path, leaf.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(String::new(), status, &mut out);
    out
}

/// The paths whose values differ between `before` and `after` (present in one only, or changed),
/// with what they held (three BoxTables' at most, then how many more).
fn changes(
    before: &BTreeMap<String, Value>,
    after: &BTreeMap<String, Value>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut changed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (bt, old) in before {
        let (old, new) = (flatten(old), flatten(&after[bt]));
        for path in old.keys().chain(new.keys()) {
            if old.get(path) != new.get(path) {
                changed.entry(path.clone()).or_default().insert(format!(
                    "{:?} -> {:?}",
                    old.get(path),
                    new.get(path)
                ));
            }
        }
    }
    for values in changed.values_mut() {
        if values.len() > 3 {
            let more = values.len() - 3;
            *values = values.iter().take(3).cloned().collect();
            values.insert(format!("... and {more} more"));
        }
    }
    changed
}

/// The samples of `name` (with any labels) in a metrics text, with their values.
fn samples<'a>(metrics: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            if !(rest.is_empty() || rest.starts_with('{')) {
                return None;
            }
            Some((series, value.parse().ok()?))
        })
        .collect()
}

/// `GET /metrics` from port 8080 of the Pod at `ip`, from inside the node's network namespace.
fn metrics_of(node: &Node, ip: &str) -> String {
    let out = node.in_network(
        "curl",
        &[
            "--silent",
            "--fail",
            "--max-time",
            "10",
            &format!("http://{ip}:8080/metrics"),
        ],
    );
    assert!(
        out.status.success(),
        "GET /metrics of {ip}: {}",
        printed(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The leader's Pod among the operator's Pods in `namespace` (those `selector` selects), from the
/// Lease `boxtable-operator` there.
fn leader_pod(plane: &ControlPlane, namespace: &str, selector: &str) -> Value {
    wait_for(
        "the Lease held by a Ready operator Pod",
        Duration::from_secs(60),
        || {
            let lease = get_json(plane, &["-n", namespace, "lease", "boxtable-operator"]);
            let holder = lease["spec"]["holderIdentity"].as_str()?.to_owned();
            let pods = get_json(plane, &["-n", namespace, "pods", "-l", selector]);
            pods["items"]
                .as_array()?
                .iter()
                .find(|p| {
                    name(p) == holder && is_ready(p) && p["metadata"]["deletionTimestamp"].is_null()
                })
                .cloned()
        },
    )
}

/// What the fleet looked like under the older release, checked against it after the upgrade.
struct Before {
    statuses: BTreeMap<String, Value>,
    history: Vec<String>,
    comments: BTreeMap<String, Option<String>>,
}

fn before(fleet: &Fleet) -> Before {
    let before = Before {
        statuses: fleet.statuses(),
        history: fleet.history(),
        comments: fleet.comments(),
    };
    assert_eq!(before.comments.len(), FLEET, "{:?}", before.comments);
    assert!(before.history.len() >= FLEET, "{:?}", before.history);
    before
}

/// The checks after an upgrade, once the new leader (`leader`, in `namespace`) has reconciled
/// every BoxTable; `seen` is what the watch recorded from before the upgrade until then.
fn after(fleet: &Fleet, before: &Before, leader: &Value, seen: &BTreeSet<State>) {
    let ip = leader["status"]["podIP"].as_str().unwrap();
    // The new leader serves this commit's build_info and has migrated nothing.
    let metrics = metrics_of(fleet.node, ip);
    let build = samples(&metrics, "boxtable_build_info");
    assert_eq!(build.len(), 1, "{build:?}");
    assert!(
        build[0]
            .0
            .contains(&format!("revision=\"{}\"", this_revision()))
            && build[0]
                .0
                .contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
        "the new leader serves {build:?}, not this commit's build_info"
    );
    let migrations: f64 = samples(&metrics, "boxtable_migrations_applied_total")
        .iter()
        .map(|s| s.1)
        .sum();
    assert_eq!(
        migrations, 0.0,
        "the new leader migrated {migrations} steps"
    );

    assert_eq!(fleet.history(), before.history, "the history table changed");
    let after = fleet.statuses();
    for (bt, status) in &after {
        assert_eq!(
            condition(status, "Stalled").0,
            "False",
            "{bt} is stalled: {status:#}"
        );
        assert_eq!(condition(status, "Ready").0, "True", "{bt}: {status:#}");
    }
    let changed = changes(&before.statuses, &after);
    let documented: BTreeSet<&str> = ONE_TIME_CHANGES.iter().map(|c| c.0).collect();
    let undocumented: BTreeMap<_, _> = changed
        .iter()
        .filter(|(path, _)| !documented.contains(path.as_str()))
        .collect();
    assert!(
        undocumented.is_empty(),
        "status changes the upgrade does not document: {undocumented:#?}"
    );
    let comments = fleet.comments();
    assert_eq!(comments, before.comments, "ownership records changed");

    // Every state seen was a BoxTable's Ready state or a documented transient one; none stalled.
    let ready: BTreeSet<(String, String)> = before
        .statuses
        .values()
        .chain(after.values())
        .map(ready_state)
        .collect();
    let unexpected: Vec<&State> = seen
        .iter()
        .filter(|s| {
            s.stalled == "True"
                || !(ready.contains(&(s.ready.clone(), s.reason.clone()))
                    || TRANSIENT.contains(&(s.ready.as_str(), s.reason.as_str())))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "states seen during the upgrade that it does not document: {unexpected:#?}"
    );
    assert_eq!(fleet.advisory_locks(), 0, "an advisory lock is left");
    eprintln!(
        "after the upgrade: history unchanged ({} rows), status changes {:?}, states seen {:?}",
        before.history.len(),
        changed.keys().collect::<Vec<_>>(),
        seen.iter()
            .map(|s| (&s.ready, &s.reason))
            .collect::<BTreeSet<_>>()
    );
}

/// Waits until the new leader at `ip` has reconciled every BoxTable at least once.
fn wait_reconciled(node: &Node, ip: &str) {
    wait_for(
        "the new leader to reconcile every BoxTable",
        Duration::from_secs(300),
        || {
            let metrics = metrics_of(node, ip);
            let passes: f64 = samples(&metrics, "boxtable_reconciles_total")
                .iter()
                .map(|s| s.1)
                .sum();
            (passes >= FLEET as f64).then_some(())
        },
    );
}

#[test]
fn kubectl_apply_of_dist_install_yaml_upgrades_the_previous_release_without_migrating_again() {
    let previous = previous();
    let fleet = Fleet::new("node-upgrade-dist");
    let mut install = Install::bundle(
        &previous.dir.join("dist/install.yaml"),
        leak(&previous.image),
    );
    install.namespace(&fleet.namespace);
    let old = leader_pod(
        install.plane,
        OPERATOR_NAMESPACE,
        crate::support::node_install::SELECTOR,
    );
    let old_metrics = metrics_of(fleet.node, old["status"]["podIP"].as_str().unwrap());
    assert!(
        samples(&old_metrics, "boxtable_build_info")[0]
            .0
            .contains(&previous.revision),
        "the old release serves another build_info: {old_metrics}"
    );
    let ready = fleet.apply_and_wait_ready();
    let before = before(&fleet);

    let seen = fleet.watch();
    let rollout = install.apply_with(
        &root().join("dist/install.yaml"),
        operator_image(),
        &UPGRADED_ARGS,
    );
    let leader = leader_pod(
        install.plane,
        OPERATOR_NAMESPACE,
        crate::support::node_install::SELECTOR,
    );
    assert_eq!(leader["spec"]["containers"][0]["image"], operator_image());
    wait_reconciled(fleet.node, leader["status"]["podIP"].as_str().unwrap());
    let seen = seen.stop();
    after(&fleet, &before, &leader, &seen);
    eprintln!(
        "kubectl apply upgrade from {PREVIOUS}: {FLEET} BoxTables Ready {:.1}s after they were \
         applied under the old release; the rollout to this commit took {:.1}s",
        ready.as_secs_f64(),
        rollout.as_secs_f64()
    );
}

/// A `&'static str` of `s` (once per test; the images live for the run).
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// The Helm release of the older chart, uninstalled (after its BoxTables' namespace is gone) when
/// dropped.
struct Release {
    plane: &'static ControlPlane,
    namespace: String,
    home: tempfile::TempDir,
}

/// Not `boxtable-operator`: the chart would name its ClusterRoles as `dist/install.yaml` does.
const RELEASE: &str = "upgrade";
const CRD: &str = "crd/boxtables.brighter.dev";

impl Release {
    fn helm(&self, args: &[&str]) -> std::process::Output {
        helm("v3", self.plane, self.home.path(), args)
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = self.helm(&[
            "uninstall",
            RELEASE,
            "--namespace",
            &self.namespace,
            "--wait",
            "--timeout",
            "2m",
        ]);
        // The CRD stays (crds.keep); it goes back to what the other tests apply.
        let _ = self.plane.kubectl_admin(
            &[
                "annotate",
                CRD,
                "meta.helm.sh/release-name-",
                "meta.helm.sh/release-namespace-",
                "helm.sh/resource-policy-",
            ],
            None,
        );
        let _ = self
            .plane
            .kubectl_admin(&["label", CRD, "app.kubernetes.io/managed-by-"], None);
        self.plane.delete_namespace(&self.namespace);
    }
}

fn helm_values(image: &str) -> String {
    let (repository, tag) = image.rsplit_once(':').unwrap();
    format!("image.repository={repository},image.tag={tag},image.pullPolicy=Never")
}

#[test]
fn helm_upgrade_of_the_chart_upgrades_the_previous_release_without_migrating_again() {
    let previous = previous();
    let plane = control_plane();
    let namespace = "node-upgrade-helm-operator";
    plane.fresh_namespace(namespace);
    let release = Release {
        plane,
        namespace: namespace.to_owned(),
        home: tempfile::tempdir().unwrap(),
    };
    // The CRD the suite applied becomes the release's, as Helm adopts an object carrying its
    // release's labels, so the chart installs and upgrades it (crds.install, the default).
    plane
        .kubectl_admin(
            &[
                "annotate",
                "--overwrite",
                CRD,
                &format!("meta.helm.sh/release-name={RELEASE}"),
                &format!("meta.helm.sh/release-namespace={namespace}"),
            ],
            None,
        )
        .unwrap_or_else(|m| panic!("{m}"));
    plane
        .kubectl_admin(
            &[
                "label",
                "--overwrite",
                CRD,
                "app.kubernetes.io/managed-by=Helm",
            ],
            None,
        )
        .unwrap_or_else(|m| panic!("{m}"));
    let chart = previous.dir.join("charts/boxtable-operator");
    let installed = release.helm(&[
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        namespace,
        "--set",
        &helm_values(&previous.image),
        "--wait",
        "--timeout",
        "3m",
    ]);
    let what = format!("helm install of {PREVIOUS}'s chart");
    assert_succeeded(plane, &installed, &what, &["-n", namespace, "pods"]);
    let selector = "app.kubernetes.io/name=boxtable-operator";
    let fleet = Fleet::new("node-upgrade-helm");
    let ready = fleet.apply_and_wait_ready();
    let before = before(&fleet);

    let seen = fleet.watch();
    let started = Instant::now();
    let upgraded = release.helm(&[
        "upgrade",
        RELEASE,
        "charts/boxtable-operator",
        "--namespace",
        namespace,
        "--set",
        &format!(
            "{},extraArgs={{{}}}",
            helm_values(operator_image()),
            UPGRADED_ARGS.join(",")
        ),
        "--wait",
        "--timeout",
        "3m",
    ]);
    assert_succeeded(
        plane,
        &upgraded,
        "helm upgrade to this commit's chart",
        &["-n", namespace, "pods"],
    );
    let took = started.elapsed();
    let leader = leader_pod(plane, namespace, selector);
    assert_eq!(leader["spec"]["containers"][0]["image"], operator_image());
    wait_reconciled(fleet.node, leader["status"]["podIP"].as_str().unwrap());
    let seen = seen.stop();
    after(&fleet, &before, &leader, &seen);
    // The chart brought this commit's CRD along.
    let crd = get_json(plane, &[CRD]);
    let printed_columns = crd["spec"]["versions"][0]["additionalPrinterColumns"].to_string();
    assert!(printed_columns.contains("Drifted"), "{printed_columns}");
    drop(fleet);
    drop(release);
    eprintln!(
        "helm upgrade from {PREVIOUS}: {FLEET} BoxTables Ready {:.1}s after they were applied \
         under the old release; helm upgrade --wait to this commit took {:.1}s",
        ready.as_secs_f64(),
        took.as_secs_f64()
    );
}
