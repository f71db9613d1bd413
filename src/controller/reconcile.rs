//! Reconciling one BoxTable: finalizer glue around `apply` (converge the table against its
//! database) and `cleanup` (in `cleanup.rs`); the status each pass writes is handled in `write.rs`,
//! what passes share in `context.rs`, the Secret, target and owner a pass works with in
//! `target.rs`.
//!
//! Only a `deletionPolicy: Drop` BoxTable carries the finalizer: it is added before the first
//! pass changes anything (and when the policy becomes Drop), and removed when the policy becomes
//! Retain, so Retain BoxTables (and their namespaces) can always be deleted, operator or not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::Instrument;

use super::adoption;
use super::cleanup::{Cleanup, cleanup};
use super::conflicts;
use super::context::Context;
use super::error::ReconcileError;
use super::events;
use super::finalizer;
use super::lean::LeanBoxTable;
use super::schedule::Trigger;
use super::secrets::{DatabaseSecret, SecretError};
use super::target::{application_name, owner_of, read_secret, secret_source, target};
use super::wording::{Stopped, boxtable_field, deadline_message, not_done};
use super::workers::{Entry, Lane, Worker};
use super::write::InFlight;
use crate::crd::BoxTable;
use crate::migrate::{Plan, RunPath};
use crate::pass::{self, PassError, Target};
use crate::reason::Reason;
use crate::report::chain;
use crate::status::Observed;
use crate::telemetry::{LockOutcome, ReconcileResult};
use crate::waits::{Cut, Waits};

