//! The real Kubernetes control plane the suites run against: etcd, kube-apiserver and
//! kube-controller-manager started once per run by `scripts/control-plane.sh` (see
//! `scripts/test.sh`). This module finds it from the environment, installs `deploy/` into it the
//! way a user does (`kubectl apply -k deploy/`), gives each test its own namespace, hands out
//! credentials (the admin's client certificate, or a TokenRequest token for the operator's
//! ServiceAccount, which `deploy/rbac.yaml` alone authorises), and reads the audit log.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use base64::Engine;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

/// The namespace `deploy/` installs the operator's ServiceAccount into.
pub const OPERATOR_NAMESPACE: &str = "boxtable-system";
/// The operator's ServiceAccount (`deploy/serviceaccount.yaml`).
pub const OPERATOR_SERVICE_ACCOUNT: &str = "boxtable-operator";
/// The user name the API server gives that ServiceAccount's tokens.
pub const OPERATOR_USER: &str = "system:serviceaccount:boxtable-system:boxtable-operator";

/// Where the control plane of this run is, from the variables `scripts/control-plane.sh` exports.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// The admin kubeconfig (client certificate in `system:masters`).
    pub admin_kubeconfig: PathBuf,
    /// The API server's audit log, one JSON event per request.
    pub audit_log: PathBuf,
    /// etcd's client URL.
    pub etcd: String,
    /// The directory with the CA certificate (`ca.crt`) and the logs.
    pub dir: PathBuf,
    /// The file holding kube-apiserver's current pid (its supervisor restarts it when it exits).
    pub apiserver_pidfile: PathBuf,
    /// The directory with the binaries built for this release (kubectl among them).
    pub bin: PathBuf,
}

const HOW_TO_GET_IT: &str = "the Kubernetes tests run against a real control plane (etcd, \
    kube-apiserver, kube-controller-manager) that scripts/test.sh builds from Go modules and starts. \
    Run scripts/test.sh, or start one in your shell with `. scripts/control-plane.sh && cp_start` \
    (it needs Go 1.26 and openssl; the first build takes about 25 minutes) and run cargo test from \
    that shell";

/// Reads the control plane's location from the environment, or says how to get one.
pub fn find(env: impl Fn(&str) -> Option<String>) -> Result<ControlPlane, String> {
    let var = |name: &str| {
        env(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("{name} is not set: {HOW_TO_GET_IT}"))
    };
    let dir = PathBuf::from(var("CONTROL_PLANE_DIR")?);
    let plane = ControlPlane {
        server: var("CONTROL_PLANE_SERVER")?,
        admin_kubeconfig: PathBuf::from(var("CONTROL_PLANE_KUBECONFIG")?),
        audit_log: PathBuf::from(var("CONTROL_PLANE_AUDIT_LOG")?),
        etcd: var("CONTROL_PLANE_ETCD")?,
        apiserver_pidfile: PathBuf::from(var("CONTROL_PLANE_APISERVER_PIDFILE")?),
        bin: PathBuf::from(var("CONTROL_PLANE_BIN")?),
        dir,
    };
    if !plane.admin_kubeconfig.is_file() {
        return Err(format!(
            "{} does not exist (the control plane has stopped): {HOW_TO_GET_IT}",
            plane.admin_kubeconfig.display()
        ));
    }
    Ok(plane)
}

/// The control plane of this run, installed with `deploy/`; fails the test (never skips) when
/// there is none.
pub fn control_plane() -> &'static ControlPlane {
    static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    PLANE
        .get_or_init(|| {
            let plane = find(|name| std::env::var(name).ok())?;
            plane.install()?;
            Ok(plane)
        })
        .as_ref()
        .unwrap_or_else(|message| panic!("{message}"))
}

/// A control plane of one test's own, for what the shared one must never go through (the CRD
/// deleted, the operator's namespace gone): `cp_start` of `scripts/control-plane.sh` in a child
/// shell, with the binaries of this run. Dropping it closes the shell's stdin; the shell then
/// exits and its trap stops etcd, kube-apiserver and kube-controller-manager and deletes their
/// directory (its watchdog does the same if the test process dies).
pub struct PrivatePlane {
    /// The plane, as [`find`] describes the shared one (leaked: a few paths per test).
    pub plane: &'static ControlPlane,
    shell: std::process::Child,
}

