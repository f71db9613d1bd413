//! The operator installed on the real node the way a user installs it: a kustomize overlay of a
//! copy of `dist/install.yaml` that overrides the image with the one `scripts/image.sh` built from
//! this commit (loaded into the node, `imagePullPolicy: Never`), rolled out, and scaled to zero
//! when the fixture is dropped, so the tests after it find the shared Lease free.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::control_plane::{ControlPlane, OPERATOR_NAMESPACE, control_plane, root};
use crate::support::node::{Node, get_json, node, operator_image, printed, wait_for};

/// The operator's Deployment, from `dist/install.yaml`.
pub const DEPLOYMENT: &str = "boxtable-operator";
/// The label its Pods carry.
pub const SELECTOR: &str = "app.kubernetes.io/name=boxtable-operator";

/// The install; on drop the namespaces registered with [`Install::namespace`] are deleted and the
/// Deployment is scaled to zero, its Pods gone.
pub struct Install {
    pub plane: &'static ControlPlane,
    pub node: &'static Node,
    /// The image the Deployment runs.
    pub image: &'static str,
    /// From `kubectl apply` to the end of `kubectl rollout status`.
    pub rollout: Duration,
    namespaces: Vec<String>,
}

/// A kustomize overlay of a copy of `bundle` (a release's `dist/install.yaml`) in `dir`, as a
/// user overrides the image: the image loaded into the node, never pulled; `args` are added to
/// the operator's arguments.
pub fn overlay(dir: &Path, bundle: &Path, image: &str, args: &[&str]) {
    std::fs::copy(bundle, dir.join("install.yaml"))
        .unwrap_or_else(|e| panic!("copy {}: {e}", bundle.display()));
    let (name, tag) = image.rsplit_once(':').unwrap();
    let added: String = args
        .iter()
        .map(|arg| {
            format!(
                "\n      - op: add\n        path: /spec/template/spec/containers/0/args/-\n        \
                 value: {arg:?}"
            )
        })
        .collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n\
             kind: Kustomization\n\
             resources:\n  - install.yaml\n\
             images:\n  - name: ghcr.io/boxtable/boxtable-operator\n    newName: {name}\n    newTag: \"{tag}\"\n\
             patches:\n  - target: {{kind: Deployment, name: boxtable-operator}}\n    patch: |-\n      \
             - op: replace\n        path: /spec/template/spec/containers/0/imagePullPolicy\n        value: Never{added}\n"
        ),
    )
    .unwrap();
}

impl Install {
    /// `kubectl apply -k` of the overlay of this commit's `dist/install.yaml` with its image, then
    /// `kubectl rollout status` (fails the test when the rollout does not complete in 3 minutes),
    /// then waits for two Ready Pods.
    pub fn dist() -> Install {
        Install::dist_with_args(&[])
    }

    /// [`Install::dist`] with `args` added to the operator's arguments by the overlay.
    pub fn dist_with_args(args: &[&str]) -> Install {
        Install::installed(&root().join("dist/install.yaml"), operator_image(), args)
    }

    /// The same with another release's `install.yaml` and image (an older one, for an upgrade).
    pub fn bundle(bundle: &Path, image: &'static str) -> Install {
        Install::installed(bundle, image, &[])
    }

    fn installed(bundle: &Path, image: &'static str, args: &[&str]) -> Install {
        let mut install = Install {
            plane: control_plane(),
            node: node(),
            image,
            rollout: Duration::ZERO,
            namespaces: Vec::new(),
        };
        install.rollout = install.apply_with(bundle, image, args);
        install
    }

    /// Applies the overlay of `bundle` with `image` and `args` added to the operator's arguments
    /// over what is installed, as an upgrade does, and waits for the rollout and two Ready Pods
    /// running `image`; returns the time from `kubectl apply` to the end of `kubectl rollout
    /// status`.
    pub fn apply_with(&mut self, bundle: &Path, image: &'static str, args: &[&str]) -> Duration {
        let plane = self.plane;
        let dir = tempfile::tempdir().unwrap();
        overlay(dir.path(), bundle, image, args);
        let started = Instant::now();
        plane
            .kubectl_admin(&["apply", "-k", dir.path().to_str().unwrap()], None)
            .unwrap_or_else(|m| panic!("{m}"));
        let rollout = plane.kubectl_as(
            &plane.admin_kubeconfig,
            &[
                "-n",
                OPERATOR_NAMESPACE,
                "rollout",
                "status",
                &format!("deployment/{DEPLOYMENT}"),
                "--timeout=180s",
            ],
            None,
        );
        assert!(
            rollout.status.success(),
            "the rollout did not complete: {}\npods: {:#}",
            printed(&rollout),
            Value::Array(self.pods())
        );
        let took = started.elapsed();
        self.image = image;
        let pods = self.ready_pods(2);
        for pod in &pods {
            assert_eq!(pod["spec"]["containers"][0]["image"], image, "{pod:#}");
        }
        took
    }

    /// Deletes namespace `name` (and so its BoxTables, while the operator still runs) when the
    /// install is removed.
    pub fn namespace(&mut self, name: &str) {
        self.namespaces.push(name.to_owned());
    }

    /// The operator's Pods that are not being deleted.
    pub fn pods(&self) -> Vec<Value> {
        let pods = get_json(
            self.plane,
            &["-n", OPERATOR_NAMESPACE, "pods", "-l", SELECTOR],
        );
        pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .cloned()
            .collect()
    }

    /// Waits (a minute at most) for `n` Ready Pods and no other, and returns them.
    pub fn ready_pods(&self, n: usize) -> Vec<Value> {
        wait_for(
            &format!("{n} Ready operator Pods"),
            Duration::from_secs(60),
            || {
                let pods = self.pods();
                (pods.len() == n && pods.iter().all(is_ready)).then_some(pods)
            },
        )
    }

