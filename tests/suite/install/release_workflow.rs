//! `.github/workflows/release.yml`, checked by actionlint (built from its Go module into the
//! cache by `scripts/tools.sh`, with shellcheck for the `run:` scripts), and held to what a
//! release must do: both architectures, a push, keyless signing, SBOM attestations and the
//! install bundle as a release asset.

// Helpers fail the test they serve, exactly as the #[test] functions do.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value as Json;

use crate::support::process::printed;

const WORKFLOW: &str = ".github/workflows/release.yml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs actionlint (built once by scripts/tools.sh) on `workflow`.
fn actionlint(workflow: &Path) -> Output {
    let script = r#". scripts/tools.sh && tools_actionlint && tools_shellcheck \
        && exec "$ACTIONLINT" -no-color -shellcheck "$SHELLCHECK" -pyflakes= "$1""#;
    Command::new("bash")
        .args(["-c", script, "actionlint"])
        .arg(workflow)
        .current_dir(root())
        .output()
        .expect("run bash")
}

#[test]
fn actionlint_finds_nothing_in_the_release_workflow() {
    let out = actionlint(&root().join(WORKFLOW));
    assert!(
        out.status.success(),
        "actionlint {WORKFLOW}:\n{}",
        printed(&out)
    );
}

#[test]
fn actionlint_reports_a_broken_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let workflows = dir.path().join(".github/workflows");
    fs::create_dir_all(&workflows).unwrap();
    let broken = workflows.join("broken.yml");
    let original = fs::read_to_string(root().join(WORKFLOW)).unwrap();
    // An undefined matrix key and an unquoted expansion shellcheck warns about.
    let edited = original.replacen(
        "runs-on: ${{ matrix.runner }}",
        "runs-on: ${{ matrix.runnr }}",
        1,
    ) + "  extra:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo $1\n";
    assert_ne!(edited, original);
    fs::write(&broken, edited).unwrap();
    let out = actionlint(&broken);
    let report = printed(&out);
    assert!(!out.status.success(), "actionlint accepted it:\n{report}");
    assert!(report.contains("runnr"), "{report}");
    assert!(report.contains("SC2086"), "shellcheck ran: {report}");
}

fn workflow() -> Json {
    serde_saphyr::from_str(&fs::read_to_string(root().join(WORKFLOW)).unwrap()).unwrap()
}

/// Every `run:` script of a job, joined.
fn scripts(job: &Json) -> String {
    job["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["run"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn uses(job: &Json) -> Vec<String> {
    job["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["uses"].as_str())
        .map(|u| u.split('@').next().unwrap().to_string())
        .collect()
}

#[test]
fn a_tag_builds_both_architectures_with_the_image_script_and_pushes_them() {
    let w = workflow();
    assert_eq!(w["on"]["push"]["tags"], serde_json::json!(["v*"]));
    let image = &w["jobs"]["image"];
    let arches: Vec<&str> = image["strategy"]["matrix"]["include"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["arch"].as_str().unwrap())
        .collect();
    assert_eq!(arches, ["amd64", "arm64"]);
    let run = scripts(image);
    assert!(run.contains("scripts/image.sh --binary target/release/boxtable-operator"));
    assert!(run.contains("--platform \"linux/${{ matrix.arch }}\""));
    assert!(run.contains("--push"));
    assert_eq!(image["permissions"]["packages"], "write");
}

#[test]
fn publishing_signs_keylessly_attests_the_sboms_and_releases_the_bundle() {
    let w = workflow();
    let publish = &w["jobs"]["publish"];
    assert_eq!(publish["needs"], "image");
    assert_eq!(
        publish["permissions"]["id-token"], "write",
        "keyless signing"
    );
    assert!(uses(publish).contains(&"sigstore/cosign-installer".to_string()));
    let run = scripts(publish);
    assert!(run.contains("index append"), "one multi-arch index");
    assert!(run.contains("cosign sign --yes --recursive"));
    assert!(run.contains("cosign attest --yes --type cyclonedx --predicate"));
    assert!(!run.contains("--key"), "keyless: no signing key");
    assert!(run.contains("gh release create"));
    assert!(run.contains("release/install.yaml"));
    assert!(run.contains("dist/install.yaml"));
}
