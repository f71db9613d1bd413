//! The HTTP server: builder, handle, routing of discovery/OpenAPI/resource/control requests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::to_bytes;
use axum::extract::{Request, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};

use crate::error::{ApiError, Subject};
use crate::faults::{Fault, Faults, Stats};
use crate::handlers::{self, Call};
use crate::request::{self, Query};
use crate::store::{State, lock};
use crate::write::{self, FieldValidation, Owner, WriteCtx};
use crate::{crds, discovery, kubeconfig, openapi};

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CRD file could not be read.
    #[error("reading CRD file {path}")]
    ReadCrd {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A CRD document was refused.
    #[error("loading CRD: {0}")]
    LoadCrd(String),
    /// The listener could not bind.
    #[error("binding 127.0.0.1:{port}")]
    Bind {
        /// Requested port.
        port: u16,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// State shared by every request.
#[derive(Debug)]
pub struct Shared {
    /// Objects, registry and history.
    pub state: Mutex<State>,
    /// Active faults.
    pub faults: Mutex<Faults>,
    /// Request counters.
    pub stats: Mutex<Stats>,
    /// Bumped to close every open watch.
    pub drop_watches: watch::Sender<u64>,
    /// Interval of periodic BOOKMARK events.
    pub bookmark_interval: Duration,
    /// Bound address.
    pub addr: SocketAddr,
}

/// Configures and starts a server. See [`LocalApi::builder`].
#[derive(Debug, Clone)]
pub struct LocalApiBuilder {
    crds: Vec<String>,
    crd_files: Vec<PathBuf>,
    port: u16,
    history_limit: usize,
    bookmark_interval: Duration,
    namespaces: Vec<String>,
}

/// Entry point: `LocalApi::builder().crd_yaml(..).start().await`.
#[derive(Debug, Clone, Copy)]
pub struct LocalApi;

impl LocalApi {
    /// A builder with defaults: random port, 1000 history events, bookmarks every 1 s,
    /// namespaces `default`, `kube-system`, `kube-public`.
    pub fn builder() -> LocalApiBuilder {
        LocalApiBuilder {
            crds: Vec::new(),
            crd_files: Vec::new(),
            port: 0,
            history_limit: 1000,
            bookmark_interval: Duration::from_secs(1),
            namespaces: vec!["default".into(), "kube-system".into(), "kube-public".into()],
        }
    }
}

impl LocalApiBuilder {
    /// Adds CRDs from a YAML file (multi-document allowed).
    pub fn crd_file(mut self, path: impl AsRef<Path>) -> Self {
        self.crd_files.push(path.as_ref().to_path_buf());
        self
    }

    /// Adds CRDs from YAML text.
    pub fn crd_yaml(mut self, yaml: &str) -> Self {
        self.crds.push(yaml.to_string());
        self
    }

    /// Listens on this port instead of a random one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Number of events kept for watch resumption; older positions get 410 Gone.
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Interval between BOOKMARK events on watches that allow them.
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Creates an extra namespace at start.
    pub fn namespace(mut self, name: &str) -> Self {
        self.namespaces.push(name.to_string());
        self
    }

    /// Binds 127.0.0.1, loads CRDs and serves in a background task.
    ///
    /// # Errors
    /// When a CRD cannot be read or loaded, or the port cannot be bound.
    pub async fn start(self) -> Result<LocalApiHandle, Error> {
        let mut state = State::new(self.history_limit);
        let ns_def = state.registry.find("", "v1", "namespaces").cloned();
        if let Some(def) = ns_def {
            for ns in &self.namespaces {
                let ctx = WriteCtx {
                    def: &def,
                    scope: crate::managed::Scope::Main,
                    owner: Owner::Update("localapi".into()),
                    dry_run: false,
                    validation: FieldValidation::Ignore,
                };
                // An already existing namespace is fine.
                let _ = write::create(&mut state, &ctx, None, json!({"metadata": {"name": ns}}));
            }
        }
        let mut yamls = self.crds;
        for path in &self.crd_files {
            yamls.push(
                std::fs::read_to_string(path).map_err(|source| Error::ReadCrd {
                    path: path.clone(),
                    source,
                })?,
            );
        }
        for y in &yamls {
            crds::load_yaml(&mut state, y).map_err(Error::LoadCrd)?;
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .map_err(|source| Error::Bind {
                port: self.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            port: self.port,
            source,
        })?;
        let (drop_watches, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            faults: Mutex::new(Faults::default()),
            stats: Mutex::new(Stats::default()),
            drop_watches,
            bookmark_interval: self.bookmark_interval,
            addr,
        });
        let app = axum::Router::new()
            .fallback(dispatch)
            .with_state(shared.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stop_rx.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "local API server stopped");
            }
        });
        Ok(LocalApiHandle {
            shared,
            stop: Some(stop_tx),
            task: Some(task),
        })
    }
}

