//! Uninstalling with a `deletionPolicy: Drop` BoxTable left, each test on a control plane of its
//! own ([`PrivatePlane`]; the shared one keeps its CRD for every other test). The operator binary
//! runs as the install's ServiceAccount with the installed Deployment's arguments and environment
//! (no kubelet runs here), against a real PostgreSQL. The README's Uninstall commands, for the
//! one file and for Helm, end with the table dropped, the CRD and the operator's namespace (its
//! Lease with it) gone and nothing left to hang; a single `kubectl delete -f dist/install.yaml`
//! does not hang either: the uninstall guard refuses to delete what the operator runs with while
//! the CRD exists, the operator finishes the BoxTable, and the commands the refusal names finish
//! the rest.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value as Json, json};

use crate::install::helm_chart::helm_command;
use crate::support::Sql;
use crate::support::control_plane::{OPERATOR_NAMESPACE, PrivatePlane, root};
use crate::support::e2e::{Cluster, Operator, connect, operator_binary};
use crate::support::process::{self, stdout_of_success};

/// A step of an uninstall that has not ended after this long, on a busy machine, hangs.
const WAIT: Duration = Duration::from_secs(180);
const CRD: &str = "boxtables.brighter.dev";
const BUNDLE: &str = "dist/install.yaml";
/// The operator's Deployment, ServiceAccount and leader-election Lease.
const OPERATOR: &str = "boxtable-operator";
/// What the uninstall guard's refusal starts with.
const REFUSAL: &str = "boxtable-operator goes last: CRD boxtables.brighter.dev still exists";

/// How the operator was installed.
#[derive(Clone, Copy)]
enum Install {
    /// `kubectl apply -f dist/install.yaml`.
    Bundle,
    /// The README's Helm install: `deploy/namespace.yaml`, then the chart with Helm 4.
    Helm,
}

/// An installed operator, running, with Drop BoxTable `orders` Ready in its namespace. Fields
/// drop in order: the operator process and the cluster's checks before the plane stops.
struct Installed {
    operator: Operator,
    cluster: Cluster,
    ns: String,
    table: String,
    private: PrivatePlane,
}

