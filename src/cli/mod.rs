//! The commands of the `boxtable-operator` binary: the command line ([`args`]) and each
//! command's body; what they share (logging, cancelling on a signal) is here, and all printing is
//! in [`output`].

pub mod args;
pub mod crd;
pub mod features;
pub mod key;
#[cfg(feature = "manifests")]
pub mod migrate;
pub mod output;
pub mod run;

use boxtable_operator::report;
use boxtable_operator::telemetry::{self, LogFormat};
use tokio_util::sync::CancellationToken;

use args::LogFormatArg;
use output::note;

/// Starts logging in `format`; on failure prints why and returns false.
#[cfg(feature = "manifests")]
pub fn init_logging(format: LogFormatArg) -> bool {
    init_logging_with(format, None)
}

/// Starts logging in `format`, with spans exported through `spans` when given; on failure
/// prints why and returns false.
pub fn init_logging_with(format: LogFormatArg, spans: Option<&telemetry::SpanExport>) -> bool {
    let format = match format {
        LogFormatArg::Text => LogFormat::Text,
        LogFormatArg::Json => LogFormat::Json,
    };
    match telemetry::init_logging_with(format, spans) {
        Ok(()) => true,
        Err(error) => {
            note!("boxtable-operator: {}", report::chain(&error));
            false
        }
    }
}

/// Cancels `token` on SIGTERM or Ctrl-C.
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
        tracing::info!(
            "shutdown requested; abandoning lock waits and rolling back running migrations"
        );
        token.cancel();
    });
}
