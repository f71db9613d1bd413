//! What only the real kube-apiserver can tell about the manifests: `deploy/` and `examples/` are
//! accepted without a single warning, the CRD's CEL rules are evaluated by the server (every one
//! of them), invalid BoxTables are refused at apply time with the server's own messages, the
//! built-in `edit` and `view` roles cover BoxTables, and a call the operator's RBAC does not allow
//! fails the test that made it.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use crate::support::boxtable::boxtable;
use crate::support::control_plane::{ControlPlane, OPERATOR_USER, describe};
use crate::support::e2e::{Cluster, control_plane};

const WAIT: Duration = Duration::from_secs(90);

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that the kubectl call that gave `out` succeeded; `what` says what a failure means.
fn assert_succeeded(out: &std::process::Output, what: &str) {
    assert!(out.status.success(), "{what}: {}", stderr(out));
}

fn assert_no_warnings(what: &str, out: &std::process::Output) {
    let err = stderr(out);
    assert!(out.status.success(), "{what} refused: {err}");
    assert!(
        !err.to_lowercase().contains("warning"),
        "{what} drew warnings from the server:\n{err}"
    );
}

#[test]
fn deploy_and_the_examples_are_accepted_by_the_real_server_without_warnings() {
    let plane = control_plane();
    // deploy/ is installed already, and the server warns only about what an update introduces.
    // So create a renamed copy of every object in a server dry run (the copy's namespace for
    // real): each goes through admission and validation as on a first install, and nothing stays.
    let rendered = plane
        .kubectl_admin(&["kustomize", "deploy/"], None)
        .unwrap();
    let suffix = format!("check-{}", std::process::id());
    let check_ns = format!("boxtable-system-{suffix}");
    let mut items = Vec::new();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&rendered).unwrap();
    for mut object in docs {
        let kind = object["kind"].as_str().unwrap().to_owned();
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        if kind == "Namespace" {
            object["metadata"]["name"] = check_ns.clone().into();
            let out = plane.kubectl_as(
                &plane.admin_kubeconfig,
                &["create", "-f", "-"],
                Some(&object.to_string()),
            );
            assert_no_warnings("deploy/ Namespace", &out);
            continue;
        }
        if kind == "CustomResourceDefinition" {
            let group = format!("{suffix}.brighter.dev");
            object["metadata"]["name"] = format!("boxtables.{group}").into();
            object["spec"]["group"] = group.into();
        } else {
            object["metadata"]["name"] = format!("{name}-{suffix}").into();
        }
        if object["metadata"]["namespace"].is_string() {
            object["metadata"]["namespace"] = check_ns.clone().into();
        }
        items.push(object);
    }
    assert!(items.len() >= 8, "{items:?}");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let out = plane.kubectl_as(
        &plane.admin_kubeconfig,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&list.to_string()),
    );
    assert_no_warnings("deploy/", &out);

    // The examples, moved to a namespace of this test's own: the Namespace is created, every
    // other object is created in a server dry run.
    let ns = format!("examples-{}", std::process::id());
    let files = support::e2e::yaml_files(&support::e2e::root().join("examples"));
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("namespace: shop", &format!("namespace: {ns}"));
        let what = file.display().to_string();
        let out = if text.contains("kind: Namespace") {
            let text = text.replace("name: shop", &format!("name: {ns}"));
            plane.kubectl_as(&plane.admin_kubeconfig, &["create", "-f", "-"], Some(&text))
        } else {
            plane.kubectl_as(
                &plane.admin_kubeconfig,
                &["create", "--dry-run=server", "-f", "-"],
                Some(&text),
            )
        };
        assert_no_warnings(&what, &out);
    }
}

/// One refused manifest: what it breaks, the spec lines added to a valid BoxTable, and what the
/// server's message must contain.
struct Refusal {
    what: &'static str,
    spec: &'static str,
    message: &'static str,
}