impl PrivatePlane {
    /// Starts the plane (blocking, about as long as `cp_start` takes: certificates, etcd, the API
    /// server's readiness, the controller manager's health) and returns once it serves.
    pub fn start() -> PrivatePlane {
        use std::io::BufRead;
        const VARS: [&str; 7] = [
            "CONTROL_PLANE_DIR",
            "CONTROL_PLANE_SERVER",
            "CONTROL_PLANE_KUBECONFIG",
            "CONTROL_PLANE_AUDIT_LOG",
            "CONTROL_PLANE_ETCD",
            "CONTROL_PLANE_APISERVER_PIDFILE",
            "CONTROL_PLANE_BIN",
        ];
        let print: String = VARS
            .iter()
            .map(|var| format!("printf '%s=%s\\n' {var} \"${var}\"; "))
            .collect();
        let script = format!(
            ". scripts/control-plane.sh && cp_start || exit 1; {print}echo ready; \
             exec >/dev/null; read -r _"
        );
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut shell = Command::new("bash")
            .args(["-c", &script])
            .current_dir(root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("run bash for scripts/control-plane.sh");
        let stdout = shell.stdout.take().unwrap();
        let mut vars = std::collections::BTreeMap::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line == "ready" {
                break;
            }
            if let Some((name, value)) = line.split_once('=') {
                vars.insert(name.to_owned(), value.to_owned());
            }
        }
        let plane = find(|name| vars.get(name).cloned()).unwrap_or_else(|message| {
            let _ = shell.kill();
            panic!(
                "a private control plane did not start: {message}\n{}",
                std::fs::read_to_string(log.path()).unwrap_or_default()
            )
        });
        PrivatePlane {
            plane: Box::leak(Box::new(plane)),
            shell,
        }
    }
}

impl Drop for PrivatePlane {
    fn drop(&mut self) {
        drop(self.shell.stdin.take());
        let _ = self.shell.wait();
    }
}

