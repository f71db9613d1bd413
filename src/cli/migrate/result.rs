//! What the `migrate` command found for each BoxTable document: one [`TableResult`] per
//! document (valid or not), its [`Verdict`], and the exit code of the worst verdict.

use serde::Serialize;

use boxtable_operator::crd::BoxTableStatus;
use boxtable_operator::db::ConnectionSettings;
use boxtable_operator::manifests::Problem;
use boxtable_operator::migrate::RunPath;
use boxtable_operator::migrate::statements::{Param, Statement};
use boxtable_operator::reason::Reason;
use boxtable_operator::status::{self, Observed};

/// How one table ended, worst last. The command's exit code is the worst verdict's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    /// At its target version (migrated now, or already there).
    Ready,
    /// Not at its target and nothing failed: a plan with changes to make, or a suspended table
    /// behind its target.
    Pending,
    /// The table could not be brought up to date (or planned): see the reason.
    Failed,
    /// The document is not a valid BoxTable; nothing was attempted.
    Invalid,
}

impl Verdict {
    /// The process exit code: 0 every table at its target, 2 changes pending, 1 any error.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Ready => 0,
            Verdict::Pending => 2,
            Verdict::Failed | Verdict::Invalid => 1,
        }
    }
}

/// The database a table is reached in: host, port, database and user, never the password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatabaseTarget {
    /// The first host (or address).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The database (the server defaults it to the user's name when the string names none).
    pub database: String,
    /// The user.
    pub user: String,
}

impl DatabaseTarget {
    /// The target of a parsed connection string.
    pub fn of(settings: &ConnectionSettings) -> Self {
        let (host, port) = settings
            .endpoints()
            .into_iter()
            .next()
            .unwrap_or_else(|| (String::from("(no host)"), 5432));
        let user = settings.user().to_owned();
        Self {
            host,
            port,
            database: settings.dbname().unwrap_or(&user).to_owned(),
            user,
        }
    }
}

impl std::fmt::Display for DatabaseTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(f, "{}@{host}:{}/{}", self.user, self.port, self.database)
    }
}

/// One statement as a plan prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedStatement {
    /// The SQL text, byte for byte as a run sends it.
    pub sql: String,
    /// The values bound to `$1`, `$2`, ...
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<serde_json::Value>,
}

impl PlannedStatement {
    /// The printable form of `statement`.
    pub fn of(statement: &Statement) -> Self {
        Self {
            sql: statement.sql.clone(),
            parameters: statement
                .params
                .iter()
                .map(|p| match p {
                    Param::Int(i) => serde_json::Value::from(*i),
                    Param::Text(t) => serde_json::Value::from(t.as_str()),
                })
                .collect(),
        }
    }
}

/// A plan's drift check: whether the table drifted from its recorded version's shape, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftSummary {
    /// Whether any difference is drift (extra columns alone are not).
    pub drifted: bool,
    /// The version compared with.
    pub version: u32,
    /// One line naming each difference.
    pub message: String,
    /// Each difference, drift and extra columns alike.
    pub differences: Vec<String>,
}

impl DriftSummary {
    /// The summary of `report`.
    pub fn of(report: &boxtable_operator::migrate::drift::DriftReport) -> Self {
        Self {
            drifted: report.drifted(),
            version: report.version,
            message: report.message(),
            differences: report.differences.iter().map(ToString::to_string).collect(),
        }
    }
}

/// What a plan found for one table.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// `Fresh`, `Bootstrap`, `Normal` or `UpToDate`.
    pub path: RunPath,
    /// The version now (0 without a table).
    pub from_version: u32,
    /// The version a run would leave it at.
    pub to_version: u32,
    /// The version aimed for.
    pub target_version: u32,
    /// Brighter's lock key the run would take.
    pub lock_key: String,
    /// How the table compares with the shape of the version its history records (checked for a
    /// table with history; reported only, it does not change the exit code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSummary>,
    /// The statements, in order, inside one transaction under that lock.
    pub statements: Vec<PlannedStatement>,
}

/// What the `reason` field and the REASON column say for a file that could not be read at all.
const UNREADABLE: &str = "Unreadable";