const REFUSALS: &[Refusal] = &[
    Refusal {
        what: "a Json payload on an outbox",
        spec: "  payload: Json\n",
        message: "Json and Jsonb payloads are for an Inbox only",
    },
    Refusal {
        what: "an inbox at version 3",
        spec: "  targetVersion: 3\n",
        message: "an Inbox has versions 1 to 2",
    },
    Refusal {
        what: "a lock wait of 2h",
        spec: "  lock:\n    timeout: 2h\n",
        message: "spec.lock.timeout: Invalid value: \"2h\": must be at most 1h",
    },
    Refusal {
        what: "a DDL lock timeout of 25h",
        spec: "  ddl:\n    lockTimeout: 25h\n",
        message: "spec.ddl.lockTimeout: Invalid value: \"25h\": must be at most 24h",
    },
    Refusal {
        what: "a DDL statement timeout of 25h",
        spec: "  ddl:\n    statementTimeout: 25h\n",
        message: "spec.ddl.statementTimeout: Invalid value: \"25h\": must be at most 24h",
    },
    Refusal {
        what: "a Secret name that is not a DNS subdomain",
        spec: "",
        message: "spec.database.secretRef.name: Invalid value: \"Shop_DB\"",
    },
    Refusal {
        what: "a Secret key with a slash",
        spec: "",
        message: "spec.database.secretRef.key: Invalid value: \"conn/string\"",
    },
];

#[test]
fn invalid_boxtables_are_refused_at_apply_time_with_the_servers_messages() {
    let plane = control_plane();
    let ns = plane.create_namespace("refusals");
    for (i, case) in REFUSALS.iter().enumerate() {
        let mut manifest = boxtable(&format!("bad-{i}"))
            .namespace(&ns)
            .secret("db")
            .raw_spec(case.spec)
            .manifest();
        if case.what.contains("an inbox") {
            manifest = manifest.replace("box: Outbox", "box: Inbox");
        }
        if case.what.contains("Secret name") {
            manifest = manifest.replace("name: db", "name: Shop_DB");
        }
        if case.what.contains("Secret key") {
            manifest = manifest.replace("name: db", "name: db\n      key: conn/string");
        }
        let out = plane.kubectl_as(
            &plane.admin_kubeconfig,
            &["apply", "-f", "-"],
            Some(&manifest),
        );
        let err = stderr(&out);
        assert!(!out.status.success(), "{} was accepted", case.what);
        assert!(
            err.contains(&format!("The BoxTable \"bad-{i}\" is invalid"))
                && err.contains(case.message),
            "{}: the server said:\n{err}",
            case.what
        );
    }
}

/// Lock waits with a mistake, and the one message each draws, from the server and from `migrate`.
const BAD_LOCK_TIMEOUTS: [(&str, &str); 4] = [
    (
        "30 s",
        "spec.lock.timeout: Invalid value: \"30 s\": must be a duration of whole numbers with \
         units h, m, s, ms in that order, like 30s, 1m30s or 500ms",
    ),
    (
        "1d",
        "spec.lock.timeout: Invalid value: \"1d\": must be a duration of whole numbers with \
         units h, m, s, ms in that order, like 30s, 1m30s or 500ms",
    ),
    (
        "999999999h",
        "spec.lock.timeout: Invalid value: \"999999999h\": must be at most 1h",
    ),
    (
        "61m",
        "spec.lock.timeout: Invalid value: \"61m\": must be at most 1h",
    ),
];

/// What the server answers a server-side dry run of `manifest` (BoxTable `name`) with: the text
/// after `"<name>" is invalid: `.
fn server_refusal(plane: &ControlPlane, manifest: &str, name: &str) -> String {
    let out = plane.kubectl_as(
        &plane.admin_kubeconfig,
        &["create", "--dry-run=server", "-f", "-"],
        Some(manifest),
    );
    let server = stderr(&out);
    assert!(!out.status.success(), "{name} was accepted");
    server
        .split_once(&format!("\"{name}\" is invalid: "))
        .map(|(_, causes)| causes.trim_end().to_owned())
        .unwrap_or_else(|| panic!("{name}: the server said:\n{server}"))
}

