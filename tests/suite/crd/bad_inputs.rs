//! A corpus of bad inputs (`tests/data/bad_inputs/corpus.jsonl`): every one is refused by the CRD
//! schema (the real kube-apiserver answers 422) or reported in status by `migrate`; nothing
//! panics; and no SQL is built from an unvalidated identifier (the database gains no objects).

use std::process::Stdio;

use serde_json::{Value, json};

use crate::support;
use crate::support::reliability::*;

const CORPUS: &str = include_str!("../../data/bad_inputs/corpus.jsonl");

/// The real API server, with a namespace for the corpus, as the admin.
struct Server {
    client: kube::Client,
    namespace: String,
}

async fn start_server() -> Server {
    let plane = support::control_plane::control_plane();
    Server {
        client: plane.admin_client().await,
        namespace: plane.create_namespace("corpus"),
    }
}

impl Server {
    /// POSTs `body` (a BoxTable) as raw JSON into the corpus namespace; returns the HTTP status
    /// and body.
    async fn create(&self, body: &Value) -> (u16, String) {
        let mut body = body.clone();
        body["metadata"]["namespace"] = json!(self.namespace);
        let request = axum::http::Request::builder()
            .method("POST")
            .uri(format!(
                "/apis/brighter.dev/v1alpha1/namespaces/{}/boxtables",
                self.namespace
            ))
            .header("content-type", "application/json")
            .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        let response = self.client.send(request).await.unwrap();
        let code = response.status().as_u16();
        let bytes = axum::body::to_bytes(axum::body::Body::new(response.into_body()), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&bytes).into_owned())
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
    let api = start_server().await;
    let bad_db = support::fresh_db().await;
    let bad_client = bad_db.connect().await;
    let before = support::migrate::snapshot(&bad_client).await;
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
    let after = support::migrate::snapshot(&bad_client).await;
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
                "the schema accepts or mishandles {}: {v:?}",
                v.name
            );
            assert!(
                v.exit != Some(0) && !v.reason.is_empty() && v.reason != "ConnectionFailed",
                "migrate must refuse and report {}: {v:?}",
                v.name
            );
        }
    }
    assert_eq!(before, after, "an invalid input reached the database");
}