/// The result for one BoxTable document. Serialised as [`Printed`]: the typed reason and the
/// plan's path become the one `reason` field the output has always had.
#[derive(Debug, Clone, PartialEq)]
pub struct TableResult {
    /// `file: document N`.
    pub source: String,
    /// The BoxTable's name (empty when the document has none).
    pub name: String,
    /// Its namespace, when the manifest has one.
    pub namespace: Option<String>,
    /// The resolved table, when the spec names a valid one.
    pub table: Option<String>,
    /// Where it lives, when the connection string could be read.
    pub database: Option<DatabaseTarget>,
    /// How it ended.
    pub result: Verdict,
    /// The bounded reason (`Migrated`, `UpToDate`, `InvalidSpec`, `LockTimeout`, ...); `None` for
    /// a plan that is not suspended (its [`PlanReport::path`] says what a run would do) and for a
    /// file that could not be read.
    pub reason: Option<Reason>,
    /// What happened, or every error found in the document.
    pub message: String,
    /// A run's status, as the controller would write it.
    pub status: Option<BoxTableStatus>,
    /// A plan's findings.
    pub plan: Option<PlanReport>,
}

/// A [`TableResult`] as `-o json` and `-o yaml` print it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Printed<'a> {
    source: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    database: Option<&'a DatabaseTarget>,
    result: Verdict,
    reason: &'static str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a BoxTableStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<&'a PlanReport>,
}

impl Serialize for TableResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Printed {
            source: &self.source,
            name: &self.name,
            namespace: self.namespace.as_deref(),
            table: self.table.as_deref(),
            database: self.database.as_ref(),
            result: self.result,
            reason: self.reason_label(),
            message: &self.message,
            status: self.status.as_ref(),
            plan: self.plan.as_ref(),
        }
        .serialize(serializer)
    }
}

impl TableResult {
    /// The result for a document that is not a valid BoxTable.
    pub fn invalid(problem: &Problem) -> Self {
        let (name, namespace) = match problem.object.as_deref() {
            Some(object) => {
                let name = object.split_once(' ').map_or(object, |(_, n)| n);
                match name.split_once('/') {
                    Some((ns, n)) => (n.to_owned(), Some(ns.to_owned())),
                    None => (name.to_owned(), None),
                }
            }
            None => (String::new(), None),
        };
        let message = problem.errors.join("; ");
        let observed = Observed::Failed {
            reason: Reason::InvalidSpec,
            message: message.clone(),
            lock: None,
        };
        Self {
            source: problem.source.to_string(),
            name,
            namespace,
            table: None,
            database: None,
            result: Verdict::Invalid,
            // Document 0 stands for the whole file, which could not be read.
            reason: (problem.source.index != 0).then_some(Reason::InvalidSpec),
            message,
            status: Some(status::desired_status(
                None,
                1,
                None,
                &observed,
                jiff::Timestamp::now(),
            )),
            plan: None,
        }
    }

    /// The message of the `Drifted` condition a run's status carries, when it is True.
    pub fn drift(&self) -> Option<&str> {
        self.status
            .as_ref()?
            .condition(status::DRIFTED)
            .filter(|drifted| drifted.is_true())
            .map(|drifted| drifted.message)
    }

    /// What the `reason` field and the REASON column say: the bounded reason; for a plan that is
    /// not suspended, the path a run would take; `Unreadable` for a file that could not be read.
    pub fn reason_label(&self) -> &'static str {
        match (self.reason, &self.plan, self.result) {
            (Some(reason), _, _) => reason.as_str(),
            (None, Some(plan), _) => plan.path.as_str(),
            (None, None, Verdict::Invalid) => UNREADABLE,
            (None, None, _) => "",
        }
    }

    /// `namespace/name`, or `name`, or the document's place when it has no name.
    pub fn display_name(&self) -> String {
        match (&self.namespace, self.name.is_empty()) {
            (_, true) => self.source.clone(),
            (Some(ns), false) => format!("{ns}/{}", self.name),
            (None, false) => self.name.clone(),
        }
    }
}

/// The worst verdict of `results` (Ready when there are none).
pub fn worst(results: &[TableResult]) -> Verdict {
    results
        .iter()
        .map(|r| r.result)
        .max()
        .unwrap_or(Verdict::Ready)
}
