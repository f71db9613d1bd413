//! One pass over one box table against its database, without Kubernetes: [`run`] borrows a
//! session from the [`SessionPool`], does one [`Step`] on it (migrate, observe, preview or drop)
//! and hands the session back only if the step ended cleanly. A migration and an observation end
//! in an [`Observed`] value (a failure through [`failure`], with what it did to the lock), the
//! only input besides the plan that decides the status. The controller and the `migrate` command
//! both go through [`run`], so they share one code path.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::db::pool::CheckoutError;
use crate::db::{ConnectError, Connection, Session, SessionKey, SessionPool};
use crate::lock::{Holder, LockError};
use crate::migrate::{self, DropOutcome, DropRequest, Outcome, Plan, RunError};
use crate::reason::Reason;
use crate::status::{LockObservation, Observed};

/// Where a box table lives: the database target (parsed settings and TLS files).
pub struct Target<'a> {
    /// The database target, read from a Secret or given on the command line.
    pub connection: &'a Connection,
    /// `application_name` for the session, so a holder can be recognised in `pg_stat_activity`.
    pub application_name: &'a str,
    /// Where the connection string came from (a Secret), so that the sessions opened with its
    /// previous contents are closed once it changes; `None` when it cannot change.
    pub source: Option<&'a str>,
}

/// Why a pass over a table failed. Each variant names the step; `reason()` gives the bounded reason.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The session could not be opened.
    #[error("could not open a session")]
    Connect(#[source] ConnectError),
    /// Shutdown came while the pass waited for a free session.
    #[error("cancelled while waiting for a free session to {table}")]
    Cancelled {
        /// The table the pass was for.
        table: String,
    },
    /// The run, observation or drop failed.
    #[error("{operation} failed")]
    Run {
        /// migrate, observe or drop.
        operation: &'static str,
        /// The runner's error.
        #[source]
        source: RunError,
    },
}

impl PassError {
    /// What the status says about this failure: the error chain, without the "migration failed"
    /// wrapper of a run (the runner's error names what was attempted, or what was found before
    /// anything was attempted, like a missing schema).
    pub fn message(&self) -> String {
        match self {
            PassError::Run { source, .. } => crate::report::chain(source),
            other => crate::report::chain(other),
        }
    }

    /// The bounded reason for status, events and metrics.
    pub fn reason(&self) -> Reason {
        match self {
            PassError::Connect(e) => e.reason(),
            PassError::Cancelled { .. } => Reason::Cancelled,
            PassError::Run { source, .. } => source.reason(),
        }
    }
}

/// How a step left its session: only a clean one goes back to the pool for the next pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// Nothing pending on it and no lock held: it may be lent again.
    Clean,
    /// Something may be left over (a lock lost after commit, a read that failed): it is closed.
    Spent,
}

/// One thing a pass asks of its table, done on a session borrowed for it by [`run`]:
/// [`Migrate`], [`Observe`], [`Preview`] or [`DropTable`].
pub trait Step: Send {
    /// What the step gives back.
    type Output: Send;
    /// What the step is called when it fails ("migration", "observation", "plan", "drop").
    const OPERATION: &'static str;

