//! Span export in a binary built without the `otlp` feature: there is none, and asking for it
//! (`--otlp-endpoint`) is refused with [`TelemetryError::OtlpNotBuilt`].

use super::TelemetryError;

/// No span export: a binary built without the `otlp` feature has no value of this type.
#[derive(Debug)]
pub enum SpanExport {}

impl SpanExport {
    /// Refuses: this binary cannot export spans.
    ///
    /// # Errors
    /// Always [`TelemetryError::OtlpNotBuilt`].
    pub fn start(_endpoint: &str) -> Result<Self, TelemetryError> {
        Err(TelemetryError::OtlpNotBuilt)
    }

    /// Nothing to send: there is no value to call it on.
    ///
    /// # Errors
    /// Never.
    pub fn shutdown(self) -> Result<(), TelemetryError> {
        match self {}
    }
}
