//! The HTTP server for `/metrics`, `/healthz` and `/readyz`: plain HTTP and open to all by
//! default; [secured](TelemetryServer::secure), HTTPS with `/metrics` only for authorised callers
//! (the health endpoints stay open: the kubelet's probes carry no token). Connections are held to
//! [`LIMITS`](super::LIMITS) either way.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::access::{MetricsAccess, Verdict};
use super::{Metrics, TelemetryError, connections, tls};
use crate::report;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether the controller's caches are synced; `/readyz` answers 503 until [`Readiness::set_ready`].
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// A flag that starts not ready.
    pub fn new() -> Self {
        Self::default()
    }
    /// Marks the process ready.
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }
    /// Marks the process not ready (for example while shutting down).
    pub fn set_not_ready(&self) {
        self.0.store(false, Ordering::Release);
    }
    /// Whether the process is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
    access: Option<Arc<MetricsAccess>>,
}

/// A bound, not yet serving, metrics and health server (bind on port 0 and read the port).
pub struct TelemetryServer {
    listener: TcpListener,
    secured: Option<Secured>,
}

/// What a secured server adds: its TLS and the check of `/metrics` callers.
struct Secured {
    tls: TlsAcceptor,
    access: Arc<MetricsAccess>,
}

impl std::fmt::Debug for TelemetryServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryServer")
            .field("listener", &self.listener)
            .field("secured", &self.secured.is_some())
            .finish()
    }
}

impl TelemetryServer {
    /// Binds `addr`.
    ///
    /// # Errors
    /// [`TelemetryError::Bind`] when the address is taken or not allowed.
    pub async fn bind(addr: SocketAddr) -> Result<Self, TelemetryError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| TelemetryError::Bind { addr, source })?;
        Ok(Self {
            listener,
            secured: None,
        })
    }

    /// Secures the server: HTTPS with a self-signed certificate made now, and `/metrics` only for
    /// callers whose bearer token a TokenReview accepts and whose user a SubjectAccessReview
    /// allows `get` on the non-resource URL `/metrics` (asked with `client`); `/healthz` and
    /// `/readyz` stay open.
    ///
    /// # Errors
    /// [`TelemetryError::Certificate`] when the certificate cannot be made.
    pub fn secure(self, client: kube::Client) -> Result<Self, TelemetryError> {
        Ok(Self {
            secured: Some(Secured {
                tls: tls::self_signed()?,
                access: Arc::new(MetricsAccess::new(client)),
            }),
            ..self
        })
    }

    /// `https` when secured, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.secured.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The bound address (the real port when bound to port 0).
    ///
    /// # Errors
    /// [`TelemetryError::Serve`] if the socket cannot report its address.
    pub fn local_addr(&self) -> Result<SocketAddr, TelemetryError> {
        self.listener.local_addr().map_err(TelemetryError::Serve)
    }

    /// Serves until `shutdown` is cancelled, then finishes in-flight requests and returns.
    ///
    /// # Errors
    /// None once bound: a failed accept is logged and retried (the `Result` leaves room for
    /// errors a future listener may report).
    pub async fn serve(
        self,
        metrics: Arc<Metrics>,
        readiness: Readiness,
        shutdown: CancellationToken,
    ) -> Result<(), TelemetryError> {
        let app = Router::new()
            .route("/metrics", get(metrics_handler))
            .route("/healthz", get(|| async { (StatusCode::OK, "ok\n") }))
            .route("/readyz", get(ready_handler))
            .with_state(AppState {
                metrics,
                readiness,
                access: self.secured.as_ref().map(|s| s.access.clone()),
            });
        let tls = self.secured.map(|s| s.tls);
        connections::serve(self.listener, tls, app, super::LIMITS, shutdown).await;
        Ok(())
    }
}

async fn metrics_handler(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(access) = &state.access {
        match access.check(&headers).await {
            Ok(Verdict::Allowed) => {}
            Ok(Verdict::Unauthenticated) => {
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    "a bearer token the API server accepts is required\n",
                )
                    .into_response();
            }
            Ok(Verdict::Forbidden) => {
                return (
                    StatusCode::FORBIDDEN,
                    "the token's user may not get /metrics\n",
                )
                    .into_response();
            }
            Err(error) => {
                tracing::warn!(error = %report::chain(&error), "cannot check a metrics caller");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "5")],
                    "the caller's token cannot be checked now\n",
                )
                    .into_response();
            }
        }
    }
    match state.metrics.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding metrics failed\n",
        )
            .into_response(),
    }
}

async fn ready_handler(State(state): State<AppState>) -> Response {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}
