//! A corpus of bad inputs (`tests/data/bad_inputs/corpus.jsonl`): every one is refused by the CRD
//! schema (the local API server answers 422) or reported in status by `migrate`; nothing panics;
//! and no SQL is built from an unvalidated identifier (the database gains no objects).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod migrate_support;
mod reliability_support;
mod support;

use std::path::PathBuf;
use std::process::Stdio;

use reliability_support::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

const CORPUS: &str = include_str!("data/bad_inputs/corpus.jsonl");

/// The local API server as a process (`target/<profile>/boxtable-localapi`, built if missing).
struct LocalApiProcess {
    child: tokio::process::Child,
    addr: String,
}

async fn start_localapi() -> LocalApiProcess {
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_boxtable-operator"))
        .parent()
        .unwrap()
        .to_path_buf();
    let exe = dir.join("boxtable-localapi");
    if !exe.exists() {
        let built = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "-q",
                "-p",
                "boxtable-localapi",
                "--bin",
                "boxtable-localapi",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(built.success(), "building boxtable-localapi failed");
    }
    let mut child = tokio::process::Command::new(exe)
        .arg("--crd")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/crds/boxtable.yaml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut line = String::new();
    tokio::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    let addr = line
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    assert!(!addr.is_empty(), "boxtable-localapi printed no URL");
    LocalApiProcess { child, addr }
}

impl LocalApiProcess {
    /// POSTs `body` as a BoxTable in `default`; returns the HTTP status and body.
    async fn create(&self, body: &Value) -> (u16, String) {
        let payload = serde_json::to_vec(body).unwrap();
        let mut stream = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
        let head = format!(
            "POST /apis/brighter.dev/v1alpha1/namespaces/default/boxtables HTTP/1.1\r\n\
             Host: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            self.addr,
            payload.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&payload).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let text = String::from_utf8_lossy(&response).into_owned();
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (code, text)
    }
}

/// A BoxTable with `patch` merged into a valid outbox spec.
fn manifest(name: &str, patch: &Value) -> Value {
    let mut spec =
        json!({"box": "Outbox", "table": "outbox", "database": {"secretRef": {"name": "db"}}});
    if let Some(fields) = patch.as_object() {
        for (k, v) in fields {
            spec[k] = v.clone();
        }
    }
    json!({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

/// What happened to one entry; read through `Debug` in failure messages.
#[derive(Debug)]
#[allow(dead_code)]
struct Verdict {
    name: String,
    expect: String,
    schema_code: Option<u16>,
    exit: Option<i32>,
    reason: String,
    panicked: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_refused_by_the_schema_or_reported_in_status_without_panic_or_sql() {
    let entries: Vec<Value> = CORPUS
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let api = start_localapi().await;
    let bad_db = support::fresh_db().await;
    let bad_client = bad_db.connect().await;
    let before = migrate_support::snapshot(&bad_client).await;
    let good_db = support::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let mut verdicts = Vec::new();

    for (i, entry) in entries.iter().enumerate() {
        let name = entry["name"].as_str().unwrap().to_owned();
        let expect = entry["expect"].as_str().unwrap().to_owned();
        let k8s_name = format!("corpus-{i}");
        let doc = manifest(&k8s_name, &entry["spec"]);
        let schema_code = match entry.get("spec") {
            Some(_) => Some(api.create(&doc).await.0),
            None => None,
        };
        let path = dir.path().join(format!("{k8s_name}.json"));
        std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
        let url = match (entry.get("url"), expect.as_str()) {
            (Some(u), _) => u.as_str().unwrap().to_owned(),
            (None, "valid") => good_db.url.clone(),
            (None, _) => bad_db.url.clone(),
        };
        let mut cmd = migrate_command(&path, &url);
        if url.contains('\0') {
            // A NUL cannot pass through argv; the environment is refused the same way, so hand it
            // over through a manifest Secret instead.
            let secret = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "db", "namespace": "default"},
                "stringData": {"connectionString": url}});
            std::fs::write(
                dir.path().join(format!("{k8s_name}-secret.json")),
                serde_json::to_vec(&secret).unwrap(),
            )
            .unwrap();
            let mut args = vec![
                "migrate".to_owned(),
                "-o".to_owned(),
                "yaml".to_owned(),
                "-f".to_owned(),
            ];
            args.push(path.display().to_string());
            args.push("-f".to_owned());
            args.push(
                dir.path()
                    .join(format!("{k8s_name}-secret.json"))
                    .display()
                    .to_string(),
            );
            cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_boxtable-operator"));
            cmd.args(&args)
                .env_remove("DATABASE_URL")
                .env("RUST_LOG", "debug")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
        let run = finish(cmd.spawn().unwrap()).await;
        let reason = if run.stdout.contains("conditions") {
            run.reason()
        } else if run.code == Some(1) && run.stderr.contains("boxtable-operator migrate: ") {
            // Not even a BoxTable (a wrong type): refused when the manifest is read.
            "RefusedOnRead".to_owned()
        } else {
            String::new()
        };
        verdicts.push(Verdict {
            name,
            expect,
            schema_code,
            exit: run.code,
            reason,
            panicked: run.code == Some(101) || run.stderr.contains("panicked"),
        });
    }

    let refused_by_schema = verdicts
        .iter()
        .filter(|v| v.schema_code == Some(422))
        .count();
    let reported = verdicts
        .iter()
        .filter(|v| v.exit != Some(0) && !v.reason.is_empty())
        .count();
    let panics = verdicts.iter().filter(|v| v.panicked).count();
    let after = migrate_support::snapshot(&bad_client).await;
    println!(
        "bad inputs: entries={} refused_by_schema={refused_by_schema} reported_in_status={reported} panics={panics} new_objects={}",
        verdicts.len(),
        usize::from(before != after)
    );
    assert!(verdicts.len() >= 50);
    assert_eq!(panics, 0, "{verdicts:#?}");
    for v in &verdicts {
        if v.expect == "valid" {
            assert_eq!(v.schema_code, Some(201), "{v:?}");
            assert_eq!(v.exit, Some(0), "{v:?}");
        } else {
            assert!(
                v.schema_code != Some(201) && v.schema_code.is_none_or(|c| c == 422),
                "the schema accepts or mishandles {v:?}"
            );
            assert!(
                v.exit != Some(0) && !v.reason.is_empty() && v.reason != "ConnectionFailed",
                "migrate must refuse and report {v:?}"
            );
        }
    }
    assert_eq!(before, after, "an invalid input reached the database");
    drop(api.child);
}