/// The `sh` blocks of the README section headed `heading` (up to the next heading of its level
/// or higher), each as its commands split into words, comments left out.
fn readme_blocks(heading: &str) -> Vec<Vec<Vec<String>>> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let level = |line: &str| line.chars().take_while(|c| *c == '#').count();
    let mut lines = readme.lines().skip_while(|line| *line != heading);
    assert!(lines.next().is_some(), "README.md has no {heading:?}");
    let mut blocks = Vec::new();
    let mut block: Option<Vec<Vec<String>>> = None;
    for line in lines {
        match (&mut block, line.trim()) {
            (None, "```sh") => block = Some(Vec::new()),
            (None, _) if (1..=level(heading)).contains(&level(line)) => break,
            (Some(_), "```") => blocks.extend(block.take()),
            (Some(commands), text) => {
                let command = text.split(" #").next().unwrap_or_default().trim();
                if !command.is_empty() && !command.starts_with('#') {
                    commands.push(command.split_whitespace().map(str::to_owned).collect());
                }
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The one block of README section `heading` that has a command containing `word`.
fn readme_commands(heading: &str, word: &str) -> Vec<Vec<String>> {
    let mut found: Vec<_> = readme_blocks(heading)
        .into_iter()
        .filter(|block| block.iter().flatten().any(|w| w.contains(word)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "README.md's {heading:?} should have one sh block using {word}: {found:?}"
    );
    found.remove(0)
}

/// Runs `argv` (`kubectl ...` as the admin, or `helm ...` with Helm 4) against the private plane,
/// failing the test if it has not ended within [`WAIT`].
async fn run(installed: &Installed, argv: &[String]) -> Output {
    let plane = installed.private.plane;
    let mut command = match argv[0].as_str() {
        "kubectl" => {
            let mut command = Command::new(plane.kubectl_binary());
            command
                .env("KUBECONFIG", &plane.admin_kubeconfig)
                .current_dir(root());
            command
        }
        "helm" => helm_command("v4", Some(plane)),
        other => panic!("{other} is neither kubectl nor helm"),
    };
    command
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    match tokio::time::timeout(WAIT, command.output()).await {
        Ok(out) => out.unwrap(),
        Err(_) => panic!(
            "`{}` has not ended after {WAIT:?}: the uninstall hangs\noperator log:\n{}",
            argv.join(" "),
            installed.operator.logs()
        ),
    }
}

/// [`run`], which must succeed; returns stdout.
/// Runs the README's uninstall `commands` in order, each required to succeed, then checks that
/// nothing is left and nothing hangs; no request was refused before they ran.
async fn uninstall_as_the_readme_says(installed: &mut Installed, commands: &[Vec<String>]) {
    installed.no_refused_request_so_far();
    for command in commands {
        let out = run(installed, command).await;
        assert!(
            out.status.success(),
            "`{}` failed:\n{}{}operator log:\n{}",
            command.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            installed.operator.logs()
        );
    }
    installed
        .assert_uninstalled_and_nothing_left_to_hang()
        .await;
}

async fn run_ok(installed: &Installed, argv: &[&str]) -> String {
    let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
    let out = run(installed, &argv).await;
    stdout_of_success(&format!("`{}`", argv.join(" ")), out)
}

/// The operator binary, started the way the stored Deployment `deployment` starts it: its
/// arguments (metrics on a free loopback port instead of 8080) and environment (the downward
/// API's pod name and namespace filled in), as the install's ServiceAccount.
fn start_operator(cluster: &Cluster, deployment: &Json) -> Operator {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| match arg.as_str().unwrap() {
            a if a.starts_with("--metrics-addr=") => "--metrics-addr=127.0.0.1:0",
            a => a,
        })
        .collect();
    let log = cluster.dir.path().join("operator.log");
    let mut command = Command::new(operator_binary());
    command
        .args(&args)
        .env("KUBECONFIG", &cluster.operator_kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap();
        let value = match (
            var["value"].as_str(),
            var["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Some(value), _) => value,
            (None, Some("metadata.name")) => "boxtable-operator-uninstall",
            (None, Some("metadata.namespace")) => OPERATOR_NAMESPACE,
            other => panic!("the Deployment sets {name} from {other:?}"),
        };
        command.env(name, value);
    }
    Operator {
        child: command.spawn().expect("start boxtable-operator"),
        log,
    }
}

/// A private control plane with the operator installed `how`, the operator running as its
/// ServiceAccount, and Drop BoxTable `ns/orders` Ready, its table created.
async fn installed_with_a_ready_drop_boxtable(how: Install, ns: &str) -> Installed {
    let private = tokio::task::spawn_blocking(PrivatePlane::start)
        .await
        .unwrap();
    let plane = private.plane;
    match how {
        Install::Bundle => {
            plane.kubectl_admin(&["apply", "-f", BUNDLE], None).unwrap();
        }
        Install::Helm => {
            plane
                .kubectl_admin(&["apply", "-f", "deploy/namespace.yaml"], None)
                .unwrap();
            process::run_ok(
                "helm install",
                helm_command("v4", Some(plane)).args([
                    "install",
                    OPERATOR,
                    "charts/boxtable-operator",
                    "--namespace",
                    OPERATOR_NAMESPACE,
                ]),
            );
        }
    }
    plane
        .kubectl_admin(
            &[
                "wait",
                "--for=condition=Established",
                &format!("crd/{CRD}"),
                "--timeout=120s",
            ],
            None,
        )
        .unwrap();
    let cluster = Cluster::start_on(plane).await;
    let deployment: Json = serde_json::from_str(
        &cluster
            .kubectl_ok(&[
                "-n",
                OPERATOR_NAMESPACE,
                "get",
                "deployment",
                OPERATOR,
                "-o",
                "json",
            ])
            .await,
    )
    .unwrap();
    let operator = start_operator(&cluster, &deployment);
    cluster.secret(ns, "db").await;
    let table = format!("{}_outbox", ns.replace('-', "_"));
    let boxtable = json!({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "metadata": {"name": "orders", "namespace": ns},
        "spec": {
            "box": "Outbox",
            "table": table,
            "deletionPolicy": "Drop",
            "database": {"secretRef": {"name": "db"}},
        },
    });
    cluster.apply(boxtable.to_string()).await;
    let ready = cluster
        .kubectl(&[
            "-n",
            ns,
            "wait",
            "--for=condition=Ready",
            "boxtable/orders",
            &format!("--timeout={}s", WAIT.as_secs()),
        ])
        .await;
    assert!(
        ready.status.success(),
        "{ns}/orders is not Ready: {}\noperator log:\n{}",
        String::from_utf8_lossy(&ready.stderr),
        operator.logs()
    );
    let installed = Installed {
        operator,
        cluster,
        ns: ns.to_owned(),
        table,
        private,
    };
    assert!(installed.table_exists().await, "Ready, yet no table");
    installed
}

impl Installed {
    async fn table_exists(&self) -> bool {
        connect(&self.cluster.db.url)
            .await
            .value(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&format!("public.{}", self.table)],
            )
            .await
    }

    /// Fails the test if the operator made a request its RBAC refused, then stops checking: the
    /// uninstall that follows takes the operator's permissions away while the process (which a
    /// kubelet would stop with its pod) still runs.
    fn no_refused_request_so_far(&mut self) {
        let token = self.cluster.token.take().unwrap();
        let refused = self.private.plane.forbidden_requests(&token);
        assert!(refused.is_empty(), "refused: {refused:?}");
    }

    /// The table dropped, the CRD and the operator's namespace gone, no namespace Terminating,
    /// and the BoxTable's namespace (its Secret no longer kept for a drop) deleted at once.
    async fn assert_uninstalled_and_nothing_left_to_hang(&self) {
        assert!(!self.table_exists().await, "the Drop table is still there");
        for (kind, name) in [("crd", CRD), ("namespace", OPERATOR_NAMESPACE)] {
            let out = self.cluster.kubectl(&["get", kind, name]).await;
            assert!(
                !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound"),
                "{kind} {name} is still there:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let terminating = self
            .cluster
            .kubectl_ok(&[
                "get",
                "namespaces",
                "-o",
                "jsonpath={.items[?(@.status.phase==\"Terminating\")].metadata.name}",
            ])
            .await;
        assert_eq!(terminating.trim(), "", "namespaces left Terminating");
        self.cluster
            .kubectl_ok(&["delete", "namespace", &self.ns, "--timeout=60s"])
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_uninstall_with_a_drop_boxtable_left_drops_it_and_leaves_nothing() {
    let mut installed = installed_with_a_ready_drop_boxtable(Install::Bundle, "uninstall").await;
    let commands = readme_commands("### Uninstall", BUNDLE);
    uninstall_as_the_readme_says(&mut installed, &commands).await;
    let left = run_ok(
        &installed,
        &[
            "kubectl",
            "get",
            "-f",
            BUNDLE,
            "--ignore-not-found",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(left.trim(), "", "objects of the bundle left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_bundle_at_once_is_refused_until_the_operator_has_finished_its_boxtables() {
    let mut installed =
        installed_with_a_ready_drop_boxtable(Install::Bundle, "uninstall-at-once").await;
    let naive: Vec<String> = ["kubectl", "delete", "-f", BUNDLE]
        .map(str::to_owned)
        .to_vec();
    let first = run(&installed, &naive).await;
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(!first.status.success(), "nothing refused:\n{stderr}");
    for refused in [
        r#"namespaces "boxtable-system" is forbidden"#,
        r#"serviceaccounts "boxtable-operator" is forbidden"#,
        r#"deployments.apps "boxtable-operator" is forbidden"#,
        r#"clusterrolebindings.rbac.authorization.k8s.io "boxtable-operator" is forbidden"#,
    ] {
        assert!(stderr.contains(refused), "{refused}, in:\n{stderr}");
    }
    assert!(stderr.contains(REFUSAL), "{stderr}");
    assert!(
        stderr.contains("then run this delete again with --ignore-not-found"),
        "{stderr}"
    );
    let wait_for_the_boxtables: Vec<String> = stderr
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("the refusal names no command: {stderr}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect();

    // The operator, untouched, finishes the BoxTable the CRD's deletion deleted: the command the
    // refusal names returns once it has.
    let waited = run(&installed, &wait_for_the_boxtables).await;
    assert!(
        waited.status.success(),
        "`{}`:\n{}",
        wait_for_the_boxtables.join(" "),
        String::from_utf8_lossy(&waited.stderr)
    );
    assert!(
        !installed.table_exists().await,
        "the Drop table is still there"
    );
    installed.no_refused_request_so_far();
    let mut again = naive.clone();
    again.push("--ignore-not-found".to_owned());
    let second = run(&installed, &again).await;
    assert!(
        second.status.success(),
        "the same delete again:\n{}",
        String::from_utf8_lossy(&second.stderr)
    );
    installed
        .assert_uninstalled_and_nothing_left_to_hang()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_helm_uninstall_with_a_drop_boxtable_left_drops_it_and_leaves_no_namespace() {
    let mut installed = installed_with_a_ready_drop_boxtable(Install::Helm, "uninstall-helm").await;
    // The namespace the README creates for Helm holds the operator's Lease, which is not the
    // chart's to remove.
    installed
        .cluster
        .kubectl_ok(&["-n", OPERATOR_NAMESPACE, "get", "lease", OPERATOR])
        .await;
    let commands = readme_commands("## Install with Helm", "uninstall");
    uninstall_as_the_readme_says(&mut installed, &commands).await;
}
