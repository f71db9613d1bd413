//! The one-file install, `dist/install.yaml`: `deploy/` rendered by kustomize with the image
//! pinned to this version, kept in sync with `deploy/` and applied to the real control plane
//! (`scripts/control-plane.sh`, started by `scripts/test.sh`) the way the README says.

use crate::support;

// Helpers fail the test they serve, exactly as the #[test] functions do.

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

use serde_json::Value as Json;

use crate::support::control_plane::{ControlPlane, root};
use crate::support::process::run_ok;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const REGENERATE: &str = "scripts/install-bundle.sh";

/// The control plane of this run, found but not installed into: the bundle installs it.
fn plane() -> ControlPlane {
    support::control_plane::find(|name| std::env::var(name).ok()).unwrap_or_else(|m| panic!("{m}"))
}

fn documents(yaml: &str) -> Vec<Json> {
    serde_saphyr::from_multiple::<Json>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn bundle() -> Vec<Json> {
    documents(&fs::read_to_string(root().join("dist/install.yaml")).unwrap())
}

/// `kind namespace/name` of every object.
fn identities(objects: &[Json]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn the_bundle_is_deploy_rendered_with_the_image_at_this_version() {
    let plane = plane();
    let rendered = run_ok(
        &format!("{REGENERATE} --stdout"),
        Command::new(root().join(REGENERATE))
            .arg("--stdout")
            .env("KUBECTL", plane.kubectl_binary())
            .current_dir(root()),
    );
    let expected = documents(&rendered);
    let bundle = bundle();
    assert!(
        bundle == expected,
        "dist/install.yaml differs from deploy/ rendered for {VERSION}: run {REGENERATE} and commit \
         the result"
    );
    let images: Vec<&str> = bundle
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .flat_map(|d| {
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
        })
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert_eq!(
        images,
        [format!("ghcr.io/boxtable/boxtable-operator:{VERSION}")]
    );
}

#[test]
fn deploy_names_the_image_at_this_version_too() {
    let deployment = fs::read_to_string(root().join("deploy/deployment.yaml")).unwrap();
    let expected = format!("image: ghcr.io/boxtable/boxtable-operator:{VERSION}");
    assert!(
        deployment.lines().any(|l| l.trim() == expected),
        "deploy/deployment.yaml should name {expected} (bump it with the version in Cargo.toml)"
    );
}

#[test]
fn the_bundle_holds_every_object_of_deploy() {
    let out = Command::new(plane().kubectl_binary())
        .args(["kustomize", "deploy/"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success());
    let deploy = documents(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(identities(&bundle()), identities(&deploy));
    let bundle = bundle();
    let kinds: BTreeSet<&str> = bundle.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    for kind in [
        "CustomResourceDefinition",
        "Namespace",
        "Deployment",
        "ClusterRole",
        "Service",
    ] {
        assert!(kinds.contains(kind), "no {kind} in the bundle");
    }
}

#[test]
fn kubectl_apply_of_the_bundle_stores_every_object_without_warnings() {
    let plane = plane();
    let applied = plane.kubectl_as(
        &plane.admin_kubeconfig,
        &["apply", "-f", "dist/install.yaml"],
        None,
    );
    let stderr = String::from_utf8_lossy(&applied.stderr);
    assert!(
        applied.status.success(),
        "kubectl apply -f dist/install.yaml failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("Warning"),
        "the server warned about the bundle:\n{stderr}"
    );
    let objects = bundle();
    let lines = String::from_utf8_lossy(&applied.stdout).lines().count();
    assert_eq!(lines, objects.len(), "one line per object applied");

    plane
        .kubectl_admin(
            &[
                "wait",
                "--for=condition=Established",
                "crd/boxtables.brighter.dev",
                "--timeout=180s",
            ],
            None,
        )
        .unwrap();
    let stored: Json = serde_json::from_str(
        &plane
            .kubectl_admin(&["get", "-f", "dist/install.yaml", "-o", "json"], None)
            .unwrap(),
    )
    .unwrap();
    let stored = stored["items"].as_array().unwrap().clone();
    assert_eq!(identities(&stored), identities(&objects));
    let deployment = stored.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("ghcr.io/boxtable/boxtable-operator:{VERSION}")
    );
}

/// `kubectl delete -f` deletes in the file's order, and nothing guards the uninstall guard
/// itself: it must come after everything it protects (kustomize puts kinds it has no rank for
/// between the Deployment's and the webhooks').
#[test]
fn the_uninstall_guard_comes_last_so_kubectl_delete_reaches_it_after_what_it_protects() {
    let kinds: Vec<String> = bundle()
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
}
