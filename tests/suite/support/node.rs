//! The real node `scripts/node.sh` starts next to the control plane (kubelet and containerd in
//! network, mount and PID namespaces of their own, see `scripts/test.sh`): found from the
//! environment, entered with `nsenter`, and loaded with the operator's image as `scripts/image.sh`
//! builds it from this commit, under a name the tests install it by with `imagePullPolicy: Never`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::control_plane::{ControlPlane, root};

/// The node of this run, from the variables `scripts/node.sh` exports.
#[derive(Debug)]
pub struct Node {
    /// The Node object's name.
    pub name: String,
    /// Its InternalIP, an address inside its network namespace.
    pub ip: String,
    /// Its configuration, logs and state.
    pub dir: PathBuf,
    /// The host pid of the first process of its namespaces.
    pub pid: u32,
    /// containerd, ctr and runc.
    pub bin: PathBuf,
    /// containerd's socket.
    pub containerd: PathBuf,
    /// `HOST:PORT` where Pods reach the suite's PostgreSQL, when it listens on the host's loopback.
    pub postgres: Option<String>,
}

const HOW_TO_GET_IT: &str = "the node tests run Pods on a real node (kubelet, containerd and runc \
    in namespaces of their own) that scripts/test-node.sh starts with a control plane of its own. \
    Run them as root with `scripts/test-node.sh [FILTER...]` (scripts/test.sh runs it beside the \
    other tests), or open a shell with both started by `scripts/test-node.sh --shell` and run \
    cargo test from that shell";

/// Reads the node's location from the environment, or says how to get one.
pub fn find(env: impl Fn(&str) -> Option<String>) -> Result<Node, String> {
    let var = |name: &str| {
        env(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("{name} is not set: {HOW_TO_GET_IT}"))
    };
    let pid = var("NODE_PID")?;
    let node = Node {
        name: var("NODE_NAME")?,
        ip: var("NODE_IP")?,
        dir: PathBuf::from(var("NODE_DIR")?),
        pid: pid
            .parse()
            .map_err(|_| format!("NODE_PID is not a pid: {pid}"))?,
        bin: PathBuf::from(var("NODE_BIN")?),
        containerd: PathBuf::from(var("NODE_CONTAINERD_ADDRESS")?),
        postgres: env("NODE_POSTGRES").filter(|v| !v.is_empty()),
    };
    if !Path::new(&format!("/proc/{}", node.pid)).exists() {
        return Err(format!(
            "the node's first process ({}) is gone: the node has stopped (its logs are in {}): \
             {HOW_TO_GET_IT}",
            node.pid,
            node.dir.display()
        ));
    }
    Ok(node)
}

/// The node of this run; fails the test (never skips) when there is none.
pub fn node() -> &'static Node {
    static NODE: OnceLock<Result<Node, String>> = OnceLock::new();
    NODE.get_or_init(|| find(|name| std::env::var(name).ok()))
        .as_ref()
        .unwrap_or_else(|message| panic!("{message}"))
}

pub use crate::support::process::printed;

impl Node {
    /// Runs `program` with `args` in the node's network namespace (the host's mount namespace:
    /// the host's binaries, such as curl and ip).
    pub fn in_network(&self, program: &str, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/proc/{}/ns/net", self.pid))
            .arg("--")
            .arg(program)
            .args(args)
            .output()
            .expect("run nsenter (util-linux)")
    }

