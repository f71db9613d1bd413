//! The `migrate` command: BoxTable manifests applied straight to a database without a cluster (a
//! Kubernetes Job, a CI step, a laptop), through the same pass the controller uses; or,
//! with `--dry-run`, planned: what each run would do and the exact statements it would send.

mod command;
mod judged;
pub mod render;
mod result;

use std::future::Future;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use zeroize::Zeroizing;

use boxtable_operator::crd::BoxTable;
use boxtable_operator::db::{
    Connection, ConnectionSettings, PoolSettings, RootCert, SessionKey, SessionPool, TlsFiles,
};
use boxtable_operator::manifests::{Document, Problem};
use boxtable_operator::migrate::runner::Withdrawal;
use boxtable_operator::migrate::{Plan, RunPath};
use boxtable_operator::pass::{self, PassError, Target, source};
use boxtable_operator::reason::Reason;
use boxtable_operator::report::chain;
use boxtable_operator::status::{self, Observed};

pub use command::execute;
pub use result::{
    DatabaseTarget, DriftSummary, PlanReport, PlannedStatement, TableResult, Verdict, worst,
};

/// `application_name` of the command's sessions.
pub const APPLICATION_NAME: &str = "boxtable-operator-migrate";

/// Apply the manifests, or only plan them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Bring every table to its target.
    Apply,
    /// Read without the lock and report what a run would do (`--dry-run`, `plan`).
    Plan,
}

/// How the command runs.
pub struct Options {
    /// The database for every table; when `None`, each BoxTable's Secret must be among the files.
    /// Zeroed when dropped.
    pub database_url: Option<Zeroizing<String>>,
    /// A CA bundle (PEM) for verify-ca / verify-full; otherwise the one the connection names
    /// (`sslrootcert`, else `ca.crt` of the Secret among the files it comes from).
    pub ca_pem: Option<Vec<u8>>,
    /// Tables handled at once.
    pub concurrency: usize,
    /// Apply or plan.
    pub mode: Mode,
}

/// The command's sessions: idle ones are kept between tables, so a run over many tables does not
/// pay a connection handshake per table; at most `concurrency` are ever open per database.
pub fn sessions(concurrency: usize) -> SessionPool {
    let concurrency = concurrency.max(1);
    SessionPool::new(PoolSettings {
        per_target: concurrency,
        max_idle: concurrency.max(PoolSettings::default().max_idle),
        ..PoolSettings::default()
    })
}

/// With `--database-url`, opens the first session to it in `sessions` (see
/// [`SessionPool::open_ahead`]), so that connecting overlaps reading and judging the manifests;
/// a failure to connect is then the first table's result, as it would have been. Does nothing
/// when each table's database comes from its Secret, or when the URL is invalid (every table
/// reports that).
///
/// # Cancel safety
/// Dropping the future leaves `sessions` as it was.
pub async fn open_ahead(sessions: &SessionPool, options: &Options) {
    let Some(url) = &options.database_url else {
        return;
    };
    if let Ok(connection) = command_line_connection(url, options.ca_pem.as_deref()) {
        sessions
            .open_ahead(&SessionKey::of(&connection), APPLICATION_NAME)
            .await;
    }
}