/// Reconciles one BoxTable: `apply` while it lives (the finalizer added first), `cleanup` once it
/// is being deleted, and the finalizer let go only when cleanup says the deletion is finished.
///
/// # Errors
/// [`ReconcileError`] for failures that need a retry with backoff.
///
/// # Idempotency
/// Every step converges: an up-to-date table is left alone, an unchanged status is not written,
/// and a deletion that finished is never run again.
pub async fn reconcile(bt: Arc<BoxTable>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let namespace = bt.namespace().ok_or_else(|| ReconcileError::NoNamespace {
        name: bt.name_any(),
    })?;
    let uid = bt.uid().unwrap_or_default();
    if ctx.schedule.is_released(&uid) {
        // A trigger queued before the finalizer went; the cache has not seen the object go yet.
        return Ok(Action::await_change());
    }
    let boxtable = boxtable_field(&bt);
    let trigger = Trigger::of(&bt);
    let object = ObjectRef::from_obj(bt.as_ref());
    // Every pass runs on one of the pool's workers (see `workers`). Without one it is queued
    // there and this reconcile ends: the pool sends the object back when a worker is kept for
    // it. The requeue after a resync interval only covers a worker kept too long for it.
    // Work (anything but the periodic check of a current object) goes ahead of checks.
    let lane = if super::schedule::is_current(&bt) {
        Lane::Check
    } else {
        Lane::Work
    };
    let worker = match ctx.workers.claim(&object, lane) {
        // Queued earlier because it was due then; whether it was is not asked again (a Secret
        // change that made it due, for one, is only told once).
        Some(Entry::Run(worker)) => worker,
        Some(Entry::Queued) => return Ok(Action::requeue(ctx.resync)),
        None => {
            if let Some(wait) = ctx.schedule.not_due_spread(&uid, &bt, &trigger, ctx.resync) {
                tracing::debug!(boxtable = %boxtable, due_in = ?wait, "not due: current, or no spec, deletion, consent, request or secret change since the last pass");
                return Ok(Action::requeue(wait));
            }
            if ctx.schedule.newly_requested(&uid, &trigger) {
                tracing::info!(boxtable = %boxtable, "reconcile requested by annotation; retrying now with the backoff reset");
                ctx.backoff.on_success(&uid);
            }
            match ctx.workers.enter(&namespace, &object, &ctx.requeue, lane) {
                Entry::Run(worker) => worker,
                Entry::Queued => {
                    tracing::debug!(boxtable = %boxtable, ?lane, "no free worker: queued until one is kept for it");
                    return Ok(Action::requeue(ctx.resync));
                }
            }
        }
    };
    if ctx.shutdown.is_cancelled() {
        return Ok(Action::await_change());
    }
    // One trace per pass (not a child of whatever polled the controller), with the pass's
    // steps as child spans: the Secret read, the lock wait, the migration or the drop. Every
    // line logged in it carries `boxtable`.
    let span = tracing::info_span!(
        parent: None,
        "reconcile",
        boxtable = %boxtable,
        table = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    // The pass's own state (tens of KiB: every step's locals) is allocated only once it has a
    // worker, so a reconcile that only queues its object stays small.
    let result = Box::pin(due(bt.clone(), ctx.clone(), namespace, &worker).instrument(span)).await;
    ctx.memory.settle(&bt);
    result
}

/// A pass that is due: cleanup while deleting, else apply (with the finalizer kept in step).
async fn due(
    bt: Arc<BoxTable>,
    ctx: Arc<Context>,
    namespace: String,
    worker: &Worker,
) -> Result<Action, ReconcileError> {
    let uid = bt.uid().unwrap_or_default();
    let api: Api<BoxTable> = Api::namespaced(ctx.client.clone(), &namespace);
    let _in_flight = ctx.metrics.reconcile_started();
    let started = Instant::now();
    let result = if bt.metadata.deletion_timestamp.is_some() {
        if !finalizer::has(&bt) {
            return Ok(Action::await_change());
        }
        match cleanup(&bt, &ctx).await {
            Ok(Cleanup::Keep(action)) => Ok(action),
            // The deletion is finished: let go of every Secret first (a failure keeps the
            // finalizer, so the release is retried), then of the object.
            Ok(Cleanup::Release) => {
                match super::secret_guard::release_everywhere(&ctx.client, &bt).await {
                    Err(error) => Err(ReconcileError::ReleaseSecret(error)),
                    Ok(()) => match finalizer::remove(&api, &bt).await {
                        Ok(()) => {
                            ctx.schedule.released(&uid);
                            ctx.backoff.on_success(&uid);
                            Ok(Action::await_change())
                        }
                        Err(error) => Err(ReconcileError::RemoveFinalizer(error)),
                    },
                }
            }
            Err(error) => Err(error),
        }
    } else {
        match (finalizer::needed(&bt), finalizer::has(&bt)) {
            (true, false) => match finalizer::add(&api, &bt).await {
                Ok(updated) => apply(&updated, &ctx, worker).await,
                Err(error) => Err(ReconcileError::AddFinalizer(error)),
            },
            // Now Retain: let go of the Secrets first (nothing would release them once the
            // object can go without the operator), then of the object's finalizer.
            (false, true) => {
                match super::secret_guard::release_everywhere(&ctx.client, &bt).await {
                    Err(error) => Err(ReconcileError::ReleaseSecret(error)),
                    Ok(()) => match finalizer::remove(&api, &bt).await {
                        Ok(()) => apply(&bt, &ctx, worker).await,
                        Err(error) => Err(ReconcileError::RemoveFinalizer(error)),
                    },
                }
            }
            _ => apply(&bt, &ctx, worker).await,
        }
    };
    if result.is_err() {
        super::write::record_result(&ctx, ReconcileResult::Retry, started);
    }
    result
}

/// Retry timing for failed passes: exponential backoff with jitter per object.
pub fn error_policy(bt: Arc<BoxTable>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let uid = bt.uid().unwrap_or_default();
    let delay = ctx.backoff.on_failure(&uid);
    // The retry is due after `delay` whatever the pass before recorded: what made this pass due
    // may be gone (a Secret change is told once, and this pass took it).
    ctx.schedule.record(&uid, &Trigger::of(&bt), delay);
    // Not kept for an object that went while its pass ran.
    ctx.memory.settle(&bt);
    tracing::warn!(
        boxtable = %boxtable_field(&bt),
        error = %chain(error),
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

/// What the status says about a Secret that cannot be read: a missing or unselected Secret stalls
/// with its reason; `None` for an API failure, which is retried with backoff.
pub(super) fn secret_failure(error: &SecretError) -> Option<Observed> {
    let reason = match error {
        SecretError::Missing { .. } => Reason::SecretNotFound,
        SecretError::NotSelected { .. } => Reason::SecretNotSelected,
        SecretError::Read { .. } => return None,
    };
    Some(Observed::Failed {
        reason,
        message: chain(error),
        lock: None,
    })
}

/// One pass over a BoxTable that is not being deleted: the plan, the Secret, the conflict check,
/// then the observation (suspended) or the migration, ending in one status write.
///
/// Longer than most: each early end (no plan, no Secret, a conflict, no usable connection) is two
/// lines that end the pass through the same `finish`, and read best in the order a pass meets them.
async fn apply(bt: &BoxTable, ctx: &Context, worker: &Worker) -> Result<Action, ReconcileError> {
    // A Secret that `secretRef` moved away from (or any, once Retain) is let go first, whatever
    // becomes of the spec and of the Secret referenced now.
    if let Err(error) = super::secret_guard::release_stale(&ctx.client, &ctx.holds, bt).await {
        tracing::warn!(error = %chain(&error), "letting go of a secret no longer needed failed");
    }
    let pass = InFlight::new(bt, ctx);
    let plan = match crate::pass::plan::plan(&bt.spec) {
        Ok(plan) => plan.with_owner(owner_of(bt, &pass.namespace, &ctx.cluster_name)),
        Err(error) => {
            let observed = Observed::Failed {
                reason: error.reason(),
                message: chain(&error),
                lock: None,
            };
            return pass.finish(None, observed).await;
        }
    };
    tracing::Span::current().record("table", plan.table().to_string());
    let secret = match read_secret(bt, ctx, &pass.namespace).await {
        Ok(secret) => secret,
        Err(error) => match secret_failure(&error) {
            Some(observed) => return pass.finish(Some(&plan), observed).await,
            None => return Err(ReconcileError::ReadSecret(error)),
        },
    };
    if let Some(other) = conflicting_owner(bt, ctx, &secret).await {
        return pass.finish(Some(&plan), Observed::Conflict { other }).await;
    }
    if super::secret_guard::out_of_date(bt, &secret)
        && let Err(error) = super::secret_guard::sync(
            &ctx.client,
            bt,
            bt.spec.deletion_policy == crate::crd::DeletionPolicy::Drop,
        )
        .await
    {
        tracing::warn!(error = %chain(&error), "keeping the connection secret for a later drop failed");
    }
    let app = application_name(&pass.namespace, &pass.name);
    let source = secret_source(bt, &pass.namespace);
    let target = match target(&secret, &app, &source) {
        Ok(target) => target,
        Err(error) => {
            tracing::warn!(table = %plan.table(), reason = %error.reason(), error = %chain(error), "the secret gives no usable connection");
            let observed = Observed::Failed {
                reason: error.reason(),
                message: chain(error),
                lock: None,
            };
            return pass.finish(Some(&plan), observed).await;
        }
    };
    if bt.spec.suspend {
        let waits = start_waits(ctx, &plan, worker);
        let observed = pass::run(&ctx.sessions, &target, &plan, pass::Observe, waits.token())
            .await
            .unwrap_or_else(|error| pass::failure(&error));
        if matches!(observed, Observed::Failed { .. })
            && let Some(cut) = waits.cut()
        {
            let stopped = Stopped::WaitingForSession;
            return cut_short(
                pass,
                &plan,
                &target,
                "the observation",
                &waits,
                cut,
                &stopped,
            )
            .await;
        }
        return pass.finish(Some(&plan), observed).await;
    }
    migrate(pass, &plan, &target, worker).await
}

/// Starts the clock on a pass's waits (see [`crate::waits`]) and lets the worker pool ask for the
/// worker back while they last.
fn start_waits(ctx: &Context, plan: &Plan, worker: &Worker) -> Waits {
    let waits = Waits::start(
        &ctx.shutdown,
        crate::waits::pass_budget(plan.lock_timeout()),
    );
    worker.watch(&waits);
    waits
}

/// A pass whose waits were cut short: one that gave its worker back to another namespace is
/// queued again at once, with nothing written; one past its budget ends `DeadlineExceeded`
/// (retried with backoff, and a Warning event).
async fn cut_short(
    pass: InFlight<'_>,
    plan: &Plan,
    target: &Target<'_>,
    what: &str,
    waits: &Waits,
    cut: Cut,
    stopped: &Stopped,
) -> Result<Action, ReconcileError> {
    match cut {
        Cut::GaveWay => {
            tracing::debug!(table = %plan.table(), "gave the worker back to another namespace before taking the lock; queued again");
            Ok(Action::requeue(Duration::ZERO))
        }
        Cut::Deadline => {
            let host = target.connection.settings().target();
            let message = deadline_message(
                &format!("{what} of {}", plan.table()),
                stopped,
                &host,
                waits.budget(),
                plan.lock_timeout(),
            );
            tracing::warn!(table = %plan.table(), reason = %Reason::DeadlineExceeded, error = %message, "{}", not_done(Reason::DeadlineExceeded));
            let observed = Observed::Failed {
                reason: Reason::DeadlineExceeded,
                message,
                lock: None,
            };
            pass.finish(Some(plan), observed).await
        }
    }
}

/// `namespace/name` of an older BoxTable that manages `bt`'s table on the same database (as its
/// own Secret says, whichever Secret that is), if any. Only BoxTables naming the same table are
/// looked at, and their Secrets are read as any pass reads them (a LIST by name only for a new
/// resourceVersion).
async fn conflicting_owner(
    bt: &BoxTable,
    ctx: &Context,
    secret: &DatabaseSecret,
) -> Option<String> {
    let mine = conflicts::Database::of(bt, secret.connection.as_ref().ok());
    // Only the cached objects that may name the same table (see `conflicts::TableIndex`).
    let everyone: Vec<Arc<BoxTable>> = ctx
        .tables
        .same_table(bt)
        .iter()
        .filter_map(|object| ctx.store.get(object))
        .collect();
    let mut databases = std::collections::HashMap::new();
    for other in conflicts::seniors(bt, everyone.iter().map(AsRef::as_ref)) {
        let namespace = other.namespace().unwrap_or_default();
        if let Ok(theirs) = read_secret(other, ctx, &namespace).await {
            let database = conflicts::Database::of(other, theirs.connection.as_ref().ok());
            let same = database == mine;
            databases.insert(other.uid(), database);
            if same {
                break;
            }
        }
    }
    conflicts::conflicting_owner(bt, &mine, everyone.iter().map(AsRef::as_ref), |other| {
        databases.get(&other.uid()).cloned()
    })
}

/// Runs the migration, writing a `Waiting` status (with the holder) as soon as the lock is found
/// taken and refreshing it while the wait lasts, `Migrating` if the change itself runs longer than
/// [`super::write::MIGRATING_AFTER`], then the outcome.
///
/// Longer than most: a take-over runs the migration a second time with the same waits, and both
/// runs end in the one match below; the bookkeeping of each ending is in its own function.
async fn migrate(
    mut pass: InFlight<'_>,
    plan: &Plan,
    target: &Target<'_>,
    worker: &Worker,
) -> Result<Action, ReconcileError> {
    let ctx = pass.ctx;
    let mut waits = start_waits(ctx, plan, worker);
    let mut result = run(&mut pass, plan, target, &waits).await;
    // A table recorded as another owner's: taken over when that owner is gone (or the user asked
    // for it), by running once more allowed to replace exactly that record; else refused with
    // how to resolve it. A record that changed in between refuses the second run as well.
    let mut taken_over = None;
    if let Err(PassError::Run {
        source: crate::migrate::RunError::NotOwner { record, .. },
        ..
    }) = &result
    {
        let (bt, namespace) = (pass.bt, pass.namespace.as_str());
        match adoption::judge(
            &ctx.client,
            bt,
            namespace,
            &ctx.cluster_name,
            plan.table(),
            record,
        )
        .await
        {
            adoption::Verdict::TakeOver(uid) => {
                let owner = owner_of(bt, namespace, &ctx.cluster_name).taking_over(&uid);
                let plan = plan.clone().with_owner(owner);
                taken_over = Some(record.clone());
                waits = start_waits(ctx, &plan, worker);
                result = run(&mut pass, &plan, target, &waits).await;
            }
            adoption::Verdict::Refuse(message) => {
                tracing::info!(table = %plan.table(), owner = %record.boxtable, "table refused: another owner's record");
                let observed = Observed::Failed {
                    reason: Reason::TableConflict,
                    message,
                    lock: None,
                };
                return pass.finish(Some(plan), observed).await;
            }
        }
    }
    if let Err(error) = &result
        && let Some(cut) = waits.cut()
    {
        let stopped = Stopped::of(error);
        return cut_short(pass, plan, target, "the migration", &waits, cut, &stopped).await;
    }
    // Whatever is left of the pass does not wait on the database: keep the worker.
    waits.hold();
    if let (Some(record), Ok(_)) = (&taken_over, &result) {
        tracing::info!(table = %plan.table(), from = %record.boxtable, from_uid = %record.uid, "took the table over from an owner that no longer exists");
        events::publish(&ctx.events, pass.bt, vec![events::taken_over(plan, record)]).await;
    }
    let observed = match result {
        Ok(outcome) => {
            announce_success(&pass, plan, &outcome).await;
            Observed::Succeeded(outcome)
        }
        Err(PassError::Run {
            source:
                crate::migrate::RunError::Withdrawn {
                    table,
                    why,
                    transient,
                },
            ..
        }) => {
            // Rolled back and unlocked before anything changed; no status for an object that is
            // gone or going.
            if transient {
                return Err(ReconcileError::Recheck { table, why });
            }
            tracing::info!(table = %table, why = %why, "nothing changed: the BoxTable no longer wants its table changed by this pass");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        Err(error) if error.reason() == Reason::Cancelled => {
            ctx.metrics
                .record_lock(LockOutcome::Cancelled, Duration::ZERO);
            let stopped = Stopped::of(&error);
            tracing::info!(table = %plan.table(), "{}", stopped.log_line("the migration"));
            pass.interrupted(plan, "the migration", &stopped).await;
            return Ok(Action::await_change());
        }
        Err(error) => failed(ctx, plan, &error),
    };
    pass.finish(Some(plan), observed).await
}

/// A failed run as the status shows it, counted (a lock timeout or a lost lock) and logged.
fn failed(ctx: &Context, plan: &Plan, error: &PassError) -> Observed {
    let reason = error.reason();
    match reason {
        Reason::LockTimeout => ctx
            .metrics
            .record_lock(LockOutcome::TimedOut, plan.lock_timeout()),
        Reason::LockLost => ctx.metrics.record_lock(LockOutcome::Lost, Duration::ZERO),
        _ => {}
    }
    tracing::warn!(table = %plan.table(), reason = %reason, error = %error.message(), "{}", not_done(reason));
    crate::pass::failure(error)
}

/// What a successful run tells besides its status: a re-plan after un-suspending and a lock lost
/// at commit as events, the lock wait, blocked sessions and steps applied as metrics, and a log
/// line for a run that changed the table.
async fn announce_success(pass: &InFlight<'_>, plan: &Plan, outcome: &crate::migrate::Outcome) {
    let ctx = pass.ctx;
    if let Some(note) = crate::status::replanned(pass.written.as_ref(), outcome) {
        tracing::info!(table = %plan.table(), note, "re-planned after un-suspending");
        events::publish(&ctx.events, pass.bt, vec![events::replanned(plan, note)]).await;
    }
    if let Some(lock) = outcome.lock {
        ctx.metrics.record_lock(LockOutcome::Acquired, lock.waited);
    }
    ctx.metrics.record_blocked(outcome.blocked);
    let steps = steps_applied(outcome);
    if steps > 0 {
        ctx.metrics.record_migrations(plan.kind(), steps);
        tracing::info!(
            table = %plan.table(),
            path = ?outcome.path,
            from_version = outcome.from_version,
            to_version = outcome.to_version,
            steps,
            duration_ms = u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
            "migrated"
        );
    }
    if outcome.lock_lost_after_commit {
        ctx.metrics.record_lock_lost_after_commit();
        events::publish(
            &ctx.events,
            pass.bt,
            vec![events::lock_lost_after_commit(plan, outcome)],
        )
        .await;
    }
}

/// One run of the migration for `pass` (see [`migrate`]), with its waits and progress reported.
async fn run(
    pass: &mut InFlight<'_>,
    plan: &Plan,
    target: &Target<'_>,
    waits: &Waits,
) -> Result<crate::migrate::Outcome, PassError> {
    let ctx = pass.ctx;
    let (on_waiting, contention) = super::write::contention();
    let (on_holding, holding) = super::write::holding();
    let (api, bt) = (pass.lean.clone(), pass.bt);
    let gate = move || async move {
        // The lock is held: from here on nothing but a shutdown cuts the run (a long index
        // build is never stopped by the pass's budget).
        if !waits.hold() {
            return Err(crate::migrate::runner::Withdrawal {
                why: "the pass's waits were cut short before the lock was held".to_owned(),
                transient: true,
            });
        }
        let verdict = still_wanted(&api, bt).await;
        if verdict.is_ok() {
            on_holding();
        }
        verdict
    };
    let step = pass::Migrate { on_waiting, gate };
    let run = pass::run(&ctx.sessions, target, plan, step, waits.token());
    pass.run_reporting_waits(plan, contention, Some(holding), run)
        .await
}

/// The gate of every migration (see [`crate::migrate::runner::run_gated`]), asked with the table's
/// lock held and before any change: the BoxTable as the API server has it now (a quorum read, not
/// the cache) must be the same object, not being deleted, and, with `deletionPolicy: Drop`, carry
/// the finalizer. Then its deletion cannot finish before this run releases the lock (the drop
/// waits for it), so a table is never created or changed for a BoxTable whose deletion has
/// already passed, however stale the cache that started the pass.
async fn still_wanted(
    api: &Api<LeanBoxTable>,
    bt: &BoxTable,
) -> Result<(), crate::migrate::runner::Withdrawal> {
    use crate::migrate::runner::Withdrawal;
    let stands = |why: &str| Withdrawal {
        why: why.to_owned(),
        transient: false,
    };
    match api
        .get_opt(&bt.name_any())
        .await
        .map(|live| live.map(BoxTable::from))
    {
        Ok(None) => Err(stands("the BoxTable is gone")),
        Ok(Some(live)) if live.uid() != bt.uid() => Err(stands(
            "the BoxTable was replaced by a new object of the same name",
        )),
        Ok(Some(live)) if live.metadata.deletion_timestamp.is_some() => {
            Err(stands("the BoxTable is being deleted"))
        }
        Ok(Some(live)) if finalizer::needed(&live) && !finalizer::has(&live) => Err(stands(
            "the Drop BoxTable does not carry its finalizer yet (the next pass adds it)",
        )),
        Ok(Some(_)) => Ok(()),
        Err(error) => Err(Withdrawal {
            why: chain(&error),
            transient: true,
        }),
    }
}

/// The migration steps a run applied, as `boxtable_migrations_applied_total` counts them: a fresh
/// install is one step (the table created at its target version, one history row, as `plan`
/// shows it), an upgrade one step per version it passed, an up-to-date check none.
pub fn steps_applied(outcome: &crate::migrate::Outcome) -> u64 {
    match outcome.path {
        RunPath::UpToDate => 0,
        RunPath::Fresh => 1,
        RunPath::Bootstrap | RunPath::Normal => {
            u64::from(outcome.to_version.saturating_sub(outcome.from_version))
        }
    }
}

#[cfg(test)]
mod waiting_size {
    /// The size of the future `f` returns, without calling it.
    fn future_size<A, B, F, Fut>(_: F) -> usize
    where
        F: Fn(A, B) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    #[test]
    fn a_reconcile_is_small_until_it_has_a_worker_whatever_the_pass_holds_once_it_runs() {
        // With the pass inline this was 39,096 bytes (debug build), and kube-runtime's runner
        // holds one per reconcile in flight: a restart with 10,000 due held 380 MiB at once.
        let waiting = future_size(super::reconcile);
        assert!(
            waiting <= 2048,
            "a reconcile takes {waiting} bytes before it has a worker; box what it holds once it runs"
        );
    }
}