    /// Runs ctr against the node's containerd, in the namespace the kubelet uses.
    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new(self.bin.join("ctr"))
            .arg("--address")
            .arg(&self.containerd)
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr")
    }

    /// Loads the `docker save` tarball `tarball` into the node and names its image `name`.
    pub fn load_image(&self, tarball: &Path, name: &str) {
        let imported = self.ctr(&["images", "import", tarball.to_str().unwrap()]);
        assert!(
            imported.status.success(),
            "ctr images import {}: {}",
            tarball.display(),
            printed(&imported)
        );
        let listed = Command::new("tar")
            .args(["--extract", "--to-stdout", "--file"])
            .arg(tarball)
            .arg("manifest.json")
            .output()
            .unwrap();
        let manifest: serde_json::Value = serde_json::from_slice(&listed.stdout)
            .unwrap_or_else(|e| panic!("manifest.json of {}: {e}", tarball.display()));
        let built = manifest[0]["RepoTags"][0]
            .as_str()
            .expect("the tarball names its image");
        let tagged = self.ctr(&["images", "tag", "--force", built, name]);
        assert!(
            tagged.status.success(),
            "ctr images tag: {}",
            printed(&tagged)
        );
    }

    /// The host pids of the node's processes: its first process and every descendant (the
    /// kubelet, containerd, the shims, every container's processes).
    pub fn processes(&self) -> Vec<u32> {
        let parent = |pid: u32| -> Option<u32> {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))?
                .trim()
                .parse()
                .ok()
        };
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                let mut current = Some(pid);
                while let Some(p) = current.filter(|&p| p > 1) {
                    if p == self.pid {
                        return true;
                    }
                    current = parent(p);
                }
                false
            })
            .collect()
    }
}

impl Node {
    /// Restarts the node's kubelet (SIGTERM, or SIGKILL when `kill`) with `node_restart_kubelet`
    /// of `scripts/node.sh`, which waits until the new kubelet is healthy and the Node Ready with a
    /// heartbeat it sent; returns how long that took, or what went wrong.
    pub fn restart_kubelet(&self, kill: bool) -> Result<Duration, String> {
        let started = Instant::now();
        let out = Command::new("bash")
            .arg("-c")
            .arg(r#". scripts/node.sh && node_restart_kubelet "$@""#)
            .arg("node_restart_kubelet")
            .args(kill.then_some("--kill"))
            .current_dir(root())
            .output()
            .expect("run bash");
        if out.status.success() {
            Ok(started.elapsed())
        } else {
            Err(printed(&out))
        }
    }
}

/// The operator's image, built by `scripts/image.sh` from this commit (with the binary this run
/// tests, as `tests/suite/install/image.rs` builds it) and loaded into the node once per run; returns the
/// name it is loaded under, `localhost/boxtable-operator:<commit>`.
pub fn operator_image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let node = node();
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let built = Command::new(root().join("scripts/image.sh"))
            .args(["--binary", env!("CARGO_BIN_EXE_boxtable-operator"), "--output"])
            .arg(dir.path())
            .current_dir(root())
            .output()
            .expect("run scripts/image.sh");
        assert!(built.status.success(), "scripts/image.sh: {}", printed(&built));
        let commit = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(root())
            .output()
            .unwrap();
        let name = format!(
            "localhost/boxtable-operator:{}",
            String::from_utf8_lossy(&commit.stdout).trim()
        );
        node.load_image(&dir.path().join("boxtable-operator.tar"), &name);
        eprintln!(
            "the operator's image built by scripts/image.sh and loaded into the node as {name} in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        name
    })
}

/// Polls `check` every 200 ms until it returns `Some`, failing after `timeout` with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Asserts that `out` succeeded; otherwise fails with `what`, everything it printed, and what
/// `kubectl get <objects>` shows now.
pub fn assert_succeeded(plane: &ControlPlane, out: &Output, what: &str, objects: &[&str]) {
    assert!(
        out.status.success(),
        "{what}: {}\nkubectl get {}: {:#}",
        printed(out),
        objects.join(" "),
        get_json(plane, objects)
    );
}

/// `kubectl get -o json` of `args`, parsed.
pub fn get_json(plane: &ControlPlane, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["get", "-o", "json"];
    all.extend_from_slice(args);
    let text = plane
        .kubectl_admin(&all, None)
        .unwrap_or_else(|m| panic!("{m}"));
    serde_json::from_str(&text).unwrap()
}
