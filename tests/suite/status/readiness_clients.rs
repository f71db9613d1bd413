//! The operator's status judged by readiness code nobody here wrote: the `kstatus` library of
//! `sigs.k8s.io/cli-utils` (what Flux and Helm 4 wait on) and the Argo CD health check in
//! `deploy/argocd/` run in gopher-lua, the Lua VM Argo CD embeds. Both live in `tools/readiness`
//! (built by `scripts/control-plane.sh`, found through `CONTROL_PLANE_READINESS`). Each state the
//! operator writes is produced on the real API server and the object handed over as it is read
//! back; the Argo CD case corpus in `tests/data/argocd/` runs through gopher-lua too.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use boxtable_operator::crd::LockState;
use serde_json::Value;

use crate::support::controller::*;
use crate::support::e2e::{root, yaml_files};

/// The `tools/readiness` binary, or a failure that says how to get it.
fn readiness_binary() -> PathBuf {
    match std::env::var("CONTROL_PLANE_READINESS") {
        Ok(path) if !path.is_empty() && PathBuf::from(&path).is_file() => PathBuf::from(path),
        _ => panic!(
            "CONTROL_PLANE_READINESS is not set: run scripts/test.sh, or `. scripts/control-plane.sh \
             && cp_start` (it builds tools/readiness with Go) and run cargo test from that shell"
        ),
    }
}

/// `(status, message)` from `readiness <args>` for `object`.
fn judge(args: &[&str], object: &Value) -> (String, String) {
    let mut child = Command::new(readiness_binary())
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(object.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "readiness {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdict: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        verdict["status"].as_str().unwrap().to_owned(),
        verdict["message"].as_str().unwrap().to_owned(),
    )
}

fn kstatus(object: &Value) -> String {
    judge(&["kstatus"], object).0
}

/// `(status, message)` of the Argo CD health check for `object`, as Argo CD would judge it.
pub(crate) fn argocd(object: &Value) -> (String, String) {
    judge(&["argocd", "deploy/argocd/boxtable-health.lua"], object)
}

#[test]
fn the_argocd_case_corpus_gets_its_expected_health_in_gopher_lua() {
    let paths = yaml_files(&root().join("tests/data/argocd"));
    assert!(paths.len() >= 5, "{paths:?}");
    let mut failures = Vec::new();
    for path in paths {
        let case: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let got = argocd(&case["object"]);
        let want = (
            case["expected"]["status"].as_str().unwrap().to_owned(),
            case["expected"]["message"].as_str().unwrap().to_owned(),
        );
        if got != want {
            failures.push(format!(
                "{}: expected {want:?}, got {got:?}",
                path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn every_state_the_operator_writes_is_judged_as_flux_helm_and_argocd_would() {
    let h = Harness::builder().without_secret().start().await;

    // No Secret yet: Stalled with SecretNotFound.
    h.apply_stalled(boxtable("orders"), "SecretNotFound").await;
    let stalled = h.raw("orders").await;
    assert_eq!(kstatus(&stalled), "Failed", "{stalled}");
    assert_eq!(argocd(&stalled).0, "Degraded", "{stalled}");

    // Migrated: Ready.
    h.create_secret().await;
    h.wait_ready("orders").await;
    let ready = h.raw("orders").await;
    assert_eq!(kstatus(&ready), "Current", "{ready}");
    assert_eq!(argocd(&ready).0, "Healthy", "{ready}");

    // Waiting for Brighter's lock held by an application: Reconciling.
    let _holder = h.hold_lock("orders-api", "public", "inbox").await;
    h.apply(boxtable("inbox").inbox().lock_timeout("60s")).await;
    h.wait_for_lock("inbox", LockState::Waiting).await;
    let waiting = h.raw("inbox").await;
    assert_eq!(kstatus(&waiting), "InProgress", "{waiting}");
    assert_eq!(argocd(&waiting).0, "Progressing", "{waiting}");

    // A spec change the operator has not observed yet: in progress for every client, whatever
    // the (older) conditions say.
    let mut changed = ready.clone();
    changed["metadata"]["generation"] =
        (ready["metadata"]["generation"].as_i64().unwrap() + 1).into();
    assert_eq!(kstatus(&changed), "InProgress", "{changed}");
    assert_eq!(argocd(&changed).0, "Progressing", "{changed}");
}
