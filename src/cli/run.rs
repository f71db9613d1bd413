//! The `run` command: the controller, its telemetry server and the trace export.

use std::process::ExitCode;
use std::sync::Arc;

use boxtable_operator::controller::{self, Settings};
use boxtable_operator::report;
use boxtable_operator::telemetry::{self, Metrics, Readiness, TelemetryServer};
use tokio_util::sync::CancellationToken;

use super::args::RunArgs;
use super::output::note;
use super::{cancel_on_signal, init_logging_with};

/// The `run` command (the default): the controller, with metrics and health served, until a
/// signal stops it.
pub async fn execute(args: RunArgs) -> ExitCode {
    let spans = match args
        .otlp_endpoint
        .as_deref()
        .map(telemetry::SpanExport::start)
    {
        None => None,
        Some(Ok(spans)) => Some(spans),
        Some(Err(error)) => {
            note!("boxtable-operator: {}", report::chain(&error));
            return ExitCode::FAILURE;
        }
    };
    if !init_logging_with(args.log_format, spans.as_ref()) {
        return ExitCode::FAILURE;
    }
    if let Some(endpoint) = &args.otlp_endpoint {
        tracing::info!(endpoint = %endpoint, "exporting a trace of each reconcile pass over OTLP");
    }
    let code = run_controller(args).await;
    if let Some(spans) = spans {
        // The last spans are sent before the process exits.
        match tokio::task::spawn_blocking(move || spans.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(error = %report::chain(&error), "sending the last spans failed")
            }
            Err(_) => tracing::warn!("sending the last spans failed"),
        }
    }
    code
}

async fn run_controller(args: RunArgs) -> ExitCode {
    let shutdown = CancellationToken::new();
    cancel_on_signal(shutdown.clone());
    let metrics = Arc::new(Metrics::new());
    let readiness = Readiness::new();
    let server = match TelemetryServer::bind(args.metrics_addr).await {
        Ok(server) => server,
        Err(error) => {
            tracing::error!(error = %report::chain(&error), "cannot serve metrics and health");
            return ExitCode::FAILURE;
        }
    };
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(error = %report::chain(&error), "cannot create a Kubernetes client (in-cluster config or KUBECONFIG)");
            return ExitCode::FAILURE;
        }
    };
    let server = match secure_metrics(server, &client, args.metrics_secure) {
        Some(server) => server,
        None => return ExitCode::FAILURE,
    };
    match server.local_addr() {
        Ok(addr) => {
            let scheme = server.scheme();
            tracing::info!(address = %addr, secure = args.metrics_secure, "serving /metrics, /healthz and /readyz on {scheme}://{addr}")
        }
        Err(error) => {
            tracing::warn!(error = %report::chain(&error), "the metrics address is unknown")
        }
    }
    let serving = tokio::spawn(server.serve(metrics.clone(), readiness.clone(), shutdown.clone()));
    let instance = args
        .instance
        .clone()
        .unwrap_or_else(|| format!("boxtable-operator-{}", std::process::id()));
    let settings = Settings {
        namespaces: args.namespaces.clone(),
        concurrency: args.concurrency.max(1),
        resync: args.resync_interval,
        retry_base: args.retry_backoff,
        instance,
        leader_election_namespace: args.leader_election.then(|| {
            args.leader_election_namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned())
        }),
        leader_timing: controller::leader::Timing::default(),
        secret_label_selector: args.secret_label_selector.clone().filter(|s| !s.is_empty()),
        sessions: boxtable_operator::db::PoolSettings {
            per_target: usize::from(args.db_sessions_per_target),
            idle_timeout: args.db_session_idle_timeout,
            max_idle: args.db_max_idle_sessions,
        },
        cluster_name: args.cluster_name.clone(),
    };
    tracing::info!(
        namespaces = ?settings.namespaces,
        concurrency = settings.concurrency,
        resync = ?settings.resync,
        db_sessions_per_target = settings.sessions.per_target,
        leader_election = settings.leader_election_namespace.is_some(),
        cluster_name = %settings.cluster_name,
        "starting controller"
    );
    let result = controller::run(client, settings, metrics, readiness, shutdown.clone()).await;
    shutdown.cancel();
    let _ = serving.await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %report::chain(&error), "controller stopped");
            ExitCode::FAILURE
        }
    }
}

/// With `--metrics-secure`, the server secured (HTTPS, `/metrics` for authorised callers only,
/// checked with `client`); `None` after logging why it cannot be.
fn secure_metrics(
    server: TelemetryServer,
    client: &kube::Client,
    secure: bool,
) -> Option<TelemetryServer> {
    if !secure {
        return Some(server);
    }
    match server.secure(client.clone()) {
        Ok(server) => Some(server),
        Err(error) => {
            tracing::error!(error = %report::chain(&error), "cannot secure the metrics server");
            None
        }
    }
}
