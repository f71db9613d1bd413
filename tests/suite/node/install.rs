//! The operator installed the way users install it, on the real node `scripts/node.sh` starts:
//! `dist/install.yaml` with the image overridden by a kustomize overlay to the image
//! `scripts/image.sh` builds from this commit, two replicas electing a leader from two Pods, and
//! the examples reconciled from inside a Pod against the suite's PostgreSQL. And the node itself:
//! in a network namespace with no route out, writing nothing on the host outside its own
//! directory and namespaces (what it leaves after it stops is checked by `node_stop`, which fails
//! the run).
//!
//! The install is cluster-wide and uses the Lease in `boxtable-system` that other tests' operators
//! elect through, so `scripts/test.sh` runs this module after the rest, one test at a time; the
//! install test scales its Deployment to zero again, even when it fails.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::control_plane::{ControlPlane, OPERATOR_NAMESPACE, root};
use crate::support::node::{Node, assert_succeeded, node, printed};
use crate::support::node_install::{Install, connection_string, name};

/// Addresses outside the machine: a documentation address, a public resolver, and an IPv6 one.
const OUTSIDE: &[&str] = &["192.0.2.1", "1.1.1.1", "2001:4860:4860::8888"];

/// The paths the kubelet, containerd and libcni write by default, whatever their flags say.
const HOST_PATHS: &[&str] = &[
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/var/log/pods",
    "/var/log/containers",
    "/run/containerd",
    "/run/netns",
    "/opt/containerd",
    "/etc/cni",
];

fn host_default_gateway() -> Option<String> {
    let out = Command::new("ip")
        .args(["-4", "route", "show", "default"])
        .output()
        .expect("run ip (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = text.split_whitespace();
    words.find(|w| *w == "via")?;
    words.next().map(str::to_owned)
}

#[test]
fn the_node_runs_in_a_network_namespace_with_no_route_out() {
    let node = node();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    let ns = std::fs::read_link(format!("/proc/{}/ns/net", node.pid)).unwrap();
    assert_ne!(
        ns, host,
        "the node's first process is in the host's network namespace"
    );
    // Every process of the node (kubelet, containerd, shims, containers) is outside the host's.
    let processes = node.processes();
    let mut names = Vec::new();
    for pid in &processes {
        let Ok(net) = std::fs::read_link(format!("/proc/{pid}/ns/net")) else {
            continue; // it has just exited
        };
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert_ne!(
            net,
            host,
            "process {pid} ({}) of the node is in the host's network namespace",
            cmdline.replace('\0', " ")
        );
        names.push(cmdline.split('\0').next().unwrap_or("").to_owned());
    }
    for program in ["kubelet", "containerd"] {
        assert!(
            names.iter().any(|n| n.ends_with(&format!("/{program}"))),
            "no {program} among the node's processes: {names:?}"
        );
    }
    // No route to anything outside: the kernel refuses before a packet is built.
    let mut outside: Vec<String> = OUTSIDE.iter().map(|a| a.to_string()).collect();
    outside.extend(host_default_gateway());
    for address in &outside {
        let out = node.in_network("ip", &["route", "get", address]);
        assert!(
            !out.status.success(),
            "the node's namespace has a route to {address}: {}",
            printed(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Network is unreachable"),
            "{address}: {}",
            printed(&out)
        );
    }
    // The same question on the host has an answer (so the one above is the namespace's doing).
    if let Some(gateway) = host_default_gateway() {
        let out = Command::new("ip")
            .args(["route", "get", &gateway])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the host routes {gateway}: {}",
            printed(&out)
        );
    }
    // Inside, the node's address, the `kubernetes` Service's, and the Pods' bridge.
    let addresses = node.in_network("ip", &["-4", "-o", "addr", "show"]);
    let addresses = String::from_utf8_lossy(&addresses.stdout);
    assert!(
        addresses.contains(&format!("{}/32", node.ip)),
        "{addresses}"
    );
    let routes = node.in_network("ip", &["-4", "route", "show"]);
    let routes = String::from_utf8_lossy(&routes.stdout);
    assert!(!routes.contains("default"), "a default route: {routes}");
}

/// Whether `path` exists in the mount namespace of process `pid`.
fn exists_in(pid: u32, path: &str) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/root{path}")).exists()
}

