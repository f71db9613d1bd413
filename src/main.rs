//! The `boxtable-operator` binary: the command line and wiring. The only place that prints and exits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use boxtable_operator::controller::{self, Settings};
use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use boxtable_operator::telemetry::{self, LogFormat, Metrics, Readiness, TelemetryServer};
use boxtable_operator::{crd, duration, job, manifests, report};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

/// Provisions Brighter outbox and inbox tables in PostgreSQL from BoxTable resources.
#[derive(Debug, Parser)]
#[command(name = "boxtable-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller (the default).
    Run(RunArgs),
    /// Print the BoxTable CustomResourceDefinition as YAML.
    Crd,
    /// Print the lock identity of a box table: lockKey, key, hex, pg_locks classid/objid and a
    /// query that shows the lock's holder.
    Key(KeyArgs),
    /// Apply BoxTable manifests straight to a database, without a cluster; prints each status as
    /// YAML and exits 0 only if every table is Ready.
    Migrate(MigrateArgs),
}

#[derive(Debug, Parser)]
#[command(name = "run")]
struct RunArgs {
    /// Namespace to watch (repeatable); all namespaces when omitted.
    #[arg(
        long = "namespace",
        short = 'n',
        env = "WATCH_NAMESPACE",
        value_delimiter = ','
    )]
    namespaces: Vec<String>,
    /// BoxTables reconciled at once.
    #[arg(long, default_value_t = 4)]
    concurrency: u16,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Drift-check interval for Ready tables, and retry interval for stalled ones (e.g. 5m).
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    resync_interval: Duration,
    /// First retry delay after a transient failure; doubles per failure up to 5m, with jitter.
    #[arg(long, default_value = "5s", value_parser = parse_retry_base)]
    retry_backoff: Duration,
    /// Take the coordination.k8s.io Lease `boxtable-operator` before reconciling.
    #[arg(long)]
    leader_election: bool,
    /// Namespace of the leader-election Lease (defaults to the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// This replica's identity for events and leader election.
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    log_format: LogFormatArg,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
struct KeyArgs {
    /// A lockKey taken verbatim, e.g. BrighterMigration_public.outbox.
    #[arg(conflicts_with_all = ["schema", "table"], required_unless_present = "table")]
    lock_key: Option<String>,
    /// The box table's schema (lowercased like Brighter does).
    #[arg(long, requires = "table")]
    schema: Option<String>,
    /// The box table's name (lowercased like Brighter does).
    #[arg(long)]
    table: Option<String>,
}