/// A running server. Dropping it stops the server.
#[derive(Debug)]
pub struct LocalApiHandle {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl LocalApiHandle {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Writes a kubeconfig for this server (empty user, namespace `default`).
    ///
    /// # Errors
    /// The I/O error when the file cannot be written.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        kubeconfig::write(path.as_ref(), &self.url())
    }

    /// Adds a fault rule.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared.faults).add(fault);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Closes every open watch stream (clients see the connection end and re-watch).
    pub fn drop_watches(&self) {
        self.shared.drop_watches.send_modify(|n| *n += 1);
    }

    /// Forgets the event history, so watches from any earlier resourceVersion get 410 Gone.
    pub fn compact(&self) {
        lock(&self.shared.state).compact();
    }

    /// Total API requests served (control endpoints excluded).
    pub fn request_count(&self) -> u64 {
        lock(&self.shared.stats).total
    }

    /// A snapshot of the request counters.
    pub fn stats(&self) -> Stats {
        lock(&self.shared.stats).clone()
    }

    /// Resets the request counters.
    pub fn reset_stats(&self) {
        *lock(&self.shared.stats) = Stats::default();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.state).rv
    }

    /// Stops serving and waits for the server task to end.
    pub async fn shutdown(mut self) {
        self.drop_watches();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LocalApiHandle {
    fn drop(&mut self) {
        self.shared.drop_watches.send_modify(|n| *n += 1);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A JSON response.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(body: Value) -> Response {
    json_response(StatusCode::OK, &body)
}

fn not_found(path: &str) -> Response {
    ApiError::new(
        404,
        "NotFound",
        format!("the server could not find the requested resource ({path})"),
    )
    .into_response()
}

async fn dispatch(AxState(shared): AxState<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let query: HashMap<String, String> = axum::extract::Query::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let Ok(body) = to_bytes(body, 64 * 1024 * 1024).await else {
        return ApiError::bad_request("request body too large or unreadable").into_response();
    };
    if let Some(ctl) = path.strip_prefix("/__localapi/") {
        return crate::control::serve(&shared, &parts.method, ctl, &body);
    }
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => ("", "", &[]),
    };
    let target = if rest.is_empty() {
        None
    } else {
        request::resolve(&lock(&shared.state).registry, group, version, rest)
    };
    let verb = target.as_ref().map(|t| {
        let v = match (parts.method.as_str(), t.name.is_some()) {
            ("GET", false)
                if matches!(query.get("watch").map(String::as_str), Some("1" | "true")) =>
            {
                "watch"
            }
            ("GET", false) => "list",
            ("GET", true) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", false) => "deletecollection",
            ("DELETE", true) => "delete",
            (m, _) => m,
        };
        let sub = t.sub.as_ref().map(|s| format!("/{s}")).unwrap_or_default();
        format!("{v} {}{sub}", t.def.plural)
    });
    lock(&shared.stats).record(parts.method.as_str(), &path, verb);
    let decision = lock(&shared.faults).decide(parts.method.as_str(), &path);
    if decision.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(decision.latency_ms)).await;
    }
    if let Some((code, msg)) = decision.fail {
        return ApiError::for_code(code, msg).into_response();
    }
    if let Some(target) = target {
        let call = Call {
            method: &parts.method,
            target,
            query: Query(query),
            headers: &parts.headers,
            body,
        };
        return handlers::serve(&shared, call).await;
    }
    let state = lock(&shared.state);
    let reg = &state.registry;
    match segs.as_slice() {
        ["version"] => ok(discovery::version()),
        ["healthz" | "readyz" | "livez"] => (StatusCode::OK, "ok").into_response(),
        ["api"] => ok(discovery::core_versions(&shared.addr.to_string())),
        ["apis"] => ok(discovery::group_list(reg)),
        ["api", v] => discovery::resource_list(reg, "", v)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["apis", g] => discovery::group(reg, g)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["apis", g, v] => discovery::resource_list(reg, g, v)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["openapi", "v3"] => ok(openapi::index(reg)),
        ["openapi", "v3", "api", v] => openapi::gv_document(reg, "", v)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["openapi", "v3", "apis", g, v] => openapi::gv_document(reg, g, v)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["api", _, ..] | ["apis", _, _, ..] => {
            let plural = rest
                .get(if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
                    2
                } else {
                    0
                })
                .copied()
                .unwrap_or_default();
            ApiError::not_found(Subject {
                group,
                plural,
                kind: plural,
                name: rest.last().copied().unwrap_or_default(),
            })
            .into_response()
        }
        _ => not_found(&path),
    }
}
