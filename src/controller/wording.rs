//! How the controller words what happened to a pass, in its log lines and in the status a
//! shutdown leaves behind: the `boxtable` field that every line about a BoxTable carries, the
//! results of the controller's stream, a refusal told apart from a failed run, and how far a pass
//! had got when a shutdown stopped it, or where a pass stood when its waits ran past their budget.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::error::ReconcileError;
use crate::crd::BoxTable;
use crate::duration::format_duration;
use crate::lock::LockError;
use crate::migrate::RunError;
use crate::pass::PassError;
use crate::reason::Reason;
use crate::report::chain;

/// The `boxtable` field of every log line (and of the `reconcile` span) about `bt`:
/// `namespace/name`. Not `name`: the JSON log format writes a span's own name under that key.
pub fn boxtable_field(bt: &BoxTable) -> String {
    format!("{}/{}", bt.namespace().unwrap_or_default(), bt.name_any())
}

fn object_field<K>(object: &ObjectRef<K>) -> String
where
    K: kube::Resource,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    format!(
        "{}/{}",
        object.namespace.as_deref().unwrap_or_default(),
        object.name
    )
}

/// Logs one result of the controller's stream. A failed pass has been logged as a warning, with
/// its retry, by [`super::reconcile::error_policy`] already; a pass queued for a BoxTable that
/// has been deleted since (the last event of every deletion queues one) is normal: both are
/// debug lines. Only a failing watch or runner is a warning.
pub(super) fn log_result(
    result: Result<
        (ObjectRef<BoxTable>, Action),
        controller::Error<ReconcileError, watcher::Error>,
    >,
) {
    match result {
        Ok((object, _)) => tracing::debug!(boxtable = %object_field(&object), "reconciled"),
        Err(controller::Error::ObjectNotFound(object)) => tracing::debug!(
            boxtable = %object_field::<DynamicObject>(&object),
            "not reconciled: the BoxTable no longer exists"
        ),
        Err(controller::Error::ReconcilerFailed(error, object)) => tracing::debug!(
            boxtable = %object_field::<DynamicObject>(&object),
            error = %chain(&error),
            "reconcile failed; its retry is logged above"
        ),
        Err(controller::Error::QueueError(error)) => tracing::warn!(
            error = %chain(&error),
            "watching BoxTables or their Secrets failed; the watch is retried"
        ),
        Err(controller::Error::RunnerError(error)) => {
            tracing::warn!(error = %chain(&error), "the controller's runner failed")
        }
    }
}

/// How the log line of a pass that did not bring its table up to date begins. A problem found
/// before anything was changed is a refusal, never a failed run or migration.
pub(super) fn not_done(reason: Reason) -> &'static str {
    match reason {
        Reason::LockTimeout => "gave up waiting for the advisory lock; nothing was changed",
        Reason::DeadlineExceeded => {
            "stopped waiting after the pass's budget; nothing was changed; retrying with backoff"
        }
        reason if reason.is_stalled() => "refused; nothing was changed",
        _ => "run failed; retrying with backoff",
    }
}

/// What the status says when a pass's waits ran past its budget (see [`crate::waits`]): `what`
/// (`the migration of public.outbox`) was stopped where `stopped` says, with the budget, how it
/// is made up, and what to look at. `host` is `host:port`, never credentials.
pub(super) fn deadline_message(
    what: &str,
    stopped: &Stopped,
    host: &str,
    budget: Duration,
    lock_timeout: Duration,
) -> String {
    let at = match stopped {
        Stopped::WaitingForSession => {
            format!(
                "while connecting to PostgreSQL at {host} (or waiting for a free session to it)"
            )
        }
        Stopped::WaitingForLock(lock_key) => format!(
            "before it held advisory lock {lock_key} (reading the table or waiting for the lock)"
        ),
        Stopped::RolledBack => "before it held the advisory lock".to_owned(),
    };
    format!(
        "{what} was stopped {at}: its waits took longer than their budget of {} \
         (spec.lock.timeout {} + {} for connecting and reading); nothing was changed and it is \
         retried with backoff: check that {host} is reachable and answers queries, and that no \
         long transaction holds locks on the table or its history table, or raise spec.lock.timeout",
        format_duration(budget),
        format_duration(lock_timeout),
        format_duration(crate::waits::PASS_MARGIN),
    )
}

/// How far a pass had got when a shutdown stopped it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stopped {
    /// Waiting for a free session to the database: nothing was sent.
    WaitingForSession,
    /// Waiting for the advisory lock (its lockKey): nothing was changed.
    WaitingForLock(String),
    /// Inside the transaction: cancelled, rolled back and unlocked.
    RolledBack,
}

