#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::path::Path;
use std::process::Output;

use serde_json::json;

use crate::common::*;

const INSTALL: &str = "kubectl is required for this test and was not found on PATH; install it \
    (e.g. `apt-get install kubectl` from the Google Cloud SDK repository, or download v1.31 from https://dl.k8s.io/release/v1.31.0/bin/linux/amd64/kubectl) and rerun";

async fn kubectl(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.args(args)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env("HOME", dir)
        .kill_on_drop(true);
    match cmd.output().await {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!("{INSTALL}"),
        Err(e) => panic!("running kubectl {args:?}: {e}"),
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test]
async fn kubectl_applies_lists_refuses_waits_and_deletes() {
    let h = server().await;
    let dir = tempfile::tempdir().unwrap();
    h.write_kubeconfig(dir.path().join("kubeconfig")).unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: orders\nspec:\n  box: Outbox\n  table: Orders\n").unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: broken\nspec:\n  box: Outbox\n  table: 1bad\n").unwrap();

    let o = kubectl(dir.path(), &["apply", "-f", good.to_str().unwrap()]).await;
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("boxtable.brighter.dev/orders created"),
        "{}",
        text(&o)
    );

    let o = kubectl(dir.path(), &["apply", "-f", bad.to_str().unwrap()]).await;
    assert!(!o.status.success());
    assert!(
        text(&o).contains("spec.table in body should match '^[A-Za-z][A-Za-z0-9_]*$'"),
        "{}",
        text(&o)
    );

    let api = Api::new(&h);
    let status = json!({"status": {"appliedVersion": 8, "lock": {"state": "Released", "key": "-5469556670739463647"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "UpToDate", "observedGeneration": 1}]}});
    assert_eq!(
        api.merge(&format!("{BT}/orders/status"), &status)
            .await
            .status,
        200
    );

    let o = kubectl(dir.path(), &["get", "bt", "-o", "wide"]).await;
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "BOX", "TABLE", "VERSION", "LOCK", "READY", "KEY", "AGE"
        ]
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row[..7],
        [
            "orders",
            "Outbox",
            "Orders",
            "8",
            "Released",
            "True",
            "-5469556670739463647"
        ]
    );
    let o = kubectl(dir.path(), &["get", "boxtables"]).await;
    assert!(
        !text(&o).contains("KEY"),
        "priority-1 columns only with -o wide: {}",
        text(&o)
    );

    let o = kubectl(
        dir.path(),
        &[
            "wait",
            "--for=condition=Ready",
            "boxtable/orders",
            "--timeout=60s",
        ],
    )
    .await;
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("condition met"));

    let o = kubectl(dir.path(), &["explain", "boxtable.spec.table"]).await;
    assert!(
        o.status.success() && text(&o).contains("<string>"),
        "{}",
        text(&o)
    );

    let o = kubectl(
        dir.path(),
        &["delete", "-f", good.to_str().unwrap(), "--timeout=60s"],
    )
    .await;
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("deleted"));
    eventually(60, "orders to be gone", || async {
        api.get(&format!("{BT}/orders")).await.status == 404
    })
    .await;
}