    /// Does the step on `session`: its output, and how it left the session.
    fn on(
        self,
        session: &mut Session,
        plan: &Plan,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<(Self::Output, Left), RunError>> + Send;
}

/// Runs one pass over one table: borrows a session for `target` from `pool` (waiting while the
/// target's sessions are all lent), does `step` on it and hands the session back only if the
/// step ended cleanly. The controller and the `migrate` command both come through here.
///
/// # Errors
/// [`PassError::Connect`], [`PassError::Cancelled`] when `cancel` fires while waiting for a
/// session, or [`PassError::Run`] when the step fails.
///
/// # Cancel safety
/// Cancelling `cancel` abandons the wait for a session or the lock, or cancels the running
/// statement, rolls back and releases the lock. Dropping the future closes the session.
pub async fn run<S: Step>(
    pool: &SessionPool,
    target: &Target<'_>,
    plan: &Plan,
    step: S,
    cancel: &CancellationToken,
) -> Result<S::Output, PassError> {
    let key = SessionKey::of(target.connection);
    let mut lent = pool
        .checkout(&key, target.source, target.application_name, cancel)
        .await
        .map_err(|error| match error {
            CheckoutError::Connect(error) => PassError::Connect(error),
            CheckoutError::Cancelled => PassError::Cancelled {
                table: plan.table().to_string(),
            },
        })?;
    let (output, left) = step
        .on(lent.session(), plan, cancel)
        .await
        .map_err(|source| PassError::Run {
            operation: S::OPERATION,
            source,
        })?;
    if left == Left::Clean {
        lent.give_back().await;
    }
    Ok(output)
}

/// Brings the table to its target version (see [`crate::migrate::run`]), then compares it with
/// the shape of the version it is at ([`Outcome::drift`]; a failed read is logged, leaves it
/// unchecked and the session is not lent again). The session is clean only when the lock was
/// released by this session.
pub struct Migrate<W, G> {
    /// Called once when the lock is found held by another session, with the holder when seen.
    pub on_waiting: W,
    /// Asked with the lock held and before any change (see [`migrate::runner::run_gated`]); the
    /// `migrate` command passes one that always lets the run go on.
    pub gate: G,
}

impl<W, G, F> Step for Migrate<W, G>
where
    W: FnOnce(Option<Holder>) + Send,
    G: FnOnce() -> F + Send,
    F: Future<Output = Result<(), migrate::runner::Withdrawal>> + Send,
{
    type Output = Outcome;
    const OPERATION: &'static str = "migration";

    async fn on(
        self,
        session: &mut Session,
        plan: &Plan,
        cancel: &CancellationToken,
    ) -> Result<(Outcome, Left), RunError> {
        let mut outcome =
            migrate::runner::run_gated(session, plan, cancel, self.on_waiting, self.gate).await?;
        let mut left = if outcome.lock_lost_after_commit {
            Left::Spent
        } else {
            Left::Clean
        };
        // A table found up to date without the lock comes back already compared (its shape was
        // read with that check).
        if outcome.drift.is_some() {
            return Ok((outcome, left));
        }
        outcome.drift = match migrate::inspect::drift(session, plan, outcome.to_version).await {
            Ok(report) => report,
            Err(error) => {
                tracing::warn!(table = %plan.table(), error = %crate::report::chain(&error), "reading the table's shape for the drift check failed");
                left = Left::Spent;
                None
            }
        };
        Ok((outcome, left))
    }
}

/// Looks at a table without changing anything (for `suspend: true`): the version found and what
/// a run would do now, as [`Observed::Suspended`].
pub struct Observe;

impl Step for Observe {
    type Output = Observed;
    const OPERATION: &'static str = "observation";

    async fn on(
        self,
        session: &mut Session,
        plan: &Plan,
        _cancel: &CancellationToken,
    ) -> Result<(Observed, Left), RunError> {
        let found = migrate::observe(session, plan).await?;
        let observed = Observed::Suspended {
            applied_version: (found.current_version > 0).then_some(found.current_version),
            would: Some(found.decision),
        };
        Ok((observed, Left::Clean))
    }
}

/// What a run would do now and the statements it would send, read without the lock
/// (`migrate --dry-run`).
pub struct Preview;

impl Step for Preview {
    type Output = migrate::Preview;
    const OPERATION: &'static str = "plan";

    async fn on(
        self,
        session: &mut Session,
        plan: &Plan,
        _cancel: &CancellationToken,
    ) -> Result<(migrate::Preview, Left), RunError> {
        Ok((migrate::preview(session, plan).await?, Left::Clean))
    }
}

/// Drops the table and its history rows under the lock (for `deletionPolicy: Drop`), if
/// `request.owner` owns it and the user allowed it (see [`migrate::drop_box_table`]). A table that
/// is already gone is success.
pub struct DropTable<'r, W> {
    /// Who asks, and what they allowed.
    pub request: &'r DropRequest,
    /// Called once when the lock is found held by another session, with the holder when seen.
    pub on_waiting: W,
}

impl<W> Step for DropTable<'_, W>
where
    W: FnOnce(Option<Holder>) + Send,
{
    type Output = DropOutcome;
    const OPERATION: &'static str = "drop";

    async fn on(
        self,
        session: &mut Session,
        plan: &Plan,
        cancel: &CancellationToken,
    ) -> Result<(DropOutcome, Left), RunError> {
        let outcome =
            migrate::drop_box_table(session, plan, self.request, cancel, self.on_waiting).await?;
        Ok((outcome, Left::Clean))
    }
}

/// What the status should say about a failed pass, with the lock part when the lock was involved
/// (a timeout names the holder).
pub fn failure(error: &PassError) -> Observed {
    Observed::Failed {
        reason: error.reason(),
        message: error.message(),
        lock: failed_lock(error),
    }
}

/// What a failed pass did to the lock: a timeout (with the holder, when seen) or a lost lock;
/// `None` when the lock was not the trouble.
fn failed_lock(error: &PassError) -> Option<LockObservation> {
    let PassError::Run {
        source: RunError::Lock(lock),
        ..
    } = error
    else {
        return None;
    };
    match lock.as_ref() {
        LockError::Timeout {
            holder,
            attempts,
            timeout,
            ..
        } => Some(LockObservation::timed_out(
            *attempts,
            *timeout,
            holder.clone(),
        )),
        LockError::Lost { .. } => Some(LockObservation::lost(1, Duration::ZERO)),
        _ => None,
    }
}
