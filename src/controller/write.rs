//! The write step of one pass over one BoxTable: computing its status, writing it only when it
//! changed, publishing the transitions as events, reporting a lock wait while it lasts, and
//! deciding when the object is due again.

use std::future::Future;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;

use super::context::Context;
use super::error::ReconcileError;
use super::events;
use super::lean::LeanBoxTable;
use super::wording::Stopped;
use crate::crd::{BoxTable, BoxTableStatus, FIELD_MANAGER, RECONCILE_REQUESTED_ANNOTATION};
use crate::lock::Holder;
use crate::migrate::Plan;
use crate::reason::Reason;
use crate::status::{self, LockObservation, Observed};
use crate::telemetry::ReconcileResult;

/// How often a running lock wait refreshes `attempts` and `waitedMilliseconds` in the status: often
/// enough that a long wait visibly progresses, rarely enough that a wait costs one write per
/// interval, not one per try.
pub(super) const WAIT_PROGRESS: Duration = Duration::from_secs(5);

/// How long a migration may hold the lock before the status says so (`lock.state: Acquired`,
/// reason `Migrating`): a run that takes milliseconds costs no extra write, one that waits on a
/// table lock or rewrites a large table shows what it is doing while it does it.
pub(super) const MIGRATING_AFTER: Duration = Duration::from_secs(2);

/// The receiving end of a run's "the lock is taken" callback (see [`contention`]).
pub(super) struct Contention(tokio::sync::oneshot::Receiver<(Option<Holder>, Instant)>);

/// The receiving end of a migration's "the lock is mine and the change begins" signal (see
/// [`holding`]).
pub(super) struct Holding(tokio::sync::oneshot::Receiver<(Instant, jiff::Timestamp)>);

/// A callback for a migration's gate to call once it let the run go on (the lock is held and the
/// transaction is about to change the table), and the [`Holding`] that hears from it.
pub(super) fn holding() -> (impl FnOnce() + Send, Holding) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let notify = move || {
        let _ = tx.send((Instant::now(), jiff::Timestamp::now()));
    };
    (notify, Holding(rx))
}

/// What woke [`InFlight::run_reporting_waits`].
enum Wake<T> {
    Finished(T),
    Contended(Option<Holder>, Instant),
    Holding(Instant, jiff::Timestamp),
    RefreshWait,
    ShowMigrating,
}

/// Waits for `rx` once; pending forever once it has answered (or when there is none).
async fn once<T>(rx: &mut Option<tokio::sync::oneshot::Receiver<T>>) -> Option<T> {
    match rx {
        Some(pending) => {
            let value = pending.await.ok();
            *rx = None;
            value
        }
        None => std::future::pending().await,
    }
}

/// A callback to hand to a run as its `on_waiting`, and the [`Contention`] that hears from it.
pub(super) fn contention() -> (impl FnOnce(Option<Holder>) + Send, Contention) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let notify = move |holder| {
        let _ = tx.send((holder, Instant::now()));
    };
    (notify, Contention(rx))
}

/// A pass in progress for one object: what is known and what was last written.
pub(super) struct InFlight<'a> {
    pub(super) bt: &'a BoxTable,
    pub(super) ctx: &'a Context,
    /// The same API with its answers read without field ownership (see [`super::lean`]): the
    /// status writes and the re-read under the lock.
    pub(super) lean: Api<LeanBoxTable>,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) written: Option<BoxTableStatus>,
    /// Whether this pass has written a status yet.
    wrote: bool,
    pub(super) started: Instant,
}

/// A `Waiting` observation `waited` into a wait, with the tries the poll schedule has made by then.
fn waiting_observation(holder: Option<Holder>, waited: Duration) -> Observed {
    Observed::Waiting(LockObservation::waiting(
        crate::lock::tries_within(waited),
        waited,
        holder,
    ))
}

impl<'a> InFlight<'a> {
    pub(super) fn new(bt: &'a BoxTable, ctx: &'a Context) -> Self {
        let namespace = bt.namespace().unwrap_or_default();
        Self {
            bt,
            ctx,
            lean: Api::namespaced(ctx.client.clone(), &namespace),
            namespace,
            name: bt.name_any(),
            written: ctx.own_writes.status_of(bt),
            wrote: false,
            started: Instant::now(),
        }
    }

