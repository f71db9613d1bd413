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
use boxtable_operator::{crd, duration, manifests, report};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

mod cli;

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
    /// Apply BoxTable manifests straight to a database, without a cluster, checked as strictly
    /// as kubectl and the CRD check them. Prints a summary; exit code 0 when every table is at
    /// its target, 2 when changes are pending (a plan, or a suspended table), 1 on any error.
    Migrate(MigrateArgs),
    /// `migrate --dry-run`: print what each run would do and the exact statements it would send.
    Plan(MigrateArgs),
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
    /// Export a trace of each reconcile pass over OTLP (HTTP, protobuf) to this collector base
    /// URL, e.g. http://otel-collector:4318 (spans go to /v1/traces); off when unset.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Watch and read only the Secrets matching this label selector (e.g.
    /// `brighter.dev/connection=true`); a BoxTable referencing any other Secret is Stalled with
    /// `SecretNotSelected`. Default: every Secret's metadata is watched.
    #[arg(long, env = "SECRET_LABEL_SELECTOR")]
    secret_label_selector: Option<String>,
    /// PostgreSQL sessions open at once per database target (connection string and CA bundle);
    /// passes for tables on that database wait for a free one. Sessions are kept between passes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    db_sessions_per_target: u16,
    /// An idle PostgreSQL session unused this long is closed; keep it above --resync-interval so
    /// that a resync finds the sessions of the previous one.
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    db_session_idle_timeout: Duration,
    /// Idle PostgreSQL sessions kept across all databases; past it the oldest idle one is closed.
    #[arg(long, default_value_t = 64)]
    db_max_idle_sessions: usize,
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
    #[arg(long, conflicts_with_all = ["database_url_from_env", "database_url_file"])]
    database_url: Option<String>,
    /// Read --database-url from this file (for example a Secret key mounted as a file); trailing
    /// whitespace is ignored, and the file's content is never printed.
    #[arg(long, value_name = "FILE", conflicts_with = "database_url_from_env")]
    database_url_file: Option<PathBuf>,
    /// Use the DATABASE_URL environment variable as --database-url (it is ignored otherwise).
    #[arg(long)]
    database_url_from_env: bool,
    /// A CA bundle (PEM) to verify the server with (sslmode verify-ca / verify-full).
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Tables handled at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Read the database without taking the lock and print what a run would do.
    #[arg(long)]
    dry_run: bool,
    /// Output: a summary table (and a plan's statements), or every result as YAML or JSON.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputArg::Text)]
    output: OutputArg,
    /// Log format (logs go to stderr).
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    log_format: LogFormatArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OutputArg {
    Text,
    Yaml,
    Json,
}

/// The environment variable `--database-url-from-env` reads.
const DATABASE_URL_ENV: &str = "DATABASE_URL";

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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version are not errors; a usage error exits 1, never 2, which `plan`
            // reserves for "changes pending".
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Some(Command::Key(args)) => key(&args),
        Some(Command::Crd) => print_crd(),
        Some(Command::Migrate(args)) => {
            block_on(tokio::runtime::Builder::new_current_thread(), migrate(args))
        }
        Some(Command::Plan(mut args)) => {
            args.dry_run = true;
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
    init_logging_with(format, None)
}

