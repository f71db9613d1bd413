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
    /// [`TelemetryError::OtlpScheme`] for an endpoint that is not an `http://` URL (this build has
    /// no TLS for OTLP, so `https://` is refused rather than accepted and never sent to);
    /// [`TelemetryError::Otlp`] when the exporter cannot be built (for example an invalid URL).
    pub fn start(endpoint: &str) -> Result<Self, TelemetryError> {
        plain_http(endpoint)?;
        let url = format!("{}{TRACES_PATH}", endpoint.trim_end_matches('/'));
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Otlp(Box::new(e)))?;
        let resource = Resource::builder()
            .with_service_name(crate::crd::CONTROLLER_NAME)
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
        self.provider.tracer(crate::crd::CONTROLLER_NAME)
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

/// Accepts only `http://` endpoints: the exporter's HTTP client is built without TLS, so it
/// would fail every export to an `https://` collector while the operator ran as if all was well.
fn plain_http(endpoint: &str) -> Result<(), TelemetryError> {
    let scheme = endpoint
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http") => Ok(()),
        Some(other) => Err(TelemetryError::OtlpScheme {
            found: format!("{other}://"),
        }),
        None => Err(TelemetryError::OtlpScheme {
            found: "no scheme".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_http_endpoint_is_accepted() {
        assert!(plain_http("http://collector:4318").is_ok());
        assert!(plain_http("HTTP://collector:4318").is_ok());
        for (endpoint, found) in [
            ("https://collector:4318", "https://"),
            ("grpc://collector:4317", "grpc://"),
            ("collector:4318", "no scheme"),
        ] {
            let error = plain_http(endpoint).unwrap_err();
            assert!(
                matches!(&error, TelemetryError::OtlpScheme { found: f } if f == found),
                "{endpoint}: {error:?}"
            );
        }
    }
}
