//! The command line: the commands, their arguments and the parsers that validate them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use boxtable_operator::duration;
use clap::{Parser, Subcommand};
use zeroize::Zeroizing;

/// Provisions Brighter outbox and inbox tables in PostgreSQL from BoxTable resources.
#[derive(Debug, Parser)]
#[command(name = "boxtable-operator", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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
    /// Needs the cargo feature `manifests` (in the default build and the image).
    Migrate(MigrateArgs),
    /// `migrate --dry-run`: print what each run would do and the exact statements it would send.
    Plan(MigrateArgs),
}

#[derive(Debug, Parser)]
#[command(name = "run")]
pub struct RunArgs {
    /// Namespace to watch (repeatable); all namespaces when omitted.
    #[arg(
        long = "namespace",
        short = 'n',
        env = "WATCH_NAMESPACE",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,
    /// BoxTables reconciled at once, in all watched namespaces together; a namespace gets at most
    /// half of them while another namespace has work waiting.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u16,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Serve over HTTPS (a self-signed certificate made at start) and answer /metrics only to
    /// callers whose bearer token a TokenReview accepts and whose user a SubjectAccessReview
    /// allows `get` on the non-resource URL /metrics (401 without a valid token, 403 when not
    /// allowed); /healthz and /readyz stay open. Needs `create` on tokenreviews and
    /// subjectaccessreviews.
    #[arg(long)]
    pub metrics_secure: bool,
    /// Drift-check interval for Ready tables, and retry interval for stalled ones (e.g. 5m).
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    pub resync_interval: Duration,
    /// First retry delay after a transient failure; doubles per failure up to 5m, with jitter.
    #[arg(long, default_value = "5s", value_parser = parse_retry_base)]
    pub retry_backoff: Duration,
    /// Take the coordination.k8s.io Lease `boxtable-operator` before reconciling.
    #[arg(long)]
    pub leader_election: bool,
    /// Namespace of the leader-election Lease (defaults to the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// This replica's identity for events and leader election.
    #[arg(long, env = "POD_NAME")]
    pub instance: Option<String>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    pub log_format: LogFormatArg,
    /// Export a trace of each reconcile pass over OTLP (HTTP, protobuf) to this collector base
    /// URL, e.g. http://otel-collector:4318 (spans go to /v1/traces); off when unset. Needs the
    /// cargo feature `otlp` (in the default build and the image).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Watch and read only the Secrets matching this label selector (e.g.
    /// `brighter.dev/connection=true`); a BoxTable referencing any other Secret is Stalled with
    /// `SecretNotSelected`. Default: every Secret's metadata is watched.
    #[arg(long, env = "SECRET_LABEL_SELECTOR")]
    pub secret_label_selector: Option<String>,
    /// PostgreSQL sessions open at once per database target (connection string and CA bundle);
    /// passes for tables on that database wait for a free one. Sessions are kept between passes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub db_sessions_per_target: u16,
    /// An idle PostgreSQL session unused this long is closed; keep it above --resync-interval so
    /// that a resync finds the sessions of the previous one.
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    pub db_session_idle_timeout: Duration,
    /// Idle PostgreSQL sessions kept across all databases; past it the oldest idle one is closed.
    #[arg(long, default_value_t = 64)]
    pub db_max_idle_sessions: usize,
    /// This cluster's name in the ownership records written into table comments: with the
    /// BoxTable's namespace and name it is the owner's identity, so a BoxTable re-created,
    /// restored (also into a new cluster given the same name) or re-installed takes its table back.
    /// Give every cluster whose operators share a database a name of its own.
    #[arg(long, env = "BOXTABLE_CLUSTER_NAME", default_value = "default", value_parser = parse_cluster_name)]
    pub cluster_name: String,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormatArg {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    /// A lockKey taken verbatim, e.g. BrighterMigration_public.outbox.
    #[arg(conflicts_with_all = ["schema", "table"], required_unless_present = "table")]
    pub lock_key: Option<String>,
    /// The box table's schema (lowercased like Brighter does).
    #[arg(long, requires = "table")]
    pub schema: Option<String>,
    /// The box table's name (lowercased like Brighter does).
    #[arg(long)]
    pub table: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// BoxTable manifests: files or directories (repeatable). Other kinds are skipped.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// The database for every table (URL, libpq keywords or Npgsql form). Without it, each
    /// BoxTable's Secret must be among the files. Its sslrootcert, sslcert and sslkey name files.
    #[arg(long, conflicts_with_all = ["database_url_from_env", "database_url_file"], value_parser = parse_secret)]
    pub database_url: Option<SecretArg>,
    /// Read --database-url from this file (for example a Secret key mounted as a file); trailing
    /// whitespace is ignored, and the file's content is never printed.
    #[arg(long, value_name = "FILE", conflicts_with = "database_url_from_env")]
    pub database_url_file: Option<PathBuf>,
    /// Use the DATABASE_URL environment variable as --database-url (it is ignored otherwise).
    #[arg(long)]
    pub database_url_from_env: bool,
    /// A CA bundle (PEM) to verify the server with (sslmode verify-ca / verify-full).
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Tables handled at once.
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Read the database without taking the lock and print what a run would do.
    #[arg(long)]
    pub dry_run: bool,
    /// Output: a summary table (and a plan's statements), or every result as YAML or JSON.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputArg::Text)]
    pub output: OutputArg,
    /// Log format (logs go to stderr).
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    pub log_format: LogFormatArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputArg {
    Text,
    Yaml,
    Json,
}

/// A command-line value that may hold a password: `Debug` shows `***`, and it is zeroed when
/// dropped.
#[derive(Clone)]
#[cfg_attr(not(feature = "manifests"), allow(dead_code))]
pub struct SecretArg(Zeroizing<String>);

#[cfg_attr(not(feature = "manifests"), allow(dead_code))]
impl SecretArg {
    /// The value itself, for the code that uses it (never for printing).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

fn parse_secret(text: &str) -> Result<SecretArg, String> {
    Ok(SecretArg(Zeroizing::new(text.to_owned())))
}

pub fn parse_interval(text: &str) -> Result<Duration, String> {
    match duration::parse_duration(text) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(d),
        Ok(_) => Err("must be at least 1s".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// A cluster name: 1 to 63 lowercase letters, digits, `-` and `.`, starting and ending with a
/// letter or digit (it is written into table comments, one word among others).
pub fn parse_cluster_name(text: &str) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if (1..=63).contains(&text.len())
        && text.chars().all(allowed)
        && edge(text.chars().next())
        && edge(text.chars().last())
    {
        Ok(text.to_owned())
    } else {
        Err("must be 1 to 63 lowercase letters, digits, '-' or '.', starting and ending with a letter or digit (for example prod-eu-1)".to_owned())
    }
}

pub fn parse_retry_base(text: &str) -> Result<Duration, String> {
    match duration::parse_duration(text) {
        Ok(d) if d >= Duration::from_millis(10) => Ok(d),
        Ok(_) => Err("must be at least 10ms".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parsed_command_line_never_shows_the_database_url() {
        let cli = Cli::try_parse_from([
            "boxtable-operator",
            "migrate",
            "-f",
            "x.yaml",
            "--database-url",
            "postgres://app:Kn0wn-Pa55word@db/shop",
        ])
        .unwrap();
        let shown = format!("{cli:?} {cli:#?}");
        assert!(!shown.contains("Kn0wn-Pa55word"), "{shown}");
        let Some(Command::Migrate(args)) = &cli.command else {
            panic!("not migrate: {shown}");
        };
        assert_eq!(
            args.database_url.as_ref().map(SecretArg::expose),
            Some("postgres://app:Kn0wn-Pa55word@db/shop")
        );
    }
}