#[test]
fn the_node_writes_nothing_on_the_host_outside_its_directory_and_namespaces() {
    let node = node();
    let before: Vec<String> = std::env::var("NODE_HOST_BEFORE")
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    // The kubelet did write its fixed path, inside the node's mount namespace, where /var/lib
    // is an overlay whose writes land in the node's directory (and /var/log too; /run is a tmpfs).
    assert!(
        exists_in(node.pid, "/var/lib/kubelet/device-plugins"),
        "the kubelet's device-plugins directory is missing inside the node"
    );
    assert!(
        node.dir
            .join("overlay/upper-var-lib/kubelet/device-plugins")
            .is_dir(),
        "the kubelet's writes to /var/lib did not land in {}",
        node.dir.display()
    );
    for path in HOST_PATHS {
        assert!(
            before.iter().any(|b| b == path) || !std::path::Path::new(path).exists(),
            "the node created {path} on the host"
        );
    }
    // No mount of the node's in the host's mount table.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = node.dir.to_str().unwrap();
    for line in mounts.lines() {
        assert!(
            !line.contains(dir)
                && !line.contains("/var/lib/kubelet")
                && !line.contains("/run/netns")
                && !line.contains("/run/containerd"),
            "a mount of the node's in the host's mount namespace: {line}"
        );
    }
    // The Pods' cgroups are under the node's own cgroup, not at the kubelet's default place.
    let cgroup = node.dir.file_name().unwrap().to_str().unwrap();
    assert!(
        std::path::Path::new(&format!("/sys/fs/cgroup/memory/{cgroup}/kubepods")).is_dir(),
        "no kubepods cgroup under /sys/fs/cgroup/memory/{cgroup}"
    );
    assert!(
        !std::path::Path::new("/sys/fs/cgroup/memory/kubepods").exists(),
        "the kubelet made /sys/fs/cgroup/memory/kubepods on the host"
    );
    // The kernel settings the kubelet checks read as it wants inside, and are unchanged outside.
    for (setting, wanted) in [
        ("vm/overcommit_memory", "1"),
        ("kernel/panic", "10"),
        ("kernel/panic_on_oops", "1"),
    ] {
        let inside =
            std::fs::read_to_string(format!("/proc/{}/root/proc/sys/{setting}", node.pid)).unwrap();
        assert_eq!(inside.trim(), wanted, "{setting} inside the node");
    }
}

/// The namespace the examples are applied in (`shop` in the files; its own here, so that the
/// end-to-end test's `shop` is left alone).
const SHOP: &str = "node-shop";

/// A table as kubectl prints it: the header's words, and each row's cells cut at the columns
/// the header's words start at (a cell may be empty).
fn table(lines: &[&str]) -> (Vec<String>, Vec<Vec<String>>) {
    let header = lines[0];
    let mut starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    let names = header.split_whitespace().map(str::to_owned).collect();
    starts.push(usize::MAX);
    let rows = lines[1..]
        .iter()
        .map(|line| {
            starts
                .windows(2)
                .map(|w| {
                    let end = w[1].min(line.len());
                    line.get(w[0].min(end)..end).unwrap_or("").trim().to_owned()
                })
                .collect()
        })
        .collect();
    (names, rows)
}

/// The README's `kubectl -n shop get boxtables -o wide` example.
fn readme_wide() -> (Vec<String>, Vec<Vec<String>>) {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("$ kubectl -n shop get boxtables -o wide"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("```"))
        .collect();
    assert!(
        lines.len() > 1,
        "no `kubectl get boxtables -o wide` example in README.md"
    );
    table(&lines)
}