    /// Computes the status for `observed` and writes it if it changed; publishes transitions.
    pub(super) async fn publish(
        &mut self,
        plan: Option<&Plan>,
        observed: &Observed,
    ) -> Result<(), ReconcileError> {
        let generation = self.bt.metadata.generation.unwrap_or(0);
        let desired = status::desired_status(
            self.written.as_ref(),
            generation,
            plan,
            observed,
            jiff::Timestamp::now(),
        );
        if self
            .written
            .as_ref()
            .is_some_and(|current| status::up_to_date(current, &desired))
        {
            return Ok(());
        }
        let patch = serde_json::json!({
            "apiVersion": format!("{}/{}", crate::crd::GROUP, crate::crd::VERSION),
            "kind": crate::crd::KIND,
            "status": desired,
        });
        self.lean
            .patch_status(
                &self.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(|source| ReconcileError::WriteStatus {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            })?;
        self.ctx.own_writes.wrote(self.bt, &desired);
        let transitions = events::transitions(self.written.as_ref(), &desired);
        events::publish(&self.ctx.events, self.bt, transitions).await;
        self.written = Some(desired);
        self.wrote = true;
        Ok(())
    }

    /// Drives `run` (a migration or a drop) to its end; once `contention` says the lock is taken,
    /// writes a `Waiting` status naming the holder at once and refreshes its tries and time waited
    /// every [`WAIT_PROGRESS`] until the lock is ours or the run ends. Once `holding` says the
    /// lock is held and the change has begun, a run still going after [`MIGRATING_AFTER`] writes
    /// `Acquired` / `Migrating`. Status write failures are logged: the run goes on. Every write
    /// here is awaited before this returns, so the caller's final status is always the last one.
    ///
    /// The tries shown while waiting follow the lock's poll schedule (the count at the end of a
    /// wait, written with the outcome, is the one the lock loop made).
    pub(super) async fn run_reporting_waits<F: Future>(
        &mut self,
        plan: &Plan,
        contention: Contention,
        holding: Option<Holding>,
        run: F,
    ) -> F::Output {
        tokio::pin!(run);
        let mut contended = Some(contention.0);
        let mut held = holding.map(|h| h.0);
        let mut waiting: Option<(Option<Holder>, Instant)> = None;
        let mut progress: Option<tokio::time::Interval> = None;
        let mut migrating: Option<(tokio::time::Instant, LockObservation)> = None;
        loop {
            let wake = tokio::select! {
                biased;
                output = &mut run => Wake::Finished(output),
                Some((holder, since)) = once(&mut contended) => Wake::Contended(holder, since),
                Some((at, stamp)) = once(&mut held) => Wake::Holding(at, stamp),
                _ = async {
                    match progress.as_mut() {
                        Some(interval) => interval.tick().await,
                        None => std::future::pending().await,
                    }
                } => Wake::RefreshWait,
                () = async {
                    match &migrating {
                        Some((due, _)) => tokio::time::sleep_until(*due).await,
                        None => std::future::pending().await,
                    }
                } => Wake::ShowMigrating,
            };
            let observed = match wake {
                Wake::Finished(output) => return output,
                Wake::Contended(holder, since) => {
                    let start = tokio::time::Instant::from_std(since) + WAIT_PROGRESS;
                    let mut interval = tokio::time::interval_at(start, WAIT_PROGRESS);
                    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    progress = Some(interval);
                    waiting = Some((holder.clone(), since));
                    waiting_observation(holder, since.elapsed())
                }
                Wake::RefreshWait => match &waiting {
                    Some((holder, since)) => waiting_observation(holder.clone(), since.elapsed()),
                    None => continue,
                },
                Wake::Holding(at, stamp) => {
                    // The wait is over: no more Waiting refreshes.
                    progress = None;
                    let (attempts, waited) = match waiting.take() {
                        Some((_, since)) => {
                            let waited = at.saturating_duration_since(since);
                            (crate::lock::tries_within(waited), waited)
                        }
                        None => (1, Duration::ZERO),
                    };
                    let due = tokio::time::Instant::from_std(at) + MIGRATING_AFTER;
                    migrating = Some((due, LockObservation::acquired(attempts, waited, stamp)));
                    continue;
                }
                Wake::ShowMigrating => match migrating.take() {
                    Some((_, lock)) => Observed::Migrating(lock),
                    None => continue,
                },
            };
            if let Err(error) = self.publish(Some(plan), &observed).await {
                tracing::warn!(error = %crate::report::chain(&error), "writing the in-progress status failed");
            }
        }
    }

    /// After a shutdown cut a lock wait or a run short: writes that nothing happens any more (the
    /// lock as it stood before this pass, so no `Waiting` and no holder), and how far `what` (`the
    /// migration`, `the drop`) had got, so the status never claims a wait that has ended, nor a
    /// rollback after a wait. Failures are logged: the process is stopping.
    ///
    /// Except for the periodic check of a current object (Ready at its target) stopped before it
    /// changed or wrote anything: the status it started from is still all that is known, so it is
    /// left as it is, and the next leader checks again. Writing `Cancelled` there would turn Ready
    /// False on healthy BoxTables at every rollout of the operator.
    pub(super) async fn interrupted(&mut self, plan: &Plan, what: &str, stopped: &Stopped) {
        if !self.wrote && stopped.changed_nothing() && super::schedule::is_current(self.bt) {
            tracing::debug!(table = %plan.table(), "a check of a current table stopped by shutdown before it found anything: status left as it was");
            return;
        }
        if let Some(written) = &mut self.written {
            written.lock = self.bt.status.as_ref().and_then(|s| s.lock.clone());
        }
        let observed = Observed::Failed {
            reason: Reason::Cancelled,
            message: stopped.status_message(&format!("{what} of {}", plan.table())),
            lock: None,
        };
        if let Err(error) = self.publish(Some(plan), &observed).await {
            tracing::warn!(error = %crate::report::chain(&error), "writing the interrupted status failed");
        }
    }

    /// Writes the final status of a pass and decides when to come back. A given-up status says
    /// when the next try is and what brings it forward.
    pub(super) async fn finish(
        self,
        plan: Option<&Plan>,
        observed: Observed,
    ) -> Result<Action, ReconcileError> {
        self.settle(plan, observed).await.map(Action::requeue)
    }

    /// [`InFlight::finish`] for a caller that wants the delay itself: the backoff or the resync
    /// interval, the status written, the pass counted and the next pass scheduled after it.
    pub(super) async fn settle(
        mut self,
        plan: Option<&Plan>,
        observed: Observed,
    ) -> Result<Duration, ReconcileError> {
        let uid = self.bt.uid().unwrap_or_default();
        let ctx = self.ctx;
        let (result, delay) = match &observed {
            Observed::Failed { reason, .. } if !reason.is_stalled() => {
                (ReconcileResult::Retry, ctx.backoff.on_failure(&uid))
            }
            Observed::Failed { .. } | Observed::Conflict { .. } => {
                ctx.backoff.on_success(&uid);
                (ReconcileResult::Stalled, ctx.resync)
            }
            _ => {
                ctx.backoff.on_success(&uid);
                (ReconcileResult::Success, ctx.resync)
            }
        };
        let observed = with_retry_note(observed, plan, delay);
        self.publish(plan, &observed).await?;
        if let Observed::Failed { reason, .. } = &observed {
            ctx.metrics.record_failure(*reason);
        }
        record_result(ctx, result, self.started);
        ctx.schedule
            .record(&uid, &super::schedule::Trigger::of(self.bt), delay);
        Ok(delay)
    }
}

/// Counts how a pass ended and records it as the `outcome` of the pass's `reconcile` span.
pub(super) fn record_result(ctx: &Context, result: ReconcileResult, started: Instant) {
    ctx.metrics.record_reconcile(result, started.elapsed());
    tracing::Span::current().record("outcome", result.as_str());
}

/// What a given-up status adds to its message: when the operator tries again by itself, and what
/// makes it try at once.
pub(super) fn retry_note(delay: Duration) -> String {
    format!(
        "next retry in {} (the resync interval), or at once when the spec or the Secret changes or annotation {RECONCILE_REQUESTED_ANNOTATION} is set to a new value",
        crate::duration::format_duration(Duration::from_secs(delay.as_secs().max(1)))
    )
}

/// `observed` with the retry note appended when it gives up (a conflict becomes the failure it
/// is, so it carries the note too).
fn with_retry_note(observed: Observed, plan: Option<&Plan>, delay: Duration) -> Observed {
    match observed {
        Observed::Failed {
            reason,
            message,
            lock,
        } if reason.is_stalled() => Observed::Failed {
            reason,
            message: format!("{message}; {}", retry_note(delay)),
            lock,
        },
        Observed::Conflict { other } => Observed::Failed {
            reason: Reason::TableConflict,
            message: format!(
                "{}; {}",
                status::conflict_message(plan, &other),
                retry_note(delay)
            ),
            lock: None,
        },
        observed => observed,
    }
}