/// What `migrate -f` says about `manifest` (BoxTable `ns/name`), written into `dir`: the errors
/// after `(BoxTable ns/name): `, joined by "; ".
fn migrate_refusal(dir: &std::path::Path, manifest: &str, ns: &str, name: &str) -> String {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, manifest).unwrap();
    let run = std::process::Command::new(support::e2e::operator_binary())
        .args(["migrate", "-f"])
        .arg(&file)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let said = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{name}: {said}");
    said.lines()
        .find_map(|l| l.split_once(&format!("(BoxTable {ns}/{name}): ")))
        .map(|(_, errors)| errors.to_owned())
        .unwrap_or_else(|| panic!("{name}: migrate said:\n{said}"))
}

#[test]
fn a_bad_lock_timeout_draws_one_message_and_the_same_one_from_the_server_and_from_migrate() {
    let plane = control_plane();
    let ns = plane.create_namespace("durations");
    let dir = tempfile::tempdir().unwrap();
    for (i, (timeout, message)) in BAD_LOCK_TIMEOUTS.iter().enumerate() {
        let name = format!("bad-timeout-{i}");
        let manifest = boxtable(&name)
            .namespace(&ns)
            .secret("db")
            .raw_spec(&format!("  lock:\n    timeout: {timeout:?}\n"))
            .manifest();

        let server_says = server_refusal(plane, &manifest, &name);
        let migrate_says = migrate_refusal(dir.path(), &manifest, &ns, &name);

        assert_eq!(server_says, *message, "{timeout:?}: the server");
        assert_eq!(migrate_says, *message, "{timeout:?}: migrate");
    }
}

#[test]
fn migrate_words_an_object_rule_and_the_rules_left_unchecked_as_the_server_does() {
    let plane = control_plane();
    let ns = plane.create_namespace("rule-wording");
    let dir = tempfile::tempdir().unwrap();

    // A rule on the spec (an object): the server shows no value.
    let inbox = boxtable("inbox-v3")
        .namespace(&ns)
        .secret("db")
        .raw_spec("  targetVersion: 3\n")
        .manifest()
        .replace("box: Outbox", "box: Inbox");
    let expected = "spec: Invalid value: an Inbox has versions 1 to 2";
    assert_eq!(server_refusal(plane, &inbox, "inbox-v3"), expected);
    assert_eq!(
        migrate_refusal(dir.path(), &inbox, &ns, "inbox-v3"),
        expected
    );

    // A required field missing keeps the rules (here the lock wait's) from running, and says so.
    let unchecked = "<nil>: Invalid value: null: some validation rules were not checked because \
                     the object was invalid; correct the existing errors to complete validation";
    let no_database = format!(
        "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: no-db\n  \
         namespace: {ns}\nspec:\n  box: Outbox\n  lock:\n    timeout: 2h\n"
    );
    let server_says = server_refusal(plane, &no_database, "no-db");
    let causes: Vec<&str> = server_says
        .lines()
        .map(|l| l.trim_start_matches("* ").trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        causes,
        ["spec.database: Required value", unchecked],
        "{server_says}"
    );
    assert_eq!(
        migrate_refusal(dir.path(), &no_database, &ns, "no-db"),
        format!("spec.database: Required value; {unchecked}")
    );
}

#[test]
fn the_immutability_rules_are_enforced_by_the_server_on_update() {
    let plane = control_plane();
    let ns = plane.create_namespace("immutable");
    let original = boxtable("orders")
        .namespace(&ns)
        .secret("db")
        .raw_spec("  table: orders_outbox\n  schema: sales\n")
        .manifest();
    plane
        .kubectl_admin(&["apply", "-f", "-"], Some(&original))
        .unwrap();
    // (what changes, the text replaced in the manifest, its replacement, the server's message)
    let cases = [
        ("box", "box: Outbox", "box: Inbox", "box is immutable"),
        (
            "table",
            "table: orders_outbox",
            "table: other",
            "table is immutable",
        ),
        (
            "table removed",
            "  table: orders_outbox\n",
            "",
            "table is immutable",
        ),
        (
            "schema",
            "schema: sales",
            "schema: billing",
            "schema is immutable",
        ),
    ];
    for (what, from, to, message) in cases {
        let manifest = original.replace(from, to);
        let out = plane.kubectl_as(
            &plane.admin_kubeconfig,
            &["apply", "-f", "-"],
            Some(&manifest),
        );
        let err = stderr(&out);
        assert!(
            !out.status.success() && err.contains(message),
            "changing {what}: {err}"
        );
    }
}

