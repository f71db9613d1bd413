//! A fault-injecting HTTP proxy in front of a Kubernetes API server, for tests of behaviour under
//! API-server trouble. It listens on plain HTTP on 127.0.0.1 and forwards every request through a
//! `kube::Client` for the upstream (the local API server or a real kube-apiserver: the client
//! carries the upstream's TLS and credentials, and the proxy drops any `Authorization` header it
//! is sent). Rules, checked in the order they were added, answer matching requests with an error
//! status, hold them for a while (then forward them or answer an error), cut watch streams, or
//! only count them; each rule has its own hit counter, and the proxy counts every request it
//! received and keeps a log of them (path, query and `Accept` header, so a test can tell
//! a metadata-only list or watch from one of full objects). `drop_watches` ends every open watch.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What a rule does with a request it matches.
#[derive(Debug, Clone)]
enum Action {
    /// Answer with this status and a Kubernetes `Status` body; the upstream never sees it.
    Status(u16),
    /// Hold the request for the duration, then forward it (`then: None`) or answer the status.
    Stall { hold: Duration, then: Option<u16> },
    /// Forward, but end the response body right after its headers (a watch cut at once).
    DropWatch,
    /// Forward unchanged; only the rule's counter moves.
    Count,
}

/// A fault to inject: what it matches and what it does. Build with [`Rule::status`],
/// [`Rule::stall`], [`Rule::drop_watch`] or [`Rule::count`], narrow with the filters.
#[derive(Debug, Clone)]
pub struct Rule {
    action: Action,
    method: Option<Method>,
    path_contains: Option<String>,
    path_prefix: Option<String>,
    watch: Option<bool>,
    times: Option<u64>,
    during: Option<Duration>,
}

impl Rule {
    fn new(action: Action) -> Self {
        Self {
            action,
            method: None,
            path_contains: None,
            path_prefix: None,
            watch: None,
            times: None,
            during: None,
        }
    }

    /// Answers matching requests with `code` (503, 429, 500, ...).
    pub fn status(code: u16) -> Self {
        Self::new(Action::Status(code))
    }

    /// Holds matching requests for `hold`, then forwards them.
    pub fn stall(hold: Duration) -> Self {
        Self::new(Action::Stall { hold, then: None })
    }

    /// After the stall, answers `code` instead of forwarding (an API server that timed out).
    pub fn then_status(mut self, code: u16) -> Self {
        if let Action::Stall { then, .. } = &mut self.action {
            *then = Some(code);
        }
        self
    }

    /// Forwards matching requests but ends their response body at once.
    pub fn drop_watch() -> Self {
        Self::new(Action::DropWatch).watch(true)
    }

    /// Forwards matching requests unchanged and counts them.
    pub fn count() -> Self {
        Self::new(Action::Count)
    }

    /// Only requests with this method (`GET`, `PUT`, ...).
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.parse().expect("an HTTP method"));
        self
    }

    /// Only requests whose path contains `fragment`.
    pub fn path_contains(mut self, fragment: &str) -> Self {
        self.path_contains = Some(fragment.to_owned());
        self
    }

    /// Only requests whose path starts with `prefix` (`/apis/brighter.dev`).
    pub fn path_prefix(mut self, prefix: &str) -> Self {
        self.path_prefix = Some(prefix.to_owned());
        self
    }

    /// Only watch requests (`watch=true` or `watch=1`), or only non-watch requests.
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = Some(watch);
        self
    }

    /// At most `n` requests; later ones pass untouched.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    /// Only for `window` from the moment the rule is added.
    pub fn during(mut self, window: Duration) -> Self {
        self.during = Some(window);
        self
    }
}

/// A rule's counter: how many requests it has acted on.
#[derive(Debug, Clone)]
pub struct RuleHandle(Arc<AtomicU64>);

impl RuleHandle {
    /// Requests the rule has acted on so far.
    pub fn hits(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct Installed {
    rule: Rule,
    added: Instant,
    hits: Arc<AtomicU64>,
}

impl Installed {
    /// Claims one use of the rule for this request, if it applies.
    fn claim(&self, method: &Method, path: &str, watching: bool) -> bool {
        let r = &self.rule;
        if r.method.as_ref().is_some_and(|m| m != method)
            || r.path_contains
                .as_deref()
                .is_some_and(|p| !path.contains(p))
            || r.path_prefix
                .as_deref()
                .is_some_and(|p| !path.starts_with(p))
            || r.watch.is_some_and(|w| w != watching)
            || r.during.is_some_and(|d| self.added.elapsed() >= d)
        {
            return false;
        }
        let limit = r.times.unwrap_or(u64::MAX);
        self.hits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }
}

/// One request as the proxy received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The path, without the query.
    pub path: String,
    /// The query string (empty when there is none).
    pub query: String,
    /// The `Accept` header (empty when there is none).
    pub accept: String,
}

impl Seen {
    /// Whether this is a watch request.
    pub fn is_watch(&self) -> bool {
        is_watch(Some(&self.query))
    }

