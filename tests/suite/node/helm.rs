//! The chart installed on the real node with Helm 3 and Helm 4 and its migration hook on, in a
//! namespace enforcing the `restricted` Pod Security profile: the pre-install hook Job runs
//! `boxtable-operator migrate` from the image under test and completes (Helm fails the install
//! otherwise), the tables of `examples/jobs/00-boxtables-configmap.yaml` are in the database
//! before the operator's Deployment exists, the operator's two replicas come up Ready, and
//! `helm uninstall` removes them.
//!
//! Cluster-wide like `node_install`, so `scripts/test.sh` runs it after the rest.

use std::time::{Duration, Instant};

use crate::support::control_plane::{ControlPlane, control_plane, root};
use crate::support::fresh_db;
use crate::support::helm::helm;
use crate::support::node::{get_json, node, operator_image, printed, wait_for};
use crate::support::node_install::{history, is_ready, secret_for};

const CHART: &str = "charts/boxtable-operator";

/// Uninstalls the release and deletes its namespace when dropped.
struct Release {
    plane: &'static ControlPlane,
    major: &'static str,
    name: String,
    namespace: String,
    home: tempfile::TempDir,
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = helm(
            self.major,
            self.plane,
            self.home.path(),
            &[
                "uninstall",
                &self.name,
                "--namespace",
                &self.namespace,
                "--wait",
                "--timeout",
                "2m",
            ],
        );
        self.plane.delete_namespace(&self.namespace);
    }
}

fn install_with_the_migration_hook(major: &'static str) {
    let (plane, node, image) = (control_plane(), node(), operator_image());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(fresh_db());
    let namespace = format!("node-helm-{major}");
    plane.fresh_namespace(&namespace);
    let release = Release {
        plane,
        major,
        name: format!("node-{major}"),
        namespace: namespace.clone(),
        home: tempfile::tempdir().unwrap(),
    };
    plane.enforce_restricted(&namespace);
    // What the hook needs before the install: the manifests and the connection string.
    let configmap =
        std::fs::read_to_string(root().join("examples/jobs/00-boxtables-configmap.yaml"))
            .unwrap()
            .replace("namespace: shop", &format!("namespace: {namespace}"));
    let secret = secret_for(node, &namespace, "shop-db", &db);
    plane
        .kubectl_admin(
            &["apply", "-f", "-"],
            Some(&format!("{configmap}\n---\n{secret}")),
        )
        .unwrap_or_else(|m| panic!("{m}"));
    assert!(history(&runtime, &db).is_empty());

    let (repository, tag) = image.rsplit_once(':').unwrap();
    let values = format!(
        "crds.install=false,image.repository={repository},image.tag={tag},image.pullPolicy=Never,\
         migrationJob.enabled=true,migrationJob.manifestsConfigMap=shop-boxtables,\
         migrationJob.databaseSecret.name=shop-db"
    );
    let started = Instant::now();
    let installed = helm(
        major,
        plane,
        release.home.path(),
        &[
            "install",
            &release.name,
            CHART,
            "--namespace",
            &namespace,
            "--set",
            &values,
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    assert!(
        installed.status.success(),
        "helm {major} install with the migration hook: {}\njobs: {:#}\npods: {:#}",
        printed(&installed),
        get_json(plane, &["-n", &namespace, "jobs"]),
        get_json(plane, &["-n", &namespace, "pods"])
    );
    let took = started.elapsed();

    // The hook's migrate run created both tables of the ConfigMap (nothing else writes this
    // database: its BoxTables were never applied as objects), and committed before the operator's
    // Deployment was created.
    let rows = history(&runtime, &db);
    let tables: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        tables.into_iter().collect::<Vec<_>>(),
        ["inbox", "outbox"],
        "{rows:?}"
    );
    let deployments = get_json(plane, &["-n", &namespace, "deployments"]);
    let deployment = &deployments["items"][0];
    let created: jiff::Timestamp = deployment["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let last_applied = rows.iter().map(|r| r.2).max().unwrap();
    // creationTimestamp has whole seconds.
    assert!(
        last_applied <= created.as_second(),
        "the migration committed at {last_applied} (Unix time), after the operator's Deployment was created at {created}"
    );
    // The hook Job is gone (hook-succeeded); the operator runs the image under test.
    let jobs = get_json(plane, &["-n", &namespace, "jobs"]);
    assert_eq!(jobs["items"].as_array().unwrap().len(), 0, "{jobs:#}");
    let pods = wait_for(
        "two Ready operator Pods of the release",
        Duration::from_secs(60),
        || {
            let pods = get_json(plane, &["-n", &namespace, "pods"]);
            let pods = pods["items"].as_array().unwrap().clone();
            (pods.len() == 2 && pods.iter().all(is_ready)).then_some(pods)
        },
    );
    for pod in &pods {
        assert_eq!(pod["spec"]["containers"][0]["image"], image);
    }

    // helm uninstall (as the README says) removes the operator.
    let uninstalled = helm(
        major,
        plane,
        release.home.path(),
        &[
            "uninstall",
            &release.name,
            "--namespace",
            &namespace,
            "--wait",
            "--timeout",
            "2m",
        ],
    );
    assert!(
        uninstalled.status.success(),
        "helm {major} uninstall: {}",
        printed(&uninstalled)
    );
    let left = get_json(plane, &["-n", &namespace, "deployments"]);
    assert_eq!(left["items"].as_array().unwrap().len(), 0, "{left:#}");
    eprintln!(
        "helm {major} install with the migration hook: {:.1}s to a completed hook and two Ready replicas",
        took.as_secs_f64()
    );
}

#[test]
fn helm_3_runs_the_migration_hook_job_before_the_operator_starts() {
    install_with_the_migration_hook("v3");
}

#[test]
fn helm_4_runs_the_migration_hook_job_before_the_operator_starts() {
    install_with_the_migration_hook("v4");
}
