//! The namespaced install (`deploy/components/namespaced`, applied by
//! `examples/namespaced-install/`) on the real kube-apiserver with RBAC enforced: its rendered
//! RBAC holds no cluster-wide grant and one Role per watched namespace, and the operator binary,
//! running as a ServiceAccount that has only those Roles, brings the BoxTables of the watched
//! namespaces to Ready without a single refused request, while it cannot read a Secret anywhere
//! else.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{Value, json};

use crate::support;
use crate::support::boxtable::boxtable;
use crate::support::control_plane::ControlPlane;
use crate::support::e2e::*;

const DEADLINE: Duration = Duration::from_secs(120);

/// `kubectl kustomize examples/namespaced-install`, as objects.
fn render(plane: &ControlPlane) -> Vec<Value> {
    let yaml = plane
        .kubectl_admin(&["kustomize", "examples/namespaced-install"], None)
        .unwrap_or_else(|message| panic!("{message}"));
    serde_saphyr::from_multiple(&yaml).expect("kustomize output is YAML")
}

fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

/// The namespaces the rendered Deployment's `--namespace` arguments name.
fn watched(objects: &[Value]) -> BTreeSet<String> {
    let deployment = objects
        .iter()
        .find(|o| kind(o) == "Deployment")
        .expect("a Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--namespace="))
        .map(str::to_owned)
        .collect()
}

fn grants_secrets(rules: &Value) -> bool {
    rules.as_array().is_some_and(|rules| {
        rules.iter().any(|rule| {
            rule["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r == "secrets" || r == "*"))
        })
    })
}

#[test]
fn the_rendered_rbac_grants_secrets_only_in_the_watched_namespaces() {
    let objects = render(control_plane());
    assert!(
        !objects.iter().any(|o| kind(o) == "ClusterRoleBinding"),
        "a namespaced install binds nothing cluster-wide"
    );
    for role in objects.iter().filter(|o| kind(o) == "ClusterRole") {
        assert!(
            !grants_secrets(&role["rules"]),
            "ClusterRole {} grants Secrets",
            role["metadata"]["name"]
        );
    }
    let with_secrets: BTreeSet<String> = objects
        .iter()
        .filter(|o| kind(o) == "Role" && grants_secrets(&o["rules"]))
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_owned())
        .collect();
    let watched = watched(&objects);
    assert!(!watched.is_empty());
    assert_eq!(
        with_secrets, watched,
        "Secret access in exactly the namespaces the operator watches"
    );
    let bound: BTreeSet<String> = objects
        .iter()
        .filter(|o| kind(o) == "RoleBinding" && o["roleRef"]["name"] == "boxtable-operator")
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(bound, watched, "each Role is bound in its namespace");
}

/// The overlay's Roles and RoleBindings, moved to the test's namespaces (`shop` -> `a`, ...) and
/// bound to the test's ServiceAccount.
fn roles_for(objects: &[Value], namespaces: &[(String, String)], sa: (&str, &str)) -> Value {
    let items: Vec<Value> = objects
        .iter()
        .filter(|o| matches!(kind(o), "Role" | "RoleBinding"))
        .filter_map(|o| {
            let from = o["metadata"]["namespace"].as_str()?;
            let (_, to) = namespaces.iter().find(|(f, _)| f == from)?;
            let mut o = o.clone();
            o["metadata"]["namespace"] = json!(to);
            if kind(&o) == "RoleBinding" {
                o["subjects"] =
                    json!([{"kind": "ServiceAccount", "name": sa.1, "namespace": sa.0}]);
            }
            Some(o)
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

fn secret(namespace: &str, url: &str) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": namespace},
        "stringData": {"connectionString": url},
    })
    .to_string()
}

