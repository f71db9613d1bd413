//! Read-only observation: what a run would do now, without the lock and without writing (used
//! while a BoxTable is suspended).

use super::Decision;
use super::history::{self, HistoryTable};
use super::runner::read_facts;
use super::statements::{self, Statement};
use super::{HistoryScope, Plan, RunError, RunPath, detect};
use crate::db::Session;

const BEGIN_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";
const COMMIT: &str = "COMMIT";
const ROLLBACK: &str = "ROLLBACK";

/// What a read-only observation found (used while suspended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// The current version (0 when the table does not exist).
    pub current_version: u32,
    /// The version a run would reach.
    pub target_version: u32,
    /// The path a run would take now.
    pub would: RunPath,
    /// What a run would do now (its versions; see [`statements::history_rows`]).
    pub decision: Decision,
}

/// Reads what a run would do now, without the lock and without writing anything.
///
/// # Errors
/// The same detection errors as [`super::run`] (a run would fail the same way).
///
/// # Idempotency
/// Read-only.
pub async fn observe(session: &Session, plan: &Plan) -> Result<Observation, RunError> {
    let target = plan.target();
    super::postgres_version::check_supported(session.server_version_num(), plan.table())?;
    let client = session.client();
    // The catalog and the history are separate reads: one read-only REPEATABLE READ transaction
    // gives them one snapshot, so a concurrent commit of a table with its history row is seen
    // whole or not at all.
    client
        .batch_execute(BEGIN_SNAPSHOT)
        .await
        .map_err(RunError::query(
            "opening a read-only snapshot",
            plan.table(),
        ))?;
    let facts = read_facts(session, plan, false).await;
    let end = if facts.is_ok() { COMMIT } else { ROLLBACK };
    client.batch_execute(end).await.map_err(RunError::query(
        "closing the read-only snapshot",
        plan.table(),
    ))?;
    let facts = facts?;
    let history = plan.history().clone();
    let decision = detect::decide(plan, target, &facts, &history.quoted())?;
    Ok(Observation {
        current_version: decision.from_version(),
        target_version: target,
        would: decision.path(),
        decision,
    })
}

/// What a run would do now, statement by statement (`migrate --dry-run`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The decision a run would take now.
    pub decision: Decision,
    /// The version a run would reach.
    pub target_version: u32,
    /// The statements its transaction would run, in order (empty when up to date).
    pub statements: Vec<Statement>,
    /// How the table compares with the shape of the version its history records (`None` without
    /// history, or at a version newer than this operator knows).
    pub drift: Option<super::drift::DriftReport>,
}

/// Reads what a run would do now and the exact statements it would send, without the lock and
/// without writing anything. A run started later re-reads under the lock, so it sends these
/// statements unless the database changes in between.
///
/// # Errors
/// The same detection errors as [`super::run`] (a run would fail the same way).
///
/// # Idempotency
/// Read-only.
pub async fn preview(session: &Session, plan: &Plan) -> Result<Preview, RunError> {
    let target = plan.target();
    super::postgres_version::check_supported(session.server_version_num(), plan.table())?;
    // A run refuses a pooler in between or a standby before anything else; so does its plan.
    super::runner::preflight(session, plan, plan.lock()).await?;
    let client = session.client();
    // One snapshot for the catalog and both histories, as in `observe`.
    client
        .batch_execute(BEGIN_SNAPSHOT)
        .await
        .map_err(RunError::query(
            "opening a read-only snapshot",
            plan.table(),
        ))?;
    let read = async {
        let facts = read_facts(session, plan, false).await?;
        let public_history_exists = plan.history_scope() == HistoryScope::PerSchema
            && history::exists(client, &HistoryTable::Public, plan.table()).await?;
        Ok::<_, RunError>((facts, public_history_exists))
    }
    .await;
    let end = if read.is_ok() { COMMIT } else { ROLLBACK };
    client.batch_execute(end).await.map_err(RunError::query(
        "closing the read-only snapshot",
        plan.table(),
    ))?;
    let (facts, public_history_exists) = read?;
    let history = plan.history().clone();
    let decision = detect::decide(plan, target, &facts, &history.quoted())?;
    let drift = match decision {
        Decision::Normal { from, .. } => super::inspect::drift(session, plan, from).await?,
        Decision::UpToDate { at } => super::inspect::drift(session, plan, at).await?,
        Decision::Fresh { .. } | Decision::Bootstrap { .. } => None,
    };
    Ok(Preview {
        decision,
        target_version: target,
        statements: statements::transaction(plan, decision, public_history_exists),
        drift,
    })
}