/// Runs `kubectl` (blocking) from the repository root with `kubeconfig`, with `stdin` piped in
/// when given; returns its output, whatever its exit status.
pub fn run_kubectl<S: AsRef<std::ffi::OsStr>>(
    kubectl: &Path,
    kubeconfig: &Path,
    args: &[S],
    stdin: Option<&str>,
) -> Output {
    let mut cmd = Command::new(kubectl);
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().expect("run kubectl");
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

/// The kubectl to render kustomizations with: the control plane's when there is one (its
/// kustomize knows every built-in kind's scope), else `$KUBECTL` or `kubectl` on PATH.
pub fn kubectl_for_kustomize() -> PathBuf {
    if let Some(bin) = std::env::var_os("CONTROL_PLANE_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(bin).join("kubectl");
    }
    PathBuf::from(std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()))
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

static NAMESPACES: AtomicU32 = AtomicU32::new(0);

impl ControlPlane {
    /// The kubectl built with the server, at the same release.
    pub fn kubectl_binary(&self) -> PathBuf {
        self.bin.join("kubectl")
    }

    /// Runs kubectl as the admin (blocking), with `stdin` piped in when given.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        run_kubectl(&self.kubectl_binary(), kubeconfig, args, stdin)
    }

    /// Runs kubectl as the admin and returns stdout, or an error with everything it printed.
    pub fn kubectl_admin(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let out = self.kubectl_as(&self.admin_kubeconfig, args, stdin);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {} failed:\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// `kubectl apply -k deploy/` (the CRD, namespace, ServiceAccount, RBAC, Deployment and
    /// Service), then waits for the CRD to be established. No kubelet runs here, so the Deployment
    /// is stored but never scheduled.
    fn install(&self) -> Result<(), String> {
        self.kubectl_admin(&["apply", "-k", "deploy/"], None)?;
        self.kubectl_admin(
            &[
                "wait",
                "--for=condition=Established",
                "crd/boxtables.brighter.dev",
                "--timeout=120s",
            ],
            None,
        )?;
        Ok(())
    }

    /// A client with the admin's credentials.
    pub async fn admin_client(&self) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// Creates a namespace named `<prefix>-<n>-<pid>` for one test and returns its name.
    pub fn create_namespace(&self, prefix: &str) -> String {
        let n = NAMESPACES.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}-{n}-{}", std::process::id());
        self.kubectl_admin(&["create", "namespace", &name], None)
            .unwrap_or_else(|message| panic!("{message}"));
        name
    }

    /// Deletes namespace `name` if it exists, waiting up to 2 minutes; a cleanup step, so a
    /// failure is ignored.
    pub fn delete_namespace(&self, name: &str) {
        let _ = self.kubectl_admin(
            &[
                "delete",
                "namespace",
                name,
                "--ignore-not-found",
                "--timeout=120s",
            ],
            None,
        );
    }

    /// Labels namespace `name` to enforce the Pod Security `restricted` profile.
    pub fn enforce_restricted(&self, name: &str) {
        self.kubectl_admin(
            &[
                "label",
                "--overwrite",
                "namespace",
                name,
                "pod-security.kubernetes.io/enforce=restricted",
            ],
            None,
        )
        .unwrap_or_else(|m| panic!("{m}"));
    }

    /// Makes sure namespace `name` exists and holds nothing from an earlier run against the same
    /// control plane: the first call in this process deletes a namespace left over (letting go
    /// of the finalizers no operator is there to remove) and creates it afresh; later calls for
    /// the same name leave it alone.
    pub fn fresh_namespace(&self, name: &str) {
        static PREPARED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
        let mut prepared = PREPARED.lock().unwrap_or_else(|e| e.into_inner());
        if !prepared.insert(name.to_owned()) {
            return;
        }
        if self
            .kubectl_admin(&["get", "namespace", name], None)
            .is_ok()
        {
            for kind in ["boxtables.brighter.dev", "secrets"] {
                let objects = self
                    .kubectl_admin(&["-n", name, "get", kind, "-o", "name"], None)
                    .unwrap_or_default();
                for object in objects.lines() {
                    let _ = self.kubectl_admin(
                        &[
                            "-n",
                            name,
                            "patch",
                            object,
                            "--type=merge",
                            "-p",
                            r#"{"metadata":{"finalizers":null}}"#,
                        ],
                        None,
                    );
                }
            }
            self.kubectl_admin(&["delete", "namespace", name, "--timeout=180s"], None)
                .unwrap_or_else(|message| panic!("{message}"));
        }
        self.kubectl_admin(&["create", "namespace", name], None)
            .unwrap_or_else(|message| panic!("{message}"));
    }

    /// A new token for the operator's ServiceAccount from the TokenRequest API.
    pub fn operator_token(&self) -> OperatorToken {
        self.service_account_token(OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT)
    }

    /// A new token for ServiceAccount `namespace/name` from the TokenRequest API.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> OperatorToken {
        let token = self
            .kubectl_admin(
                &["create", "token", name, "-n", namespace, "--duration=4h"],
                None,
            )
            .unwrap_or_else(|message| panic!("{message}"))
            .trim()
            .to_owned();
        let jti = token_id(&token);
        OperatorToken {
            token,
            jti,
            user: format!("system:serviceaccount:{namespace}:{name}"),
        }
    }

    /// Writes a kubeconfig for `token` to `path`.
    pub fn write_token_kubeconfig(&self, path: &Path, token: &str) {
        std::fs::write(path, self.token_kubeconfig(token)).unwrap();
    }

    /// A kubeconfig for `token`.
    fn token_kubeconfig(&self, token: &str) -> String {
        let ca = self.dir.join("ca.crt");
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: operator\n  user:\n    token: {token}\n\
             contexts:\n- name: test\n  context: {{cluster: test, user: operator}}\n\
             current-context: test\n",
            self.server,
            ca.display()
        )
    }

    /// A client authenticated with `token` (the operator's ServiceAccount).
    pub async fn client_for_token(&self, token: &OperatorToken) -> kube::Client {
        let yaml = self.token_kubeconfig(&token.token);
        let kubeconfig = Kubeconfig::from_yaml(&yaml).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// Every audit event so far.
    pub fn audit_events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Requests made with `token` that RBAC refused, as `verb resource/subresource (URI)`.
    /// (Admission refusals, such as a create in a terminating namespace, are 403s too, but the
    /// authorizer allowed them: only the authorizer's `forbid` decisions count.)
    pub fn forbidden_requests(&self, token: &OperatorToken) -> Vec<String> {
        self.audit_events()
            .iter()
            .filter(|e| {
                token.made(e) && e["annotations"]["authorization.k8s.io/decision"] == "forbid"
            })
            .map(describe)
            .collect()
    }

    /// Like [`ControlPlane::forbidden_requests`], leaving out requests the server received
    /// between `from` and `to` (a restart: a new kube-apiserver can refuse requests until its
    /// RBAC cache has synced).
    pub fn forbidden_requests_outside(
        &self,
        token: &OperatorToken,
        from: jiff::Timestamp,
        to: jiff::Timestamp,
    ) -> Vec<String> {
        self.audit_events()
            .iter()
            .filter(|e| {
                token.made(e) && e["annotations"]["authorization.k8s.io/decision"] == "forbid"
            })
            .filter(|e| {
                let at: Option<jiff::Timestamp> = e["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse().ok());
                !at.is_some_and(|at| from <= at && at <= to)
            })
            .map(describe)
            .collect()
    }

    /// kube-apiserver's current pid.
    pub fn apiserver_pid(&self) -> u32 {
        std::fs::read_to_string(&self.apiserver_pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// A ServiceAccount token and its id (`jti`), which the audit log records with each request.
#[derive(Debug, Clone)]
pub struct OperatorToken {
    pub token: String,
    pub jti: String,
    /// The user name the API server gives the token's ServiceAccount.
    pub user: String,
}

impl OperatorToken {
    /// Whether the audit event `event` is a request made with this token.
    pub fn made(&self, event: &Value) -> bool {
        event["user"]["username"] == self.user.as_str()
            && event["user"]["extra"]["authentication.kubernetes.io/credential-id"]
                .as_array()
                .is_some_and(|ids| {
                    ids.iter()
                        .any(|id| id.as_str() == Some(&format!("JTI={}", self.jti)))
                })
    }
}

/// `verb resource[/subresource] (requestURI) -> code` for an audit event.
pub fn describe(event: &Value) -> String {
    let resource = event["objectRef"]["resource"].as_str().unwrap_or("");
    let sub = event["objectRef"]["subresource"]
        .as_str()
        .map(|s| format!("/{s}"))
        .unwrap_or_default();
    format!(
        "{} {resource}{sub} ({}) -> {}",
        event["verb"].as_str().unwrap_or(""),
        event["requestURI"].as_str().unwrap_or(""),
        event["responseStatus"]["code"]
    )
}

/// The `jti` claim of a JWT.
fn token_id(token: &str) -> String {
    let payload = token.split('.').nth(1).expect("a JWT has three parts");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .expect("the JWT payload is base64url");
    let claims: Value = serde_json::from_slice(&bytes).expect("the JWT payload is JSON");
    claims["jti"]
        .as_str()
        .expect("ServiceAccount tokens carry a jti")
        .to_owned()
}

/// A client for the kubeconfig at `path`.
pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Fails the test if RBAC refused any request made with `token` (called when a fixture ends, so
/// a call the operator makes that `deploy/rbac.yaml` does not allow fails whichever test made it).
pub fn assert_no_forbidden_requests(plane: &ControlPlane, token: &OperatorToken) {
    if std::thread::panicking() {
        return;
    }
    let refused = plane.forbidden_requests(token);
    assert!(
        refused.is_empty(),
        "deploy/rbac.yaml does not allow calls the operator made:\n{}",
        refused.join("\n")
    );
}
