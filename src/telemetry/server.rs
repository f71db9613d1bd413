//! The HTTP server for `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{Metrics, TelemetryError};

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
}

/// A bound, not yet serving, metrics and health server (bind on port 0 and read the port).
#[derive(Debug)]
pub struct TelemetryServer {
    listener: TcpListener,
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
        Ok(Self { listener })
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
    /// [`TelemetryError::Serve`] when the server fails.
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
            .with_state(AppState { metrics, readiness });
        axum::serve(self.listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .map_err(TelemetryError::Serve)
    }
}

async fn metrics_handler(State(state): State<AppState>) -> Response {
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
