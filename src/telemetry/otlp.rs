//! Optional OpenTelemetry export of the operator's spans over OTLP (HTTP with protobuf bodies,
//! `--otlp-endpoint`): one trace per reconcile pass, with the Secret read, the lock wait and the
//! migration (or drop) as its child spans.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};

use super::TelemetryError;

/// The OTLP path for spans under the collector's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`).
pub const TRACES_PATH: &str = "/v1/traces";
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Span export to an OTLP collector; shut it down before exit so the last spans are sent.
#[derive(Debug)]
pub struct SpanExport {
    provider: SdkTracerProvider,
}

impl SpanExport {
    /// Exports spans in batches to `endpoint` (a base URL such as `http://collector:4318`;
    /// `/v1/traces` is appended), as service `boxtable-operator` at this build's version.
    ///
    /// # Errors
    /// [`TelemetryError::Otlp`] when the exporter cannot be built (for example an invalid URL).
    pub fn start(endpoint: &str) -> Result<Self, TelemetryError> {
        let url = format!("{}{TRACES_PATH}", endpoint.trim_end_matches('/'));
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Otlp(Box::new(e)))?;
        let resource = Resource::builder()
            .with_service_name(crate::controller::CONTROLLER_NAME)
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                super::VERSION,
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Self { provider })
    }

    /// The tracer the log subscriber's OpenTelemetry layer feeds.
    pub fn tracer(&self) -> Tracer {
        self.provider.tracer(crate::controller::CONTROLLER_NAME)
    }

    /// Sends the spans still queued and stops the exporter. Blocks (run it off the async
    /// runtime's workers, e.g. in `spawn_blocking`).
    ///
    /// # Errors
    /// [`TelemetryError::Otlp`] when the last export failed.
    pub fn shutdown(self) -> Result<(), TelemetryError> {
        self.provider
            .shutdown()
            .map_err(|e| TelemetryError::Otlp(Box::new(e)))
    }
}