/// `GET path` from port 8080 of the Pod at `ip`, from inside the node's network namespace:
/// (status code, body).
fn get_from_pod(node: &Node, ip: &str, path: &str) -> (String, String) {
    let out = node.in_network(
        "curl",
        &[
            "--silent",
            "--max-time",
            "10",
            "--write-out",
            "\n%{http_code}",
            &format!("http://{ip}:8080{path}"),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    (code.to_owned(), body.to_owned())
}

/// `kubectl port-forward` to port 8080 of `pod`: the child and the local port.
fn port_forward(plane: &ControlPlane, pod: &str) -> (Child, u16) {
    let mut child = Command::new(plane.kubectl_binary())
        .args([
            "-n",
            OPERATOR_NAMESPACE,
            "port-forward",
            &format!("pod/{pod}"),
            ":8080",
        ])
        .env("KUBECONFIG", &plane.admin_kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // kubectl prints a line per connection: read on until it exits (a closed pipe would end it).
    let stdout = child.stdout.take().unwrap();
    let (first, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = first.send(line.unwrap_or_default());
        }
    });
    let line = lines
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_default();
    // "Forwarding from 127.0.0.1:PORT -> 8080"
    let port = line
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok());
    match port {
        Some(port) => (child, port),
        None => {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("kubectl port-forward pod/{pod}: {line}{}", printed(&out))
        }
    }
}

