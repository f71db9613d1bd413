//! Logging, Prometheus metrics and the health endpoints (`/metrics`, `/healthz`, `/readyz`).

mod access;
mod caches;
mod connections;
mod metrics;
mod objects;
#[cfg(feature = "otlp")]
mod otlp;
#[cfg(not(feature = "otlp"))]
#[path = "no_otlp.rs"]
mod otlp;
mod server;
mod tls;

pub use access::{MetricsAccess, Verdict};
pub use caches::{CacheEntries, CacheSource};
pub use connections::{LIMITS, Limits};
pub use metrics::{DropResult, LockOutcome, Metrics, REVISION, ReconcileResult, VERSION};
pub use objects::ObjectSource;
pub use otlp::SpanExport;
pub use server::{Readiness, TelemetryServer};

use std::str::FromStr;
use tracing_subscriber::EnvFilter;

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `RUST_LOG` is not a valid filter.
    #[error("parsing RUST_LOG failed")]
    LogFilter(#[source] tracing_subscriber::filter::ParseError),
    /// A global subscriber was already installed.
    #[error("installing the log subscriber failed")]
    InstallLogger(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The metrics and health address could not be bound.
    #[error("binding the metrics and health server to {addr} failed")]
    Bind {
        /// The requested address.
        addr: std::net::SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The metrics and health server stopped with an error.
    #[error("serving metrics and health failed")]
    Serve(#[source] std::io::Error),
    /// The secured server's self-signed certificate or TLS settings could not be made.
    #[error("making the metrics server's self-signed certificate failed")]
    Certificate(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The TokenReview of a `/metrics` caller's token failed.
    #[error("reviewing a metrics caller's token (TokenReview) failed")]
    TokenReview(#[source] kube::Error),
    /// The SubjectAccessReview of a `/metrics` caller failed.
    #[error("reviewing a metrics caller's access (SubjectAccessReview) failed")]
    AccessReview(#[source] kube::Error),
    /// The API server did not answer a caller's reviews in time.
    #[error("reviewing a metrics caller timed out")]
    ReviewTimeout,
    /// Too many callers' reviews were in flight to start another.
    #[error("too many metrics callers are being reviewed")]
    ReviewsBusy,
    /// An `--otlp-endpoint` that is not an `http://` URL: this build sends spans without TLS.
    #[error(
        "the OTLP endpoint must be an http:// URL (found {found}): this build exports spans over plain HTTP only, without TLS; send them to a collector reachable over http://, such as an agent on the same node"
    )]
    OtlpScheme {
        /// The scheme given, or `no scheme`.
        found: String,
    },
    /// `--otlp-endpoint` given to a binary built without the `otlp` feature.
    #[error(
        "--otlp-endpoint needs the `otlp` feature, and this binary was built without it; build with `--features otlp` (the shipped image has it)"
    )]
    OtlpNotBuilt,
    /// The OTLP span exporter could not be built, or its last export failed.
    #[error("exporting spans over OTLP failed")]
    Otlp(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A `--log-format` value other than `text` or `json`.
    #[error("unknown log format: expected text or json")]
    UnknownLogFormat,
}

/// How log lines are written (to stderr, keeping stdout for command output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = TelemetryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(TelemetryError::UnknownLogFormat),
        }
    }
}

/// The filter when `RUST_LOG` is unset: info, without the driver's per-statement NOTICEs.
pub const DEFAULT_LOG_FILTER: &str = "info,tokio_postgres=warn";

/// The log filter from `RUST_LOG`, else [`DEFAULT_LOG_FILTER`].
///
/// # Errors
/// [`TelemetryError::LogFilter`] when `RUST_LOG` cannot be parsed.
pub fn log_filter() -> Result<EnvFilter, TelemetryError> {
    match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            EnvFilter::try_new(spec).map_err(TelemetryError::LogFilter)
        }
        _ => Ok(EnvFilter::new(DEFAULT_LOG_FILTER)),
    }
}

/// Installs the global log subscriber: `format` lines on stderr, level from `RUST_LOG`
/// (default `info`), coloured only when stderr is a terminal (a log file or collector gets plain
/// text); with `spans`, every span the filter lets through is also exported over OTLP (see
/// [`SpanExport`]).
///
/// # Errors
/// [`TelemetryError::LogFilter`] for a bad `RUST_LOG`; [`TelemetryError::InstallLogger`] when a
/// subscriber is already installed.
pub fn init_logging_with(
    format: LogFormat,
    spans: Option<&SpanExport>,
) -> Result<(), TelemetryError> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = log_filter()?;
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Text => lines.boxed(),
        LogFormat::Json => lines.json().boxed(),
    };
    #[cfg(feature = "otlp")]
    let lines = {
        let export = spans.map(|spans| tracing_opentelemetry::layer().with_tracer(spans.tracer()));
        lines.and_then(export).boxed()
    };
    #[cfg(not(feature = "otlp"))]
    let _ = spans;
    tracing_subscriber::registry()
        .with(lines)
        .with(filter)
        .try_init()
        .map_err(|e| TelemetryError::InstallLogger(Box::new(e)))
}