#[derive(Debug, clap::Args)]
struct MigrateArgs {
    /// BoxTable manifests: files or directories (repeatable). Other kinds are skipped.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
    /// The database for every table (URL, libpq keywords or Npgsql form). Without it, each
    /// BoxTable's Secret must be among the files.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// A CA bundle (PEM) to verify the server with (sslmode verify-ca / verify-full).
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Tables migrated at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Log format (logs go to stderr; statuses to stdout).
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    log_format: LogFormatArg,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    match duration::parse_duration(text) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(d),
        Ok(_) => Err("must be at least 1s".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_retry_base(text: &str) -> Result<Duration, String> {
    match duration::parse_duration(text) {
        Ok(d) if d >= Duration::from_millis(10) => Ok(d),
        Ok(_) => Err("must be at least 10ms".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Key(args)) => key(&args),
        Some(Command::Crd) => print_crd(),
        Some(Command::Migrate(args)) => {
            block_on(tokio::runtime::Builder::new_current_thread(), migrate(args))
        }
        Some(Command::Run(args)) => {
            block_on(tokio::runtime::Builder::new_multi_thread(), run(args))
        }
        None => block_on(
            tokio::runtime::Builder::new_multi_thread(),
            run(RunArgs::parse_from(["boxtable-operator"])),
        ),
    }
}

/// Runs `work` on a runtime from `builder`; the controller uses several threads, while the
/// one-shot `migrate` command does a few sessions' worth of I/O and answers each round trip
/// sooner on one thread.
fn block_on(
    mut builder: tokio::runtime::Builder,
    work: impl std::future::Future<Output = ExitCode>,
) -> ExitCode {
    match builder.enable_all().build() {
        Ok(runtime) => runtime.block_on(work),
        Err(error) => {
            eprintln!("boxtable-operator: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormatArg) -> bool {
    let format = match format {
        LogFormatArg::Text => LogFormat::Text,
        LogFormatArg::Json => LogFormat::Json,
    };
    match telemetry::init_logging(format) {
        Ok(()) => true,
        Err(error) => {
            eprintln!("boxtable-operator: {}", report::chain(&error));
            false
        }
    }
}

/// Cancels `token` on SIGTERM or Ctrl-C.
fn cancel_on_signal(token: CancellationToken) {
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

async fn run(args: RunArgs) -> ExitCode {
    if !init_logging(args.log_format) {
        return ExitCode::FAILURE;
    }
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
    let serving = tokio::spawn(server.serve(metrics.clone(), readiness.clone(), shutdown.clone()));
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(error = %report::chain(&error), "cannot create a Kubernetes client (in-cluster config or KUBECONFIG)");
            return ExitCode::FAILURE;
        }
    };
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
    };
    tracing::info!(
        namespaces = ?settings.namespaces,
        concurrency = settings.concurrency,
        resync = ?settings.resync,
        leader_election = settings.leader_election_namespace.is_some(),
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

async fn migrate(args: MigrateArgs) -> ExitCode {
    if !init_logging(args.log_format) {
        return ExitCode::FAILURE;
    }
    let found = match manifests::read(&args.files) {
        Ok(found) => found,
        Err(error) => {
            eprintln!("boxtable-operator migrate: {}", report::chain(&error));
            return ExitCode::from(2);
        }
    };
    for skipped in &found.skipped {
        eprintln!("boxtable-operator migrate: skipped {skipped}");
    }
    if found.boxtables.is_empty() {
        eprintln!("boxtable-operator migrate: no BoxTable manifests in the given files");
        return ExitCode::from(2);
    }
    let ca_pem = match &args.ca_file {
        Some(path) => match std::fs::read(path) {
            Ok(pem) => Some(pem),
            Err(error) => {
                eprintln!(
                    "boxtable-operator migrate: cannot read {}: {error}",
                    path.display()
                );
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let cancel = CancellationToken::new();
    cancel_on_signal(cancel.clone());
    let options = job::Options {
        database_url: args.database_url,
        ca_pem,
        concurrency: args.concurrency,
    };
    let reports = job::run(&found, &options, &cancel).await;
    let mut all_ready = true;
    for report_doc in &reports {
        all_ready &= report_doc.is_ready();
        match serde_saphyr::to_string(report_doc) {
            Ok(text) => print!("---\n{text}"),
            Err(error) => {
                eprintln!("boxtable-operator migrate: cannot print status: {error}");
                all_ready = false;
            }
        }
    }
    if all_ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_crd() -> ExitCode {
    match crd::crd_yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("boxtable-operator crd: {}", report::chain(&error));
            ExitCode::FAILURE
        }
    }
}

fn key(args: &KeyArgs) -> ExitCode {
    let identity = match (&args.lock_key, &args.table) {
        (Some(lock_key), _) => LockIdentity::from_lock_key(lock_key),
        (None, Some(table)) => match QualifiedName::parse(args.schema.as_deref(), table) {
            Ok(name) => LockIdentity::for_table(&name),
            Err(error) => {
                eprintln!("boxtable-operator key: {error}");
                return ExitCode::from(2);
            }
        },
        (None, None) => {
            eprintln!("boxtable-operator key: give a lockKey or --table");
            return ExitCode::from(2);
        }
    };
    println!("lockKey:  {}", identity.lock_key());
    println!("key:      {}", identity.key());
    println!("keyHex:   {}", identity.key_hex());
    println!("classid:  {}", identity.classid());
    println!("objid:    {}", identity.objid());
    println!("objsubid: 1");
    println!();
    println!("-- who holds this lock (run in the box table's database):");
    println!("{}", identity.holder_query());
    ExitCode::SUCCESS
}
