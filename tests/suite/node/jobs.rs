//! Every example of `examples/jobs/` run on the real node as a user runs it, with the image
//! under test in place of the released one: the Argo CD PreSync Job applied as it is, the Helm
//! hook Job copied into a chart's `templates/` and installed and upgraded with Helm, and the
//! init-container Deployment, whose application container (busybox standing in for the user's
//! application) starts only once its init container has brought the tables up to date. Each runs
//! in a namespace of its own enforcing the `restricted` Pod Security profile (the control plane's
//! Pod Security admission is shown refusing a Pod the profile forbids), against a database of its
//! own that nothing else writes.
//!
//! Like every node test, they run one at a time (`scripts/test-node.sh`).

use std::time::{Duration, Instant};

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use serde_json::Value;

use crate::support::Sql;
use crate::support::control_plane::{ControlPlane, control_plane, root};
use crate::support::helm::helm;
use crate::support::node::{get_json, node, operator_image, printed, wait_for};
use crate::support::node_install::{history, secret_for};
use crate::support::{TestDb, fresh_db};

/// The image the examples name, replaced by the one under test.
const RELEASED_IMAGE: &str = "image: ghcr.io/boxtable/boxtable-operator:";
/// The init-container example's application image, replaced by busybox.
const APPLICATION_IMAGE: &str = "image: ghcr.io/example/orders-api:";
/// The tables `00-boxtables-configmap.yaml` names (the boxes' default tables, as the history
/// names them).
const TABLES: [&str; 2] = ["inbox", "outbox"];

/// A namespace enforcing the `restricted` profile, with the example's ConfigMap and the Secret
/// naming a fresh database in it; deleted when dropped.
struct Shop {
    plane: &'static ControlPlane,
    namespace: String,
    db: TestDb,
    runtime: tokio::runtime::Runtime,
}

impl Shop {
    fn new(namespace: &str) -> Shop {
        let plane = control_plane();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let db = runtime.block_on(fresh_db());
        plane.fresh_namespace(namespace);
        let shop = Shop {
            plane,
            namespace: namespace.to_owned(),
            db,
            runtime,
        };
        plane.enforce_restricted(namespace);
        shop.assert_restricted_is_enforced();
        shop.apply(&format!(
            "{}\n---\n{}",
            shop.example("00-boxtables-configmap.yaml"),
            secret_for(node(), namespace, "shop-db", &shop.db)
        ));
        assert!(shop.history().is_empty());
        shop
    }

    /// A Pod the `restricted` profile forbids (root allowed, no seccomp profile, capabilities
    /// kept) is refused by the API server, so the examples' Pods are admitted under the profile.
    fn assert_restricted_is_enforced(&self) {
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unrestricted\n  namespace: {}\n\
             spec:\n  containers:\n    - name: shell\n      image: {}\n      command: [sleep, \"1\"]\n",
            self.namespace,
            busybox()
        );
        let out = self.plane.kubectl_as(
            &self.plane.admin_kubeconfig,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&pod),
        );
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains("violates PodSecurity \"restricted"),
            "namespace {} does not enforce the restricted profile: {}",
            self.namespace,
            printed(&out)
        );
    }

    /// `examples/jobs/<file>` moved to this namespace, the released image replaced by the one
    /// under test (loaded into the node, never pulled) and the application image by busybox.
    fn example(&self, file: &str) -> String {
        let text = std::fs::read_to_string(root().join("examples/jobs").join(file)).unwrap();
        let mut out = String::new();
        for line in text.lines() {
            let indent = &line[..line.len() - line.trim_start().len()];
            let trimmed = line.trim_start();
            if trimmed.starts_with(RELEASED_IMAGE) {
                out.push_str(&format!(
                    "{indent}image: {}\n{indent}imagePullPolicy: Never\n",
                    operator_image()
                ));
            } else if trimmed.starts_with(APPLICATION_IMAGE) {
                out.push_str(&format!(
                    "{indent}image: {}\n{indent}imagePullPolicy: Never\n{indent}command: [sleep, \"3600\"]\n",
                    busybox()
                ));
            } else {
                out.push_str(
                    &line.replace("namespace: shop", &format!("namespace: {}", self.namespace)),
                );
                out.push('\n');
            }
        }
        out
    }

    fn apply(&self, manifests: &str) {
        self.plane
            .kubectl_admin(&["apply", "-f", "-"], Some(manifests))
            .unwrap_or_else(|m| panic!("{m}"));
    }

    fn history(&self) -> Vec<(String, i32, i64)> {
        history(&self.runtime, &self.db)
    }

    /// Both tables in the history, each created once at its newest version: one row each, so a
    /// second migrate run (another replica, an upgrade hook) changed nothing.
    fn assert_migrated_once(&self) -> Vec<(String, i32, i64)> {
        let rows = self.history();
        let tables: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(tables, TABLES, "history rows: {rows:?}");
        rows
    }

    fn pods(&self, selector: &str) -> Vec<Value> {
        get_json(self.plane, &["-n", &self.namespace, "pods", "-l", selector])["items"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Waits (3 minutes at most) for Job `name` to complete; fails at once, with its Pods' logs,
    /// when it fails.
    fn job_completes(&self, name: &str) -> Duration {
        let started = Instant::now();
        wait_for(
            &format!("Job {name} to complete"),
            Duration::from_secs(180),
            || {
                let job = get_json(self.plane, &["-n", &self.namespace, "job", name]);
                let conditions = job["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if conditions
                    .iter()
                    .any(|c| c["type"] == "Failed" && c["status"] == "True")
                {
                    panic!(
                        "Job {name} failed: {job:#}\nlogs:\n{}",
                        self.logs(&format!("job-name={name}"))
                    );
                }
                conditions
                    .iter()
                    .any(|c| c["type"] == "Complete" && c["status"] == "True")
                    .then(|| started.elapsed())
            },
        )
    }

    /// The logs of every container of the Pods `selector` selects.
    fn logs(&self, selector: &str) -> String {
        let out = self.plane.kubectl_as(
            &self.plane.admin_kubeconfig,
            &[
                "-n",
                &self.namespace,
                "logs",
                "-l",
                selector,
                "--all-containers",
                "--prefix",
                "--tail=50",
            ],
            None,
        );
        printed(&out)
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        self.plane.delete_namespace(&self.namespace);
    }
}

/// The busybox image `scripts/node.sh` loads into the node.
fn busybox() -> String {
    std::env::var("NODE_BUSYBOX_IMAGE")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!("NODE_BUSYBOX_IMAGE is not set: run the node tests with scripts/test-node.sh")
        })
}

