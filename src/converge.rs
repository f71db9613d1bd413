//! One box table converged against its database, without Kubernetes: connect, then run, observe
//! or drop. The controller and the `migrate` command both go through here, so they share one code
//! path.

use tokio_util::sync::CancellationToken;

use crate::db::{ConnStrError, ConnectError, ConnectionSettings, Session};
use std::time::Duration;

use crate::lock::{Holder, LockError};
use crate::migrate::{self, DropOutcome, DropRequest, Observation, Outcome, Plan, RunError};
use crate::reason::Reason;
use crate::status::{LockObservation, Observed};

/// Where a box table lives: the connection string and an optional CA bundle (PEM).
pub struct Target<'a> {
    /// The connection string as the user wrote it (URL, libpq keywords or Npgsql form).
    pub connection_string: &'a str,
    /// A CA bundle in PEM for verify-ca / verify-full.
    pub ca_pem: Option<&'a [u8]>,
    /// `application_name` for the session, so a holder can be recognised in `pg_stat_activity`.
    pub application_name: &'a str,
}

/// Why converging failed. Each variant names the step; `reason()` gives the bounded reason.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    /// The connection string could not be parsed.
    #[error("invalid connection string")]
    ConnectionString(#[source] ConnStrError),
    /// The session could not be opened.
    #[error("could not open a session")]
    Connect(#[source] ConnectError),
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

impl ConvergeError {
    /// What the status should say about this failure, with the lock part when the lock was
    /// involved (a timeout names the holder).
    pub fn observed(&self) -> Observed {
        let lock = match self {
            ConvergeError::Run {
                source: RunError::Lock(lock),
                ..
            } => match lock.as_ref() {
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
            },
            _ => None,
        };
        Observed::Failed {
            reason: self.reason(),
            message: self.message(),
            lock,
        }
    }

    /// What the status says about this failure: the error chain, without the "migration failed"
    /// wrapper of a run (the runner's error names what was attempted, or what was found before
    /// anything was attempted, like a missing schema).
    pub fn message(&self) -> String {
        match self {
            ConvergeError::Run { source, .. } => crate::report::chain(source),
            other => crate::report::chain(other),
        }
    }

    /// The bounded reason for status, events and metrics.
    pub fn reason(&self) -> Reason {
        match self {
            ConvergeError::ConnectionString(e) => e.reason(),
            ConvergeError::Connect(e) => e.reason(),
            ConvergeError::Run { source, .. } => source.reason(),
        }
    }
}

/// Parses the target's connection string and opens a dedicated session.
///
/// # Errors
/// [`ConvergeError::ConnectionString`] or [`ConvergeError::Connect`].
pub async fn open(target: &Target<'_>) -> Result<Session, ConvergeError> {
    let settings = ConnectionSettings::parse(target.connection_string)
        .map_err(ConvergeError::ConnectionString)?;
    Session::connect(&settings, target.ca_pem, target.application_name)
        .await
        .map_err(ConvergeError::Connect)
}

/// Brings the table to its target version (see [`migrate::run`]; `gate` as in
/// [`migrate::runner::run_gated`]), then compares the table with
/// the shape of the version it is at ([`Outcome::drift`]; a failed read is logged and leaves it
/// unchecked).
///
/// # Errors
/// [`ConvergeError`] for the step that failed.
///
/// # Cancel safety
/// Cancelling `cancel` abandons a lock wait or cancels the running statement, rolls back and
/// releases the lock.
pub async fn migrate<G, F>(
    target: &Target<'_>,
    plan: &Plan,
    cancel: &CancellationToken,
    on_waiting: impl FnOnce(Option<Holder>) + Send,
    gate: G,
) -> Result<Outcome, ConvergeError>
where
    G: FnOnce() -> F + Send,
    F: std::future::Future<Output = Result<(), migrate::runner::Withdrawal>> + Send,
{
    let mut session = open(target).await?;
    let mut outcome = migrate::runner::run_gated(&mut session, plan, cancel, on_waiting, gate)
        .await
        .map_err(|source| ConvergeError::Run {
            operation: "migration",
            source,
        })?;
    outcome.drift = match migrate::inspect::drift(session.client(), plan, outcome.to_version).await
    {
        Ok(report) => report,
        Err(error) => {
            tracing::warn!(table = %plan.table, error = %crate::report::chain(&error), "reading the table's shape for the drift check failed");
            None
        }
    };
    Ok(outcome)
}

/// As [`migrate`], on a session the caller already holds (to reuse one session for many tables;
/// each run still takes and releases its own table's lock).
///
/// # Errors
/// [`ConvergeError::Run`].
///
/// # Cancel safety
/// As [`migrate`]. After an error, drop the session rather than reuse it.
pub async fn migrate_on(
    session: &mut Session,
    plan: &Plan,
    cancel: &CancellationToken,
    on_waiting: impl FnOnce(Option<Holder>) + Send,
) -> Result<Outcome, ConvergeError> {
    migrate::run(session, plan, cancel, on_waiting)
        .await
        .map_err(|source| ConvergeError::Run {
            operation: "migration",
            source,
        })
}

/// Reports where the table stands without changing anything (for `suspend: true`).
///
/// # Errors
/// [`ConvergeError`] for the step that failed.
pub async fn observe(target: &Target<'_>, plan: &Plan) -> Result<Observation, ConvergeError> {
    let session = open(target).await?;
    migrate::observe(&session, plan)
        .await
        .map_err(|source| ConvergeError::Run {
            operation: "observation",
            source,
        })
}

/// What a run would do now and the statements it would send, read without the lock
/// (`migrate --dry-run`).
///
/// # Errors
/// [`ConvergeError`] for the step that failed.
pub async fn preview(session: &Session, plan: &Plan) -> Result<migrate::Preview, ConvergeError> {
    migrate::preview(session, plan)
        .await
        .map_err(|source| ConvergeError::Run {
            operation: "plan",
            source,
        })
}

/// Drops the table and its history rows under the lock (for `deletionPolicy: Drop`), if
/// `request.owner` owns it and the user allowed it (see [`migrate::drop_box_table`]).
///
/// # Errors
/// [`ConvergeError`] for the step that failed.
///
/// # Cancel safety
/// Cancelling `cancel` abandons a lock wait or cancels the running statement, rolls back and
/// releases the lock.
///
/// # Idempotency
/// A table that is already gone is success.
pub async fn drop(
    target: &Target<'_>,
    plan: &Plan,
    request: &DropRequest,
    cancel: &CancellationToken,
    on_waiting: impl FnOnce(Option<Holder>) + Send,
) -> Result<DropOutcome, ConvergeError> {
    let mut session = open(target).await?;
    migrate::drop_box_table(&mut session, plan, request, cancel, on_waiting)
        .await
        .map_err(|source| ConvergeError::Run {
            operation: "drop",
            source,
        })
}