fn init_logging_with(format: LogFormatArg, spans: Option<&telemetry::SpanExport>) -> bool {
    let format = match format {
        LogFormatArg::Text => LogFormat::Text,
        LogFormatArg::Json => LogFormat::Json,
    };
    match telemetry::init_logging_with(format, spans) {
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
    let spans = match args
        .otlp_endpoint
        .as_deref()
        .map(telemetry::SpanExport::start)
    {
        None => None,
        Some(Ok(spans)) => Some(spans),
        Some(Err(error)) => {
            eprintln!("boxtable-operator: {}", report::chain(&error));
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
    match server.local_addr() {
        Ok(addr) => {
            tracing::info!(address = %addr, "serving /metrics, /healthz and /readyz on http://{addr}")
        }
        Err(error) => {
            tracing::warn!(error = %report::chain(&error), "the metrics address is unknown")
        }
    }
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
        leader_timing: controller::leader::Timing::default(),
        secret_label_selector: args.secret_label_selector.clone().filter(|s| !s.is_empty()),
        sessions: boxtable_operator::db::PoolSettings {
            per_target: usize::from(args.db_sessions_per_target),
            idle_timeout: args.db_session_idle_timeout,
            max_idle: args.db_max_idle_sessions,
        },
    };
    tracing::info!(
        namespaces = ?settings.namespaces,
        concurrency = settings.concurrency,
        resync = ?settings.resync,
        db_sessions_per_target = settings.sessions.per_target,
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
    const NAME: &str = "boxtable-operator migrate";
    if !init_logging(args.log_format) {
        return ExitCode::FAILURE;
    }
    let env_url = std::env::var(DATABASE_URL_ENV).ok();
    let database_url = if args.database_url_from_env {
        let Some(url) = env_url else {
            eprintln!(
                "{NAME}: --database-url-from-env was given but {DATABASE_URL_ENV} is not set"
            );
            return ExitCode::FAILURE;
        };
        eprintln!(
            "{NAME}: every table uses the database in {DATABASE_URL_ENV} (--database-url-from-env)"
        );
        Some(url)
    } else {
        if env_url.is_some() {
            eprintln!(
                "{NAME}: {DATABASE_URL_ENV} is set in the environment and ignored; pass --database-url-from-env to use it"
            );
        }
        match &args.database_url_file {
            Some(path) => match std::fs::read(path) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) if !text.trim().is_empty() => Some(text.trim_end().to_owned()),
                    Ok(_) => {
                        eprintln!("{NAME}: --database-url-file {} is empty", path.display());
                        return ExitCode::FAILURE;
                    }
                    Err(_) => {
                        eprintln!(
                            "{NAME}: --database-url-file {} is not UTF-8 text",
                            path.display()
                        );
                        return ExitCode::FAILURE;
                    }
                },
                Err(error) => {
                    eprintln!(
                        "{NAME}: reading --database-url-file {} failed: {error}",
                        path.display()
                    );
                    return ExitCode::FAILURE;
                }
            },
            None => args.database_url,
        }
    };
    let found = match manifests::read(&args.files) {
        Ok(found) => found,
        Err(error) => {
            eprintln!("{NAME}: {}", report::chain(&error));
            return ExitCode::FAILURE;
        }
    };
    for skipped in &found.skipped {
        eprintln!("{NAME}: skipped {skipped}");
    }
    for problem in &found.problems {
        eprintln!("{NAME}: error: {problem}");
    }
    if found.boxtables.is_empty() && found.problems.is_empty() {
        eprintln!("{NAME}: no BoxTable manifests in the given files");
        return ExitCode::FAILURE;
    }
    let ca_pem = match &args.ca_file {
        Some(path) => match std::fs::read(path) {
            Ok(pem) => Some(pem),
            Err(error) => {
                eprintln!("{NAME}: cannot read {}: {error}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let cancel = CancellationToken::new();
    cancel_on_signal(cancel.clone());
    let options = cli::migrate::Options {
        database_url,
        ca_pem,
        concurrency: args.concurrency,
        mode: if args.dry_run {
            cli::migrate::Mode::Plan
        } else {
            cli::migrate::Mode::Apply
        },
    };
    let results = cli::migrate::run(&found, &options, &cancel).await;
    let printed = match args.output {
        OutputArg::Text => {
            if args.dry_run {
                print!("{}", cli::migrate::render::plan(&results));
            }
            print!("{}", cli::migrate::render::summary(&results));
            Ok(())
        }
        OutputArg::Yaml => results.iter().try_for_each(|result| {
            serde_saphyr::to_string(result)
                .map(|text| print!("---\n{text}"))
                .map_err(|e| e.to_string())
        }),
        OutputArg::Json => serde_json::to_string_pretty(&results)
            .map(|text| println!("{text}"))
            .map_err(|e| e.to_string()),
    };
    if args.output != OutputArg::Text {
        eprint!("{}", cli::migrate::render::summary(&results));
    }
    if let Err(error) = printed {
        eprintln!("{NAME}: cannot print the results: {error}");
        return ExitCode::FAILURE;
    }
    ExitCode::from(cli::migrate::worst(&results).exit_code())
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