/// The (started, finished) times of the terminated container `name` of `pod`, and its exit code.
fn terminated(pod: &Value, statuses: &str, name: &str) -> (jiff::Timestamp, jiff::Timestamp, i64) {
    let status = pod["status"][statuses]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no status of container {name}: {pod:#}"));
    let state = &status["state"]["terminated"];
    let time = |field: &str| -> jiff::Timestamp {
        state[field]
            .as_str()
            .unwrap_or_else(|| panic!("container {name} has not terminated: {status:#}"))
            .parse()
            .unwrap()
    };
    (
        time("startedAt"),
        time("finishedAt"),
        state["exitCode"].as_i64().unwrap(),
    )
}

/// When the running container `name` of `pod` started, or `None` when it is not running.
fn running_since(pod: &Value, name: &str) -> Option<jiff::Timestamp> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)?["state"]["running"]["startedAt"]
        .as_str()?
        .parse()
        .ok()
}

/// The `migrate` sessions (`application_name` `boxtable-operator-migrate`) connected to `db`.
async fn migrate_sessions(db: &TestDb) -> i64 {
    db.connect()
        .await
        .value(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND application_name = 'boxtable-operator-migrate'",
            &[],
        )
        .await
}

/// Every other session of `db`: (application_name, state, query).
async fn sessions(db: &TestDb) -> Vec<(String, String, String)> {
    db.connect()
        .await
        .query(
            "SELECT application_name, coalesce(state, ''), coalesce(query, '') \
             FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[test]
fn the_argo_cd_presync_job_migrates_the_tables_under_the_restricted_profile() {
    let shop = Shop::new("node-jobs-argocd");
    let job = shop.example("argocd-presync-job.yaml");
    assert!(job.contains("argocd.argoproj.io/hook: PreSync"), "{job}");
    shop.apply(&job);
    let took = shop.job_completes("shop-boxtables-presync");
    shop.assert_migrated_once();
    let pods = shop.pods("job-name=shop-boxtables-presync");
    assert_eq!(pods.len(), 1, "one Pod, no retry: {pods:#?}");
    assert_eq!(pods[0]["spec"]["containers"][0]["image"], operator_image());
    let (_, _, code) = terminated(&pods[0], "containerStatuses", "migrate");
    assert_eq!(code, 0);
    eprintln!(
        "the Argo CD PreSync Job completed {:.1}s after it was applied",
        took.as_secs_f64()
    );
}

#[test]
fn the_helm_hook_job_migrates_on_install_and_finds_nothing_to_do_on_upgrade() {
    let shop = Shop::new("node-jobs-helm");
    // A chart of the user's with the example copied into its templates/, as the example says.
    let chart = tempfile::tempdir().unwrap();
    std::fs::create_dir(chart.path().join("templates")).unwrap();
    std::fs::write(
        chart.path().join("Chart.yaml"),
        "apiVersion: v2\nname: shop\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.path().join("templates/boxtables-job.yaml"),
        shop.example("helm-hook-job.yaml"),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let chart_path = chart.path().to_str().unwrap();
    let mut times = Vec::new();
    for command in ["install", "upgrade"] {
        let started = Instant::now();
        let out = helm(
            "v3",
            shop.plane,
            home.path(),
            &[
                command,
                "shop",
                chart_path,
                "--namespace",
                &shop.namespace,
                "--wait",
                "--timeout",
                "3m",
            ],
        );
        assert!(
            out.status.success(),
            "helm {command} with the hook Job: {}\njobs: {:#}\nlogs:\n{}",
            printed(&out),
            get_json(shop.plane, &["-n", &shop.namespace, "jobs"]),
            shop.logs("app.kubernetes.io/name=boxtable-migrate")
        );
        times.push(started.elapsed());
        // Helm waited for the hook and, as its delete policy says, deleted it once it succeeded.
        let jobs = get_json(shop.plane, &["-n", &shop.namespace, "jobs"]);
        assert_eq!(jobs["items"].as_array().unwrap().len(), 0, "{jobs:#}");
        shop.assert_migrated_once();
    }
    let rows = shop.history();
    let _ = helm(
        "v3",
        shop.plane,
        home.path(),
        &["uninstall", "shop", "--namespace", &shop.namespace],
    );
    assert_eq!(rows.len(), TABLES.len());
    eprintln!(
        "helm install through the example's hook Job: {:.1}s; helm upgrade through it again: {:.1}s",
        times[0].as_secs_f64(),
        times[1].as_secs_f64()
    );
}

#[test]
fn the_init_container_deployment_starts_its_application_only_after_the_tables_are_ready() {
    let shop = Shop::new("node-jobs-init");
    // Another migrator holds both tables' advisory locks: the init containers must wait for it.
    let holder = shop.runtime.block_on(async {
        let holder = shop.db.connect().await;
        for table in TABLES {
            let key = LockIdentity::for_table(&QualifiedName::parse(None, table).unwrap()).key();
            holder
                .query_one("SELECT pg_advisory_lock($1)", &[&key])
                .await
                .unwrap();
        }
        holder
    });
    let started = Instant::now();
    shop.apply(&shop.example("init-container-deployment.yaml"));
    let selector = "app.kubernetes.io/name=orders-api";
    // Both replicas' init containers connected to the database (so waiting for the locks)...
    let deadline = Instant::now() + Duration::from_secs(120);
    while shop.runtime.block_on(migrate_sessions(&shop.db)) < 2 {
        assert!(
            Instant::now() < deadline,
            "the replicas' init containers are not both connected to the database after 2 \
             minutes: sessions {:?}\npods: {:#?}\nlogs:\n{}",
            shop.runtime.block_on(sessions(&shop.db)),
            shop.pods(selector),
            shop.logs(selector)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // ...and no application container started.
    let pods = shop.pods(selector);
    assert_eq!(pods.len(), 2, "{pods:#?}");
    for pod in &pods {
        assert_eq!(running_since(pod, "orders-api"), None, "{pod:#}");
    }
    assert!(shop.history().is_empty());
    let released = jiff::Timestamp::now();
    drop(holder);

    let rollout = shop.plane.kubectl_as(
        &shop.plane.admin_kubeconfig,
        &[
            "-n",
            &shop.namespace,
            "rollout",
            "status",
            "deployment/orders-api",
            "--timeout=180s",
        ],
        None,
    );
    assert!(
        rollout.status.success(),
        "the rollout did not complete: {}\nlogs:\n{}",
        printed(&rollout),
        shop.logs(selector)
    );
    let took = started.elapsed();

    // The tables were created once, between the release of the locks and the start of any
    // application container, and each application container started after its init container
    // exited successfully.
    let rows = shop.assert_migrated_once();
    let applied = rows.iter().map(|r| r.2).max().unwrap();
    assert!(
        applied >= released.as_second(),
        "migrated at {applied} (Unix time), before the locks were released at {released}"
    );
    let pods = shop.pods(selector);
    assert_eq!(pods.len(), 2, "{pods:#?}");
    for pod in &pods {
        let (_, finished, code) = terminated(pod, "initContainerStatuses", "migrate-box-tables");
        assert_eq!(code, 0, "{pod:#}");
        let app = running_since(pod, "orders-api")
            .unwrap_or_else(|| panic!("the application container is not running: {pod:#}"));
        // The kubelet's times have whole seconds.
        assert!(
            app >= finished && app.as_second() >= applied,
            "the application started at {app}, its init container finished at {finished}, the \
             tables were migrated at {applied} (Unix time): {pod:#}"
        );
        for statuses in ["initContainerStatuses", "containerStatuses"] {
            assert_eq!(pod["status"][statuses][0]["restartCount"], 0, "{pod:#}");
        }
    }
    eprintln!(
        "the init-container Deployment rolled out {:.1}s after it was applied (with the tables' \
         locks held until both init containers waited)",
        took.as_secs_f64()
    );
}
