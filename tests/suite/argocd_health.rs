//! The Argo CD health check for BoxTable (`deploy/argocd/boxtable-health.lua`), run the way Argo CD
//! runs it: the object in the global `obj`, the script returning `{status = ..., message = ...}`.
//!
//! Each file in `tests/data/argocd/` holds one case: `object` (a BoxTable as the API server returns
//! it) and `expected` (`status` and `message`).

// Helpers fail the test they serve, exactly as the #[test] functions do.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use mlua::{Lua, LuaOptions, StdLib, Table, Value};
use serde_json::Value as Json;

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
    message: String,
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
            Case {
                status: field("/expected/status"),
                message: field("/expected/message"),
                object: doc
                    .get("object")
                    .cloned()
                    .unwrap_or_else(|| panic!("{name}: no object")),
                name,
            }
        })
        .collect()
}

/// JSON to Lua as Argo CD hands objects to health scripts: maps become tables, arrays become
/// 1-based sequences, null becomes nil.
fn to_lua(lua: &Lua, value: &Json) -> mlua::Result<Value> {
    Ok(match value {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(lua.create_string(s)?),
        Json::Array(items) => {
            let table = lua.create_table()?;
            for (index, item) in items.iter().enumerate() {
                table.set(index + 1, to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
        Json::Object(fields) => {
            let table = lua.create_table()?;
            for (key, field) in fields {
                table.set(key.as_str(), to_lua(lua, field)?)?;
            }
            Value::Table(table)
        }
    })
}

/// Runs the health script on `object` in a fresh interpreter that has only the libraries Argo CD
/// offers health scripts (no `os`, `io` or `require`), and returns `(status, message)`.
fn health(script: &str, object: &Json) -> mlua::Result<(String, String)> {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )?;
    lua.globals().set("obj", to_lua(&lua, object)?)?;
    let result: Table = lua.load(script).set_name("boxtable-health.lua").eval()?;
    let status: Option<String> = result.get("status")?;
    let message: Option<String> = result.get("message")?;
    Ok((status.unwrap_or_default(), message.unwrap_or_default()))
}

#[test]
fn every_case_gets_its_expected_health_status_and_message() {
    let script = script();
    let mut failures = Vec::new();
    for case in cases() {
        match health(&script, &case.object) {
            Ok((status, message)) if status == case.status && message == case.message => {}
            Ok((status, message)) => failures.push(format!(
                "{}: expected {} {:?}, got {} {:?}",
                case.name, case.status, case.message, status, message
            )),
            Err(e) => failures.push(format!("{}: script failed: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
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
    let script = script();
    for case in cases().iter().filter(|case| case.status == "Healthy") {
        let mut newer = case.object.clone();
        let generation = newer
            .pointer("/metadata/generation")
            .and_then(Json::as_i64)
            .expect("healthy case has metadata.generation");
        newer["metadata"]["generation"] = Json::from(generation + 1);
        let (status, message) = health(&script, &newer).expect("script runs");
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