/// `GET /metrics` on the host's loopback `port`.
fn scrape(port: u16) -> String {
    let out = Command::new("curl")
        .args(["--silent", "--fail", "--max-time", "10"])
        .arg(format!("http://127.0.0.1:{port}/metrics"))
        .output()
        .unwrap();
    assert!(out.status.success(), "GET /metrics: {}", printed(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the unlabelled sample `name` in a metrics text.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The examples as a user applies them after filling in the Secret, moved to [`SHOP`]: the
/// connection string names the suite's PostgreSQL at the address the node's Pods reach it by.
fn examples(connection: &str) -> String {
    let mut files: Vec<_> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut all = String::new();
    for file in files {
        let mut text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("namespace: shop", &format!("namespace: {SHOP}"))
            .replace("name: shop\n", &format!("name: {SHOP}\n"));
        if text.contains("kind: Secret") {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with("connectionString:"))
                .expect("the example Secret has a connectionString")
                .to_owned();
            let indent = &line[..line.len() - line.trim_start().len()];
            text = text.replace(&line, &format!("{indent}connectionString: {connection}"));
        }
        all.push_str("---\n");
        all.push_str(&text);
        all.push('\n');
    }
    all
}

#[test]
fn dist_install_yaml_runs_two_ready_replicas_one_leader_and_reconciles_the_examples_from_a_pod() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(crate::support::fresh_db());
    runtime.block_on(async {
        db.connect()
            .await
            .batch_execute("CREATE SCHEMA billing")
            .await
            .unwrap();
    });
    let mut install = Install::dist();
    install.namespace(SHOP);
    let (plane, node, image) = (install.plane, install.node, install.image);
    let connection = connection_string(node, &db);

    // Two Ready replicas of the image under test, on the node, never restarted.
    let pods = install.ready_pods(2);
    let mut names = Vec::new();
    for pod in &pods {
        let name = name(pod);
        assert_eq!(pod["spec"]["nodeName"], node.name.as_str(), "{name}");
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["image"], image, "{name}");
        assert_eq!(container["imagePullPolicy"], "Never", "{name}");
        let status = &pod["status"]["containerStatuses"][0];
        assert_eq!(status["restartCount"], 0, "{name}: {status:#}");
        names.push(name);
    }

    // Exactly one holds the Lease: its holder is one of the two, and their boxtable_leader
    // gauges, read through kubectl port-forward (kube-apiserver to the kubelet), are 1 and 0.
    let holder = install.leader(&pods);
    let mut leaders = Vec::new();
    for name in &names {
        let (mut forward, port) = port_forward(plane, name);
        let metrics = scrape(port);
        let _ = forward.kill();
        let _ = forward.wait();
        let leader = sample(&metrics, "boxtable_leader")
            .unwrap_or_else(|| panic!("{name} serves no boxtable_leader: {metrics}"));
        if leader == 1.0 {
            leaders.push(name.clone());
        }
    }
    assert_eq!(
        leaders,
        vec![holder.clone()],
        "the one leader is the Lease's holder"
    );

    // /readyz and /metrics from each Pod's own address, inside the node's network namespace.
    for pod in &pods {
        let ip = pod["status"]["podIP"].as_str().unwrap();
        let (code, body) = get_from_pod(node, ip, "/readyz");
        assert_eq!(code, "200", "/readyz of {ip}: {body}");
        let (code, body) = get_from_pod(node, ip, "/metrics");
        assert_eq!(code, "200", "/metrics of {ip}: {body}");
        assert!(body.contains("boxtable_build_info"), "{body}");
    }
    // The leader's log, through kube-apiserver and the kubelet: JSON lines, leadership taken.
    let logs = plane
        .kubectl_admin(&["-n", OPERATOR_NAMESPACE, "logs", &holder], None)
        .unwrap_or_else(|m| panic!("{m}"));
    assert!(
        logs.lines()
            .any(|l| l.starts_with('{') && l.contains("became leader")),
        "{logs}"
    );

    // The examples reach Ready, reconciled from the Pod through the node's PostgreSQL forwarder.
    let started = Instant::now();
    plane
        .kubectl_admin(&["apply", "-f", "-"], Some(&examples(&connection)))
        .unwrap_or_else(|m| panic!("{m}"));
    let waited = plane.kubectl_as(
        &plane.admin_kubeconfig,
        &[
            "-n",
            SHOP,
            "wait",
            "--for=condition=Ready",
            "boxtables",
            "--all",
            "--timeout=120s",
        ],
        None,
    );
    assert_succeeded(
        plane,
        &waited,
        "the examples did not reach Ready",
        &["-n", SHOP, "boxtables"],
    );
    let reconciled = started.elapsed();
    let wide = plane
        .kubectl_admin(&["-n", SHOP, "get", "bt", "-o", "wide"], None)
        .unwrap_or_else(|m| panic!("{m}"));
    eprintln!("$ kubectl -n {SHOP} get bt -o wide\n{wide}");
    // The columns the README shows; its rows here too, Ready with the same box, table and
    // version (the reason is Migrated, or UpToDate when a later pass found the table done).
    let (columns, shown) = readme_wide();
    let (header, rows) = table(&wide.lines().collect::<Vec<_>>());
    assert_eq!(
        header, columns,
        "the columns differ from README.md's:\n{wide}"
    );
    let column = |name: &str| header.iter().position(|c| c == name).unwrap();
    assert_eq!(rows.len(), 4, "four examples:\n{wide}");
    for row in &rows {
        assert_eq!(row[column("READY")], "True", "{wide}");
        assert!(
            ["Migrated", "UpToDate"].contains(&row[column("REASON")].as_str()),
            "{wide}"
        );
    }
    for example in &shown {
        let row = rows
            .iter()
            .find(|r| r[0] == example[0])
            .unwrap_or_else(|| panic!("no {} row:\n{wide}", example[0]));
        for name in ["BOX", "TABLE", "VERSION", "READY"] {
            assert_eq!(
                row[column(name)],
                example[column(name)],
                "{name} of {}:\n{wide}",
                row[0]
            );
        }
    }
    eprintln!(
        "dist/install.yaml: rollout complete in {:.1}s, the examples Ready {:.1}s after they were applied; leader {holder}",
        install.rollout.as_secs_f64(),
        reconciled.as_secs_f64()
    );
}