#[tokio::test]
async fn the_operator_runs_with_only_the_namespaced_roles_and_cannot_read_other_secrets() {
    let plane = control_plane();
    let db = fresh_db().await;
    let objects = render(plane);
    let watched: Vec<String> = watched(&objects).into_iter().collect();
    let mine: Vec<(String, String)> = watched
        .iter()
        .map(|ns| (ns.clone(), plane.create_namespace("nsi")))
        .collect();
    let elsewhere = plane.create_namespace("nsi-other");
    let home = &mine[0].1;
    let sa = "namespaced-operator";
    plane
        .kubectl_admin(&["-n", home, "create", "serviceaccount", sa], None)
        .unwrap();
    let roles = roles_for(&objects, &mine, (home, sa));
    plane
        .kubectl_admin(&["apply", "-f", "-"], Some(&roles.to_string()))
        .unwrap();
    for (i, (_, ns)) in mine.iter().enumerate() {
        plane
            .kubectl_admin(&["apply", "-f", "-"], Some(&secret(ns, &db.url)))
            .unwrap();
        plane
            .kubectl_admin(
                &["apply", "-f", "-"],
                Some(
                    &boxtable("orders")
                        .namespace(ns)
                        .table(&format!("outbox_{i}"))
                        .secret("db")
                        .manifest(),
                ),
            )
            .unwrap();
    }
    plane
        .kubectl_admin(&["apply", "-f", "-"], Some(&secret(&elsewhere, &db.url)))
        .unwrap();

    let token = plane.service_account_token(home, sa);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("operator.kubeconfig");
    plane.write_token_kubeconfig(&kubeconfig, &token.token);
    let log = dir.path().join("operator.log");
    let mut args = vec!["run".to_owned()];
    for (_, ns) in &mine {
        args.push(format!("--namespace={ns}"));
    }
    args.extend(["--metrics-addr", "127.0.0.1:0", "--resync-interval", "2s"].map(str::to_owned));
    let _operator = Operator {
        child: Command::new(operator_binary())
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info,boxtable_operator=debug")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
        log: log.clone(),
    };

    let admin = plane.admin_client().await;
    for (_, ns) in &mine {
        let api: Api<boxtable_operator::crd::BoxTable> = Api::namespaced(admin.clone(), ns);
        let started = Instant::now();
        loop {
            let bt = api.get("orders").await.unwrap();
            let ready = bt.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            if ready {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{ns}/orders not Ready: {:?}\noperator log:\n{}",
                bt.status,
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Everything the operator did was allowed by the namespaced Roles alone.
    let refused: Vec<String> = plane
        .audit_events()
        .iter()
        .filter(|e| token.made(e) && e["annotations"]["authorization.k8s.io/decision"] == "forbid")
        .map(support::control_plane::describe)
        .collect();
    assert!(refused.is_empty(), "refused requests: {refused:?}");
    assert!(
        plane.audit_events().iter().any(|e| token.made(e)
            && e["verb"] == "list"
            && e["objectRef"]["resource"] == "secrets"
            && e["objectRef"]["name"] == "db"),
        "the operator read its Secrets (a list by name) with this token"
    );
    let gets: Vec<String> = plane
        .audit_events()
        .iter()
        .filter(|e| token.made(e) && e["verb"] == "get" && e["objectRef"]["resource"] == "secrets")
        .map(support::control_plane::describe)
        .collect();
    assert!(gets.is_empty(), "the operator GETs no Secret: {gets:?}");

    // The same identity cannot read a Secret outside the watched namespaces, nor list Secrets
    // cluster-wide.
    let probe = plane.service_account_token(home, sa);
    let client = plane.client_for_token(&probe).await;
    let outside: Api<Secret> = Api::namespaced(client.clone(), &elsewhere);
    match outside.get("db").await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("reading {elsewhere}/db must be forbidden, got {other:?}"),
    }
    match Api::<Secret>::all(client)
        .list_metadata(&Default::default())
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("listing Secrets cluster-wide must be forbidden, got {other:?}"),
    }
}

/// The `kubectl create namespace <ns>` commands in `text` (comment markers and line wraps
/// ignored), before the (last) command that applies the example.
fn namespaces_created_before_the_apply(text: &str) -> BTreeSet<String> {
    let flat = text
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join(" ");
    let before = flat
        .rsplit_once("kubectl apply -k examples/namespaced-install/")
        .map_or("", |(before, _)| before);
    before
        .split("kubectl create namespace ")
        .skip(1)
        .filter_map(|rest| rest.split([' ', '`']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_example_says_to_create_every_namespace_it_puts_roles_in_before_it_is_applied() {
    let objects = render(control_plane());
    let installed: BTreeSet<&str> = objects
        .iter()
        .filter(|o| kind(o) == "Namespace")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    let needed: BTreeSet<String> = objects
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str())
        .filter(|ns| !installed.contains(ns))
        .map(str::to_owned)
        .collect();
    assert_eq!(needed, watched(&objects));
    for file in [
        "examples/namespaced-install/kustomization.yaml",
        "deploy/README.md",
    ] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        assert_eq!(
            namespaces_created_before_the_apply(&text),
            needed,
            "{file} must say which namespaces to create before `kubectl apply -k examples/namespaced-install/`"
        );
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for ns in &needed {
        assert!(
            readme.contains(&format!("kubectl create namespace {ns}")),
            "README.md does not say to create namespace {ns} for the namespaced install"
        );
    }
}