impl Stopped {
    /// Where `error` (a [`Reason::Cancelled`] one) stopped the pass.
    pub(super) fn of(error: &PassError) -> Self {
        match error {
            PassError::Cancelled { .. } => Stopped::WaitingForSession,
            PassError::Run {
                source: RunError::Lock(lock),
                ..
            } if matches!(lock.as_ref(), LockError::Cancelled { .. }) => {
                Stopped::WaitingForLock(lock.lock_key().to_owned())
            }
            _ => Stopped::RolledBack,
        }
    }

    /// Whether the pass was stopped before it changed anything (waiting for a session, reading,
    /// or waiting for the lock), as opposed to rolled back.
    pub(super) fn changed_nothing(&self) -> bool {
        !matches!(self, Stopped::RolledBack)
    }

    /// What happened, for the log line (`the migration`, `the drop` as `what`).
    pub(super) fn log_line(&self, what: &str) -> String {
        match self {
            Stopped::WaitingForSession => format!(
                "{what} stopped by shutdown while waiting for a database session; nothing was changed"
            ),
            Stopped::WaitingForLock(lock_key) => format!(
                "{what} stopped by shutdown while waiting for advisory lock {lock_key}; nothing was changed"
            ),
            Stopped::RolledBack => {
                format!("{what} cancelled by shutdown; rolled back and unlocked")
            }
        }
    }

    /// What happened to `what` (`the migration of public.outbox`), for the status.
    pub(super) fn status_message(&self, what: &str) -> String {
        let next = "the next operator replica runs it again";
        match self {
            Stopped::WaitingForSession => format!(
                "{what} was stopped by an operator shutdown while waiting for a database session; nothing was changed; {next}"
            ),
            Stopped::WaitingForLock(lock_key) => format!(
                "{what} was stopped by an operator shutdown while waiting for advisory lock {lock_key}; nothing was changed; {next}"
            ),
            Stopped::RolledBack => {
                format!("{what} was interrupted by an operator shutdown and rolled back; {next}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_never_worded_as_a_failed_run() {
        for reason in [
            Reason::TableConflict,
            Reason::SchemaNotFound,
            Reason::PayloadMismatch,
        ] {
            assert_eq!(not_done(reason), "refused; nothing was changed");
        }
        assert!(not_done(Reason::LockTimeout).starts_with("gave up waiting"));
        assert!(not_done(Reason::MigrationFailed).starts_with("run failed"));
    }

    #[test]
    fn a_shutdown_during_the_lock_wait_says_nothing_was_changed() {
        let error = PassError::Run {
            operation: "migration",
            source: RunError::from(LockError::Cancelled {
                lock_key: "BrighterMigration_public.outbox".to_owned(),
            }),
        };
        let stopped = Stopped::of(&error);
        let message = stopped.status_message("the migration of public.outbox");
        assert_eq!(
            message,
            "the migration of public.outbox was stopped by an operator shutdown while waiting for \
             advisory lock BrighterMigration_public.outbox; nothing was changed; the next operator \
             replica runs it again"
        );
        let cancelled = PassError::Run {
            operation: "migration",
            source: RunError::Cancelled {
                table: "public.outbox".to_owned(),
            },
        };
        assert!(
            Stopped::of(&cancelled)
                .status_message("the migration of public.outbox")
                .contains("rolled back")
        );
    }

    #[test]
    fn a_pass_past_its_budget_says_where_it_stood_and_what_to_check() {
        let message = deadline_message(
            "the migration of public.outbox",
            &Stopped::WaitingForSession,
            "10.0.0.7:5432",
            Duration::from_secs(45),
            Duration::from_secs(30),
        );
        assert_eq!(
            message,
            "the migration of public.outbox was stopped while connecting to PostgreSQL at \
             10.0.0.7:5432 (or waiting for a free session to it): its waits took longer than their \
             budget of 45s (spec.lock.timeout 30s + 15s for connecting and reading); nothing was \
             changed and it is retried with backoff: check that 10.0.0.7:5432 is reachable and \
             answers queries, and that no long transaction holds locks on the table or its history \
             table, or raise spec.lock.timeout"
        );
        let at_the_lock = deadline_message(
            "the migration of public.outbox",
            &Stopped::WaitingForLock("123".to_owned()),
            "db:5432",
            Duration::from_secs(15),
            Duration::ZERO,
        );
        assert!(
            at_the_lock.contains("before it held advisory lock 123"),
            "{at_the_lock}"
        );
    }
}