#[test]
fn spec_table_may_be_written_out_later_as_the_table_in_use_but_never_changed() {
    let plane = control_plane();
    let ns = plane.create_namespace("table-later");
    let defaulted = boxtable("orders").namespace(&ns).secret("db").manifest();
    plane
        .kubectl_admin(&["apply", "-f", "-"], Some(&defaulted))
        .unwrap();
    // The defaulted table is the box's name, lowercased before use: any spelling of it is the
    // same table.
    for same in ["  table: outbox\n", "  table: Outbox\n"] {
        let manifest = format!("{defaulted}{same}");
        plane
            .kubectl_admin(&["apply", "-f", "-"], Some(&manifest))
            .unwrap_or_else(|e| panic!("adding {same:?}, the table in use, is refused: {e}"));
    }
    let out = plane.kubectl_as(
        &plane.admin_kubeconfig,
        &["apply", "-f", "-"],
        Some(&format!("{defaulted}  table: orders_outbox\n")),
    );
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("table is immutable"),
        "changing the table in use: {err}"
    );
}

#[test]
fn kubectl_explain_warns_that_drop_deletes_the_table_and_its_data() {
    let plane = control_plane();
    let explain = |field: &str| {
        plane
            .kubectl_admin(&["explain", &format!("boxtables.spec.{field}")], None)
            .unwrap()
    };
    let deletion = explain("deletionPolicy");
    println!("{deletion}");
    let flat = deletion.split_whitespace().collect::<Vec<_>>().join(" ");
    for needed in [
        "DROPS THE TABLE AND ALL ITS DATA",
        "brighter.dev/confirm-drop",
        "adopted",
        "DropBlocked",
        "Deleting a BoxTable",
    ] {
        assert!(
            flat.contains(needed),
            "{needed:?} missing from:\n{deletion}"
        );
    }
    let scope = explain("historyScope")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for needed in [
        "__BrighterMigrationHistory",
        "Global",
        "PerSchema",
        "public",
    ] {
        assert!(scope.contains(needed), "{needed:?} missing from: {scope}");
    }
    for (field, needed) in [
        ("database.secretRef.name", "namespace"),
        ("database.secretRef.key", "connectionString"),
        ("table", "status.table"),
        ("schema", "never creates schemas"),
        ("targetVersion", "never downgraded"),
        ("lock.timeout", "LockTimeout"),
        ("ddl.lockTimeout", "lock.timeout"),
        ("ddl.statementTimeout", "rolls the whole"),
        ("suspend", "DropBlocked"),
    ] {
        let text = explain(field)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            text.contains(needed),
            "{field}: {needed:?} missing from: {text}"
        );
    }
}

#[test]
fn kubectl_explain_describes_the_pending_plan_and_the_drifted_condition() {
    let plane = control_plane();
    let explain = |field: &str| {
        let text = plane
            .kubectl_admin(&["explain", &format!("boxtables.{field}")], None)
            .unwrap();
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    for (field, needed) in [
        ("spec.suspend", "status.pending"),
        ("status.pending", "Replanned"),
        ("status.pending.versions", "__BrighterMigrationHistory"),
        ("status.pending.path", "UpToDate"),
        ("status.conditions", "Drifted"),
    ] {
        let text = explain(field);
        assert!(
            text.contains(needed),
            "{field}: {needed:?} missing from: {text}"
        );
    }
}

/// Every `x-kubernetes-validations` rule in the CRD, as (JSON pointer of the schema, message).
fn crd_rules() -> Vec<(String, String)> {
    fn walk(path: &str, schema: &Value, out: &mut Vec<(String, String)>) {
        if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
            for rule in rules {
                out.push((
                    path.to_owned(),
                    rule["message"].as_str().unwrap().to_owned(),
                ));
            }
        }
        if let Some(properties) = schema["properties"].as_object() {
            for (name, child) in properties {
                walk(&format!("{path}.{name}"), child, out);
            }
        }
    }
    let crd: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(support::e2e::root().join("crds/boxtable.yaml")).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    walk(
        "",
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
        &mut out,
    );
    out
}