    /// Whether the client asked for metadata only (`PartialObjectMetadata` or its list).
    pub fn metadata_only(&self) -> bool {
        self.accept.contains("as=PartialObjectMetadata")
    }
}

struct Inner {
    upstream: kube::Client,
    log: Mutex<Vec<Seen>>,
    rules: Mutex<Vec<Installed>>,
    /// Bumped by `drop_watches`; every open watch body ends when it changes.
    generation: watch::Sender<u64>,
    forwarded: AtomicU64,
    received: AtomicU64,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    inner: Arc<Inner>,
    stop: CancellationToken,
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 that forwards to `upstream`.
    pub async fn start(upstream: kube::Client) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let inner = Arc::new(Inner {
            upstream,
            log: Mutex::new(Vec::new()),
            rules: Mutex::new(Vec::new()),
            generation: watch::channel(0).0,
            forwarded: AtomicU64::new(0),
            received: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        FaultProxy { addr, inner, stop }
    }

    /// The proxy's base URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client configuration that talks to the upstream through the proxy.
    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.url().parse().unwrap())
    }

    /// A client that talks to the upstream through the proxy.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).unwrap()
    }

    /// Writes a kubeconfig for the proxy to `path` (for processes such as the operator binary).
    pub fn write_kubeconfig(&self, path: &std::path::Path) {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: {}\n\
             contexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\n\
             current-context: proxy\nusers:\n- name: proxy\n  user: {{}}\n",
            self.url()
        );
        std::fs::write(path, yaml).unwrap();
    }

    /// Adds a rule after the existing ones; returns its counter.
    pub fn add(&self, rule: Rule) -> RuleHandle {
        let hits = Arc::new(AtomicU64::new(0));
        self.inner.rules.lock().unwrap().push(Installed {
            rule,
            added: Instant::now(),
            hits: hits.clone(),
        });
        RuleHandle(hits)
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.inner.rules.lock().unwrap().clear();
    }

    /// Ends every watch stream open now (clients see the stream close and watch again).
    pub fn drop_watches(&self) {
        self.inner.generation.send_modify(|g| *g += 1);
    }

    /// Requests forwarded to the upstream so far (faulted ones excluded).
    pub fn forwarded(&self) -> u64 {
        self.inner.forwarded.load(Ordering::SeqCst)
    }

    /// Requests the proxy has received so far, faulted ones included.
    pub fn received(&self) -> u64 {
        self.inner.received.load(Ordering::SeqCst)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.inner.log.lock().unwrap().clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A Kubernetes `Status` response for an injected failure.
fn status_response(code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let reason = match code {
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{code} injected by the test's fault proxy"),
        "reason": reason,
        "code": code,
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if code == 429 {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

async fn handle(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let watching = is_watch(request.uri().query());
    // Taken before the request is counted by any rule: a `drop_watches` after that point (even
    // while the upstream is still answering) cuts this watch too, so a test that saw the watch
    // counted and then dropped watches never leaves it running.
    let generation = inner.generation.subscribe();
    inner.received.fetch_add(1, Ordering::SeqCst);
    inner.log.lock().unwrap().push(Seen {
        path: path.clone(),
        query: request.uri().query().unwrap_or_default().to_owned(),
        accept: request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    });
    let action = inner
        .rules
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.claim(&method, &path, watching))
        .map(|r| r.rule.action.clone());
    match action {
        Some(Action::Status(code)) => status_response(code),
        Some(Action::Stall { hold, then }) => {
            tokio::time::sleep(hold).await;
            match then {
                Some(code) => status_response(code),
                None => forward(&inner, request, watching, false, generation).await,
            }
        }
        Some(Action::DropWatch) => forward(&inner, request, watching, true, generation).await,
        Some(Action::Count) | None => forward(&inner, request, watching, false, generation).await,
    }
}

/// Headers that belong to one hop and are not passed on.
fn hop_by_hop(name: &header::HeaderName) -> bool {
    [
        header::HOST,
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::AUTHORIZATION,
    ]
    .contains(name)
}

async fn forward(
    inner: &Inner,
    request: Request,
    watching: bool,
    cut: bool,
    mut generation: watch::Receiver<u64>,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(_) => return status_response(400),
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let mut upstream = axum::http::Request::builder()
        .method(parts.method)
        .uri(path_and_query);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = upstream.body(kube::client::Body::from(bytes)).unwrap();
    inner.forwarded.fetch_add(1, Ordering::SeqCst);
    let response = match inner.upstream.send(upstream).await {
        Ok(r) => r,
        Err(_) => return status_response(502),
    };
    let (parts, body) = response.into_parts();
    let mut out = Response::builder().status(parts.status);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            out = out.header(name, value);
        }
    }
    let body = if cut {
        Body::empty()
    } else if watching {
        // Ends when `drop_watches` bumps the generation (also if it did while the upstream was
        // still answering).
        let dropped = async move {
            let _ = generation.changed().await;
        };
        Body::from_stream(Body::new(body).into_data_stream().take_until(dropped))
    } else {
        Body::new(body)
    };
    out.body(body).unwrap()
}

/// The fault proxy of a fixture that starts one only when asked: dereferencing it without one
/// fails the test, saying how to ask.
pub struct Faults {
    proxy: Option<FaultProxy>,
    ask: &'static str,
}

impl Faults {
    /// A fixture with the proxy `proxy` between it and the API server.
    pub fn started(proxy: FaultProxy) -> Self {
        Faults {
            proxy: Some(proxy),
            ask: "",
        }
    }

    /// A fixture without a proxy; `ask` says how to start one with it.
    pub fn not_started(ask: &'static str) -> Self {
        Faults { proxy: None, ask }
    }
}

impl std::ops::Deref for Faults {
    type Target = FaultProxy;

    fn deref(&self) -> &Self::Target {
        self.proxy
            .as_ref()
            .unwrap_or_else(|| panic!("fault injection needs {}", self.ask))
    }
}