/// Handles every decoded BoxTable in `decoded` on `sessions`, `options.concurrency` at a time,
/// each beside its judging (see [`judged`]); the results of the accepted ones, in file order once
/// [`Ran::with`] adds the refused and unreadable documents.
///
/// # Cancel safety
/// Cancelling `cancel` abandons lock waits and cancels running migrations (rolled back, unlocked).
pub async fn run(
    decoded: &judged::Decoded,
    options: &Options,
    sessions: &SessionPool,
    cancel: &CancellationToken,
) -> Ran {
    let concurrency = options.concurrency.max(1);
    let results: Vec<Option<(String, usize, TableResult)>> =
        futures::stream::iter(decoded.documents.iter())
            .map(|(document, accepted)| async move {
                let result = judged::unless_refused(accepted, cancel, |refused| async move {
                    one(
                        document,
                        accepted,
                        &decoded.secrets,
                        options,
                        sessions,
                        &refused,
                    )
                    .await
                })
                .await?;
                Some((
                    document.source.path.display().to_string(),
                    document.source.index,
                    result,
                ))
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
    Ran(results.into_iter().flatten().collect())
}

/// The results of the accepted documents, by file and document.
pub struct Ran(Vec<(String, usize, TableResult)>);

impl Ran {
    /// Every result in file order: these, and one for each document in `problems`.
    pub fn with(self, problems: &[Problem]) -> Vec<TableResult> {
        let mut results = self.0;
        results.extend(problems.iter().map(|problem| {
            (
                problem.source.path.display().to_string(),
                problem.source.index,
                TableResult::invalid(problem),
            )
        }));
        results.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        results.into_iter().map(|(_, _, r)| r).collect()
    }
}

/// Where `bt`'s table lives: the command-line URL (whose `sslrootcert`, `sslcert` and `sslkey`
/// name files, as for `psql`), else its Secret from the files (where they name keys of that
/// Secret); with the CA bundle from `--ca-file` when the connection names none (naming one too
/// is refused).
fn connection(
    bt: &BoxTable,
    secrets: &[Secret],
    options: &Options,
) -> Result<Connection, (Reason, String)> {
    if let Some(url) = &options.database_url {
        return command_line_connection(url, options.ca_pem.as_deref());
    }
    let secret_ref = &bt.spec.database.secret_ref;
    let namespace = bt.namespace();
    let secret = secrets.iter().find(|s| {
        s.name_any() == secret_ref.name && (namespace.is_none() || s.namespace() == namespace)
    });
    let Some(secret) = secret else {
        return Err((
            Reason::SecretNotFound,
            format!(
                "secret {} is not among the files, and no --database-url (or --database-url-from-env) was given",
                secret_ref.name
            ),
        ));
    };
    let connection = source::connection(secret, &bt.spec.database)
        .map_err(|error| (error.reason(), chain(&error)))?;
    match (&options.ca_pem, connection.settings().root_cert()) {
        (Some(_), Some(_)) => Err(both_name_the_ca()),
        (Some(ca_pem), None) => {
            let files = TlsFiles {
                root: Some(ca_pem.clone()),
                ..connection.files().clone()
            };
            Ok(Connection::new(connection.settings().clone(), files))
        }
        (None, _) => Ok(connection),
    }
}

/// `--ca-file` given for a connection whose `sslrootcert` names its own CA bundle.
fn both_name_the_ca() -> (Reason, String) {
    (
        Reason::InvalidConnectionString,
        "--ca-file and sslrootcert both name the CA bundle: give one".to_owned(),
    )
}

/// The connection `--database-url` gives, with the files its `sslrootcert`, `sslcert` and
/// `sslkey` name, or `--ca-file`.
fn command_line_connection(
    url: &str,
    ca_file: Option<&[u8]>,
) -> Result<Connection, (Reason, String)> {
    let invalid = |message: String| (Reason::InvalidConnectionString, message);
    let settings = ConnectionSettings::parse(url)
        .map_err(|error| invalid(format!("invalid connection string: {}", chain(&error))))?;
    let read = |keyword: &str, path: &str| {
        std::fs::read(path).map_err(|error| {
            invalid(format!(
                "{keyword} names file {path}, which cannot be read: {error}"
            ))
        })
    };
    let root = match (settings.root_cert(), ca_file) {
        (Some(_), Some(_)) => return Err(both_name_the_ca()),
        (Some(RootCert::Named(path)), None) => Some(read("sslrootcert", path)?),
        (Some(RootCert::System), None) => None,
        (None, ca_file) => ca_file.map(<[u8]>::to_vec),
    };
    let client_cert = settings
        .client_cert()
        .map(|path| read("sslcert", path))
        .transpose()?;
    let client_key = settings
        .client_key()
        .map(|path| read("sslkey", path).map(Zeroizing::new))
        .transpose()?;
    let files = TlsFiles {
        root,
        client_cert,
        client_key,
    };
    Ok(Connection::new(settings, files))
}

/// Applies or plans one BoxTable; a run changes nothing before `accepted` says yes.
async fn one(
    document: &Document,
    accepted: &judged::Accepted,
    secrets: &[Secret],
    options: &Options,
    sessions: &SessionPool,
    cancel: &CancellationToken,
) -> TableResult {
    let bt = &document.boxtable;
    let plan = pass::plan::plan(&bt.spec);
    let connection = connection(bt, secrets, options);
    let database = connection
        .as_ref()
        .ok()
        .map(|connection| DatabaseTarget::of(connection.settings()));
    let mut result = TableResult {
        source: document.source.to_string(),
        name: bt.name_any(),
        namespace: bt.namespace(),
        table: pass::plan::resolve_table(&bt.spec)
            .ok()
            .map(|t| t.to_string()),
        database,
        result: Verdict::Failed,
        reason: None,
        message: String::new(),
        status: None,
        plan: None,
    };
    let (plan, connection) = match (plan, connection) {
        (Err(error), _) => {
            return failed(
                result,
                options.mode,
                None,
                error.reason(),
                chain(&error),
                bt,
            );
        }
        (Ok(plan), Err((reason, message))) => {
            return failed(result, options.mode, Some(&plan), reason, message, bt);
        }
        (Ok(plan), Ok(connection)) => (plan, connection),
    };
    let target = Target {
        connection: &connection,
        application_name: APPLICATION_NAME,
        source: None,
    };
    match options.mode {
        Mode::Plan => match planned(sessions, &target, &plan, bt.spec.suspend, cancel).await {
            Ok((verdict, reason, message, report)) => {
                result.result = verdict;
                result.reason = reason;
                result.message = message;
                result.plan = Some(report);
                result
            }
            Err(error) => failed(
                result,
                options.mode,
                Some(&plan),
                error.reason(),
                chain(&error),
                bt,
            ),
        },
        Mode::Apply => {
            let gate = || judged::gate(accepted.clone());
            let observed = applying(sessions, &target, &plan, bt.spec.suspend, gate, cancel).await;
            applied(result, &plan, &observed, bt)
        }
    }
}

/// Runs one table (or, suspended, looks at it) through the same pass as the controller, with
/// `gate` asked before the run changes anything.
async fn applying<G, F>(
    sessions: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    suspended: bool,
    gate: G,
    cancel: &CancellationToken,
) -> Observed
where
    G: FnOnce() -> F + Send,
    F: Future<Output = Result<(), Withdrawal>> + Send,
{
    let ran = if suspended {
        pass::run(sessions, target, plan, pass::Observe, cancel).await
    } else {
        let step = pass::Migrate {
            on_waiting: |_| (),
            gate,
        };
        // As the controller's: the status printed carries the same Drifted condition.
        pass::run(sessions, target, plan, step, cancel)
            .await
            .map(Observed::Succeeded)
    };
    ran.unwrap_or_else(|error| pass::failure(&error))
}

/// The status a run leads to, and the verdict it means.
fn applied(
    mut result: TableResult,
    plan: &Plan,
    observed: &Observed,
    bt: &BoxTable,
) -> TableResult {
    let generation = bt.metadata.generation.unwrap_or(1);
    let status = status::desired_status(
        None,
        generation,
        Some(plan),
        observed,
        jiff::Timestamp::now(),
    );
    let ready = status.ready();
    result.reason = ready.and_then(|ready| ready.reason);
    result.message = ready
        .map(|ready| ready.message.to_owned())
        .unwrap_or_default();
    result.result = match observed {
        Observed::Succeeded(_) => Verdict::Ready,
        Observed::Suspended {
            applied_version, ..
        } => {
            if applied_version.unwrap_or(0) >= plan.target() {
                Verdict::Ready
            } else {
                Verdict::Pending
            }
        }
        _ => Verdict::Failed,
    };
    result.status = Some(status);
    result
}

/// A failure before or while handling the table.
fn failed(
    mut result: TableResult,
    mode: Mode,
    plan: Option<&Plan>,
    reason: Reason,
    message: String,
    bt: &BoxTable,
) -> TableResult {
    if mode == Mode::Apply {
        let generation = bt.metadata.generation.unwrap_or(1);
        let observed = Observed::Failed {
            reason,
            message: message.clone(),
            lock: None,
        };
        result.status = Some(status::desired_status(
            None,
            generation,
            plan,
            &observed,
            jiff::Timestamp::now(),
        ));
    }
    result.result = Verdict::Failed;
    result.reason = Some(reason);
    result.message = message;
    result
}

/// Plans one table: the verdict, the reason (`None` when the path says it all), the message and
/// the statements a run would send.
async fn planned(
    sessions: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    suspended: bool,
    cancel: &CancellationToken,
) -> Result<(Verdict, Option<Reason>, String, PlanReport), PassError> {
    let preview = pass::run(sessions, target, plan, pass::Preview, cancel).await?;
    let decision = preview.decision;
    let path = decision.path();
    let (from, to) = (decision.from_version(), decision.to_version());
    let table = plan.table();
    let would = match path {
        RunPath::Fresh => format!("would create {table} at version {to}"),
        RunPath::Bootstrap => format!(
            "would adopt {table}: found at version {from} without history, stamp it and bring it to {to}"
        ),
        RunPath::Normal => format!("would migrate {table} from version {from} to {to}"),
        RunPath::UpToDate => format!("{table} is at version {from}; nothing to do"),
    };
    let up_to_date = path == RunPath::UpToDate;
    let (verdict, reason, message, statements) = if suspended {
        let message = format!("suspended: a run changes nothing; unsuspended it {would}");
        let verdict = if up_to_date {
            Verdict::Ready
        } else {
            Verdict::Pending
        };
        (verdict, Some(Reason::Suspended), message, Vec::new())
    } else if up_to_date {
        (Verdict::Ready, None, would, Vec::new())
    } else {
        let statements = preview
            .statements
            .iter()
            .map(PlannedStatement::of)
            .collect();
        (Verdict::Pending, None, would, statements)
    };
    let report = PlanReport {
        path,
        from_version: from,
        to_version: to,
        target_version: preview.target_version,
        lock_key: plan.lock().lock_key().to_owned(),
        statements,
        drift: preview.drift.as_ref().map(DriftSummary::of),
    };
    Ok((verdict, reason, message, report))
}