#[test]
fn every_cel_rule_in_the_crd_is_exercised_against_the_server() {
    // The tests above send a violating manifest for each rule; a new rule without one fails here.
    let covered: Vec<&str> = REFUSALS
        .iter()
        .map(|r| r.message)
        .chain([
            "box is immutable",
            "table is immutable: it may only be written out as the table already in use (the default is the box's name)",
            "schema is immutable",
        ])
        .collect();
    let missing: Vec<String> = crd_rules()
        .into_iter()
        .filter(|(path, message)| {
            let field = path.trim_start_matches(".spec");
            !covered
                .iter()
                .any(|c| c.contains(message.as_str()) || (c.contains(field) && !field.is_empty()))
        })
        .map(|(path, message)| format!("{path}: {message}"))
        .collect();
    assert!(missing.is_empty(), "rules no test violates: {missing:?}");
}

/// Polls `kubectl auth can-i` until the aggregated roles have reached the built-in ones.
fn wait_can_i(ns: &str, user: &str, verb: &str, expected: &str) {
    let plane = control_plane();
    let deadline = Instant::now() + WAIT;
    loop {
        let out = plane.kubectl_as(
            &plane.admin_kubeconfig,
            &[
                "auth",
                "can-i",
                verb,
                "boxtables.brighter.dev",
                "-n",
                ns,
                "--as",
                user,
            ],
            None,
        );
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if answer == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{user} can-i {verb} boxtables stayed {answer:?}, expected {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn users_bound_to_the_built_in_edit_and_view_roles_can_use_boxtables() {
    let plane = control_plane();
    let ns = plane.create_namespace("roles");
    for (user, role) in [("alice", "edit"), ("bob", "view")] {
        plane
            .kubectl_admin(
                &[
                    "create",
                    "rolebinding",
                    user,
                    "-n",
                    &ns,
                    "--clusterrole",
                    role,
                    "--user",
                    user,
                ],
                None,
            )
            .unwrap();
    }
    wait_can_i(&ns, "alice", "create", "yes");
    wait_can_i(&ns, "bob", "list", "yes");
    let as_user = |user: &str, args: &[&str], stdin: Option<&str>| {
        let mut all = vec!["--as", user];
        all.extend_from_slice(args);
        plane.kubectl_as(&plane.admin_kubeconfig, &all, stdin)
    };

    let manifest = boxtable("orders").namespace(&ns).secret("db").manifest();
    let created = as_user("alice", &["apply", "-f", "-"], Some(&manifest));
    assert_succeeded(&created, "edit cannot create");
    let patched = as_user(
        "alice",
        &[
            "-n",
            &ns,
            "patch",
            "bt",
            "orders",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
        None,
    );
    assert_succeeded(&patched, "edit cannot patch");
    let read = as_user(
        "bob",
        &[
            "-n",
            &ns,
            "get",
            "bt",
            "orders",
            "-o",
            "jsonpath={.spec.suspend}",
        ],
        None,
    );
    assert_succeeded(&read, "view cannot read");
    assert_eq!(String::from_utf8_lossy(&read.stdout), "true");
    let refused = as_user("bob", &["-n", &ns, "delete", "bt", "orders"], None);
    assert!(
        !refused.status.success() && stderr(&refused).contains("forbidden"),
        "view may delete: {}",
        stderr(&refused)
    );
    let deleted = as_user(
        "alice",
        &["-n", &ns, "delete", "bt", "orders", "--wait=false"],
        None,
    );
    assert_succeeded(&deleted, "edit cannot delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_the_operators_rbac_does_not_allow_fails_the_test_that_made_it() {
    let mut cluster = Cluster::start().await;
    let plane = cluster.plane.unwrap();
    let token = cluster.token.take().unwrap();
    // deploy/rbac.yaml gives the operator no access to ConfigMaps: a stray call like this one,
    // made with the operator's token, is what the fixtures look for when a test ends.
    let out = plane.kubectl_as(
        &cluster.operator_kubeconfig,
        &["get", "configmaps", "-n", "default"],
        None,
    );
    assert!(
        !out.status.success(),
        "the operator's token may read ConfigMaps"
    );
    let refused = plane.forbidden_requests(&token);
    assert!(
        refused.iter().any(|r| r.starts_with("list configmaps")),
        "the refused call is not in the audit log: {refused:?}"
    );
    let failure = std::panic::catch_unwind(|| {
        support::control_plane::assert_no_forbidden_requests(plane, &token)
    })
    .expect_err("a forbidden call did not fail the check");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("deploy/rbac.yaml does not allow") && message.contains("configmaps"),
        "{message}"
    );
    // The operator's own calls in this cluster were all allowed (none made yet) and all are its.
    assert!(
        plane
            .audit_events()
            .iter()
            .filter(|e| token.made(e))
            .all(|e| e["user"]["username"] == OPERATOR_USER),
        "{:?}",
        plane
            .audit_events()
            .iter()
            .filter(|e| token.made(e))
            .map(describe)
            .collect::<Vec<_>>()
    );
}

/// Connection settings with a mistake the schema can see: the `database:` block of the manifest,
/// and the message the server gives.
const BAD_DATABASES: [(&str, &str, &str); 6] = [
    (
        "both key and keys",
        "    secretRef:\n      name: db\n      key: connectionString\n      keys: {}\n",
        "spec.database.secretRef: Invalid value: key and keys are exclusive: key names the Secret key holding a connection string, keys the Secret keys holding its parts",
    ),
    (
        "parameters with a connection string",
        "    secretRef:\n      name: db\n    parameters:\n      sslmode: require\n",
        "spec.database: Invalid value: parameters complete a connection read from separate keys (secretRef.keys); a connection string (secretRef.key) carries its own parameters",
    ),
    (
        "an sslmode libpq does not have",
        "    secretRef:\n      name: db\n      keys: {}\n    parameters:\n      sslmode: sometimes\n",
        "spec.database.parameters.sslmode: Unsupported value: \"sometimes\"",
    ),
    (
        "a connect timeout of 61 seconds",
        "    secretRef:\n      name: db\n      keys: {}\n    parameters:\n      connect_timeout: 61\n",
        "spec.database.parameters.connect_timeout: Invalid value: 61: spec.database.parameters.connect_timeout in body should be less than or equal to 60",
    ),
    (
        "sslcertmode=require, which cannot be honoured",
        "    secretRef:\n      name: db\n      keys: {}\n    parameters:\n      sslcertmode: require\n",
        "spec.database.parameters.sslcertmode: Unsupported value: \"require\"",
    ),
    (
        "a key holding the host that cannot be a Secret key",
        "    secretRef:\n      name: db\n      keys:\n        host: db/host\n",
        "spec.database.secretRef.keys.host: Invalid value: \"db/host\"",
    ),
];

#[test]
fn connection_settings_the_schema_can_judge_are_refused_at_apply_time() {
    let plane = control_plane();
    let ns = plane.create_namespace("connections");
    for (i, (what, database, message)) in BAD_DATABASES.iter().enumerate() {
        let name = format!("bad-database-{i}");
        let manifest = format!(
            "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: {name}\n  \
             namespace: {ns}\nspec:\n  box: Outbox\n  database:\n{database}"
        );
        let server_says = server_refusal(plane, &manifest, &name);
        assert!(
            server_says.contains(message),
            "{what}: the server said {server_says}"
        );
    }
    // A parameter the schema does not name (require_auth cannot be honoured) is an unknown field.
    let manifest = format!(
        "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: unknown-parameter\n  \
         namespace: {ns}\nspec:\n  box: Outbox\n  database:\n    secretRef:\n      name: db\n      \
         keys: {{}}\n    parameters:\n      require_auth: scram-sha-256\n"
    );
    let out = plane.kubectl_as(
        &plane.admin_kubeconfig,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&manifest),
    );
    assert!(!out.status.success(), "require_auth was accepted");
    assert!(
        stderr(&out).contains("unknown field \"spec.database.parameters.require_auth\""),
        "{}",
        stderr(&out)
    );
}
