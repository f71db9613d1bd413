//! The Argo CD health check for BoxTable (`deploy/argocd/boxtable-health.lua`): its case corpus,
//! the rule about generations, and the `argocd-cm` patch that installs it. The script runs in
//! gopher-lua, the Lua VM Argo CD embeds (`tools/readiness`, see `readiness_clients`), which also
//! runs every case of the corpus.
//!
//! Each file in `tests/data/argocd/` holds one case: `object` (a BoxTable as the API server returns
//! it) and `expected` (`status` and `message`).

// Helpers fail the test they serve, exactly as the #[test] functions do.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::status::readiness_clients::argocd;

/// The key Argo CD reads a custom health check from, in the `argocd-cm` ConfigMap.
const HEALTH_KEY: &str = "resource.customizations.health.brighter.dev_BoxTable";

/// Every health status Argo CD knows.
const ARGOCD_STATUSES: [&str; 6] = [
    "Healthy",
    "Progressing",
    "Degraded",
    "Suspended",
    "Missing",
    "Unknown",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> String {
    let path = root().join("deploy/argocd/boxtable-health.lua");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn read_yaml(path: &Path) -> Json {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// One case file: the object the script sees and what it must answer.
struct Case {
    name: String,
    object: Json,
    status: String,
}

fn cases() -> Vec<Case> {
    let dir = root().join("tests/data/argocd");
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let doc = read_yaml(path);
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            let field = |pointer: &str| {
                doc.pointer(pointer)
                    .and_then(Json::as_str)
                    .unwrap_or_else(|| panic!("{name}: {pointer} must be a string"))
                    .to_owned()
            };
            // Every case states the message it expects; readiness_clients compares it.
            let _ = field("/expected/message");
            Case {
                status: field("/expected/status"),
                object: doc
                    .get("object")
                    .cloned()
                    .unwrap_or_else(|| panic!("{name}: no object")),
                name,
            }
        })
        .collect()
}

#[test]
fn cases_cover_every_status_the_check_can_return() {
    let cases = cases();
    assert!(
        cases.len() >= 8,
        "expected at least 8 cases, found {}",
        cases.len()
    );
    let covered: BTreeSet<&str> = cases.iter().map(|case| case.status.as_str()).collect();
    for status in ["Healthy", "Progressing", "Degraded", "Suspended"] {
        assert!(covered.contains(status), "no case expects {status}");
    }
    for status in &covered {
        assert!(
            ARGOCD_STATUSES.contains(status),
            "{status} is not an Argo CD health status"
        );
    }
}

#[test]
fn the_check_never_answers_healthy_for_a_generation_it_has_not_seen() {
    for case in cases().iter().filter(|case| case.status == "Healthy") {
        let mut newer = case.object.clone();
        let generation = newer
            .pointer("/metadata/generation")
            .and_then(Json::as_i64)
            .expect("healthy case has metadata.generation");
        newer["metadata"]["generation"] = Json::from(generation + 1);
        let (status, message) = argocd(&newer);
        assert_eq!(
            (status.as_str(), message),
            (
                "Progressing",
                format!(
                    "Waiting for the operator to observe generation {}",
                    generation + 1
                )
            ),
            "{} with a newer generation",
            case.name
        );
    }
}

#[test]
fn the_argocd_cm_patch_installs_the_script_verbatim_under_the_boxtable_key() {
    let patch = read_yaml(&root().join("deploy/argocd/argocd-cm-patch.yaml"));
    assert_eq!(patch["apiVersion"], "v1");
    assert_eq!(patch["kind"], "ConfigMap");
    assert_eq!(patch["metadata"]["name"], "argocd-cm");
    let embedded = patch["data"][HEALTH_KEY]
        .as_str()
        .unwrap_or_else(|| panic!("argocd-cm-patch.yaml has no data.{HEALTH_KEY}"));
    assert_eq!(
        embedded,
        script(),
        "argocd-cm-patch.yaml must embed boxtable-health.lua unchanged"
    );
}