    /// The Lease `boxtable-operator`: (holder, renewTime, acquireTime), holder empty when none.
    pub fn lease(&self) -> (String, Option<jiff::Timestamp>, Option<jiff::Timestamp>) {
        let lease = get_json(
            self.plane,
            &["-n", OPERATOR_NAMESPACE, "lease", "boxtable-operator"],
        );
        let spec = &lease["spec"];
        let time = |field: &str| spec[field].as_str().and_then(|t| t.parse().ok());
        (
            spec["holderIdentity"].as_str().unwrap_or("").to_owned(),
            time("renewTime"),
            time("acquireTime"),
        )
    }

    /// The pid, on the host, of the operator's process in `pod`.
    pub fn operator_pid(&self, pod: &Value) -> u32 {
        let uid = pod["metadata"]["uid"].as_str().unwrap();
        self.find_operator_pid(uid)
            .unwrap_or_else(|| panic!("no operator process in Pod {}", name(pod)))
    }

    /// The pid, on the host, of the operator's process in the Pod with UID `uid`, if it runs.
    pub fn find_operator_pid(&self, uid: &str) -> Option<u32> {
        self.node.processes().into_iter().find(|pid| {
            let cmdline =
                std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            cmdline.starts_with("/boxtable-operator\0") && cgroup.contains(&format!("pod{uid}"))
        })
    }

    /// Waits (a minute at most) until one of `pods` holds the Lease; returns its name.
    pub fn leader(&self, pods: &[Value]) -> String {
        wait_for(
            "the Lease held by an operator Pod",
            Duration::from_secs(60),
            || {
                let (holder, _, _) = self.lease();
                pods.iter()
                    .any(|p| p["metadata"]["name"] == holder.as_str())
                    .then_some(holder)
            },
        )
    }
}

/// Scales the operator's Deployment to zero replicas (the Pods then go).
pub fn scale_to_zero(plane: &ControlPlane) -> Result<String, String> {
    plane.kubectl_admin(
        &[
            "-n",
            OPERATOR_NAMESPACE,
            "scale",
            "deployment",
            DEPLOYMENT,
            "--replicas=0",
        ],
        None,
    )
}

impl Drop for Install {
    fn drop(&mut self) {
        for namespace in &self.namespaces {
            self.plane.delete_namespace(namespace);
        }
        // Scaled to zero rather than deleted: the uninstall guard of dist/install.yaml refuses to
        // delete the Deployment while the CRD exists (and the next install scales it up again).
        let _ = scale_to_zero(self.plane);
        // The tests after this one elect through the same Lease: the Pods must be gone.
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut left = Vec::new();
        while Instant::now() < deadline {
            let listed = self.plane.kubectl_admin(
                &[
                    "-n",
                    OPERATOR_NAMESPACE,
                    "get",
                    "pods",
                    "-l",
                    SELECTOR,
                    "-o",
                    "json",
                ],
                None,
            );
            left = listed
                .ok()
                .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                .and_then(|pods| pods["items"].as_array().cloned())
                .unwrap_or_else(|| vec![Value::Null]);
            if left.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if !std::thread::panicking() {
            panic!(
                "the operator's Pods were still there 2 minutes after scaling to zero: {:?}",
                left.iter()
                    .map(|p| p["metadata"]["name"].to_string())
                    .collect::<Vec<_>>()
            );
        }
    }
}

/// Whether `pod` is Ready.
pub fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The name of `pod`.
pub fn name(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap().to_owned()
}

/// A Secret named `name` in `namespace` with the connection string the node's Pods reach database
/// `db` of the suite's PostgreSQL by (through the node's forwarder).
pub fn secret_for(node: &Node, namespace: &str, name: &str, db: &crate::support::TestDb) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\n\
         stringData:\n  connectionString: \"{}\"\n",
        connection_string(node, db)
    )
}

/// An Npgsql connection string for database `db` at the address the node's Pods reach the suite's
/// PostgreSQL by.
pub fn connection_string(node: &Node, db: &crate::support::TestDb) -> String {
    let postgres = node.postgres.clone().unwrap_or_else(|| {
        panic!(
            "the node forwards no PostgreSQL (NODE_POSTGRES is empty): scripts/node.sh forwards \
             the one of DATABASE_URL when it listens on the host's loopback, as scripts/pg.sh's does"
        )
    });
    let (host, port) = postgres.rsplit_once(':').unwrap();
    let config = db.config();
    format!(
        "Host={host};Port={port};Database={};Username={};Password={};SSL Mode=Disable",
        db.name,
        config.get_user().unwrap(),
        String::from_utf8_lossy(config.get_password().unwrap())
    )
}

/// The history rows of `db` (none when it has no history table): (table, version, the second it
/// was applied in, Unix time), ordered by table and version.
pub fn history(
    runtime: &tokio::runtime::Runtime,
    db: &crate::support::TestDb,
) -> Vec<(String, i32, i64)> {
    runtime.block_on(async {
        let client = db.connect().await;
        client
            .query(
                "SELECT \"BoxTableName\"::text, \"MigrationVersion\", \
                 floor(extract(epoch FROM \"AppliedAt\"))::bigint \
                 FROM public.\"__BrighterMigrationHistory\" ORDER BY 1, 2",
                &[],
            )
            .await
            .map(|rows| {
                rows.iter()
                    .map(|r| (r.get(0), r.get(1), r.get(2)))
                    .collect()
            })
            .unwrap_or_default()
    })
}
