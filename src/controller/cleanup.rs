//! Deleting a BoxTable. `Retain` lets it go. `Drop` lets it go only once the deletion is provably
//! finished: the table dropped (it was this BoxTable's, and the user consented to the data it
//! held), already gone, or not this BoxTable's to drop (its ownership record names another
//! BoxTable, or none). Everything else keeps the finalizer and says why in status and events: a
//! drop waiting for the lock, blocked for consent or by `suspend`, failing, or cut short by a
//! shutdown (the next replica resumes it).

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::context::Context;
use super::error::ReconcileError;
use super::events::{self, Transition};
use super::target::{application_name, owner_of, read_secret, secret_source, target};
use super::wording::Stopped;
use super::write::InFlight;
use crate::crd::{BoxTable, CONFIRM_DROP_ANNOTATION, DeletionPolicy, LockState};
use crate::migrate::ownership::Origin;
use crate::migrate::{DropBlock, DropOutcome, DropRequest, DropVerdict, Plan, Rows};
use crate::reason::Reason;
use crate::report::chain;
use crate::status::{LockObservation, Observed};
use crate::telemetry::{DropResult, LockOutcome, ReconcileResult};

/// What a cleanup pass decided about the finalizer.
#[derive(Debug)]
pub(super) enum Cleanup {
    /// The deletion is finished: let the object go.
    Release,
    /// Keep the finalizer; come back as the action says.
    Keep(Action),
}

/// The finalizer's pass over a deleted BoxTable: a Retain lets it go at once; a Drop says
/// `Deleting`, reads the Secret and drops the table under the lock if the BoxTable owns it and
/// consented, keeping the finalizer (with a status saying why) until the drop has a verdict.
///
/// Longer than most: like [`super::reconcile`]'s `apply`, a run of early ends, each keeping the
/// finalizer with its own hint, in the order a deletion meets them.
pub(super) async fn cleanup(bt: &BoxTable, ctx: &Context) -> Result<Cleanup, ReconcileError> {
    if bt.spec.deletion_policy == DeletionPolicy::Retain {
        return Ok(Cleanup::Release);
    }
    let fallback_wait = bt
        .status
        .as_ref()
        .and_then(|s| s.lock.as_ref())
        .and_then(|l| l.timeout_seconds)
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok());
    let Ok(plan) = crate::pass::plan::teardown_plan(&bt.spec, fallback_wait) else {
        // The table name never resolved (it is immutable), so no run ever touched a table.
        tracing::info!("spec names no valid table; nothing to drop");
        return Ok(Cleanup::Release);
    };
    tracing::Span::current().record("table", plan.table().to_string());
    let mut pass = InFlight::new(bt, ctx);
    if !already_deleting(&pass) {
        pass.publish(
            Some(&plan),
            &Observed::Deleting {
                policy: DeletionPolicy::Drop,
                managed_elsewhere: managed_elsewhere(bt),
            },
        )
        .await?;
    }
    let secret = match read_secret(bt, ctx, &pass.namespace).await {
        Ok(secret) => secret,
        Err(error) => {
            let hint = "restore the secret, or set spec.deletionPolicy to Retain to delete without dropping";
            return keep_failed(pass, &plan, &chain(&error), hint, None).await;
        }
    };
    let app = application_name(&pass.namespace, &pass.name);
    let source = secret_source(bt, &pass.namespace);
    let target = match target(&secret, &app, &source) {
        Ok(target) => target,
        Err(error) => {
            let hint = "correct the secret, or set spec.deletionPolicy to Retain to delete without dropping";
            return keep_failed(pass, &plan, &chain(error), hint, None).await;
        }
    };
    let request = DropRequest {
        owner: owner_of(bt, &pass.namespace, &ctx.cluster_name),
        consent: consented(bt, &plan),
        suspended: bt.spec.suspend,
    };
    let (on_waiting, contention) = super::write::contention();
    let step = crate::pass::DropTable {
        request: &request,
        on_waiting,
    };
    let run = crate::pass::run(&ctx.sessions, &target, &plan, step, &ctx.shutdown);
    let result = pass.run_reporting_waits(&plan, contention, None, run).await;
    let table = plan.table().to_string();
    match result {
        Ok(outcome) => drop_ran(pass, &plan, outcome).await,
        Err(error) if error.reason() == Reason::Cancelled => {
            ctx.metrics
                .record_lock(LockOutcome::Cancelled, Duration::ZERO);
            let stopped = Stopped::of(&error);
            tracing::info!(table = %table, "{}; the finalizer stays for the next replica", stopped.log_line("the drop"));
            pass.interrupted(&plan, "the drop", &stopped).await;
            Ok(Cleanup::Keep(Action::await_change()))
        }
        Err(error) => {
            if error.reason() == Reason::LockTimeout {
                ctx.metrics
                    .record_lock(LockOutcome::TimedOut, plan.lock_timeout());
            }
            let lock = crate::pass::failure(&error).into_lock();
            let hint =
                "deletion waits until the drop succeeds (or set spec.deletionPolicy to Retain)";
            keep_failed(pass, &plan, &error.message(), hint, lock).await
        }
    }
}

/// A drop that ran to its verdict: dropped, already gone or kept lets the object go (with an
/// event saying which); blocked keeps the finalizer ([`keep_blocked`]).
async fn drop_ran(
    pass: InFlight<'_>,
    plan: &Plan,
    outcome: DropOutcome,
) -> Result<Cleanup, ReconcileError> {
    let (ctx, bt) = (pass.ctx, pass.bt);
    let table = plan.table().to_string();
    ctx.metrics
        .record_lock(LockOutcome::Acquired, outcome.lock.waited);
    ctx.metrics.record_blocked(outcome.blocked);
    let (result, warning, reason, note) =
        match ended(&table, &outcome.verdict, outcome.history_rows_deleted) {
            Ok(ended) => ended,
            Err(block) => {
                ctx.metrics.record_drop(DropResult::Blocked);
                let message = blocked_message(bt, &pass.namespace, &table, block);
                let lock = released_lock(outcome.lock);
                return keep_blocked(pass, plan, &message, lock).await;
            }
        };
    ctx.metrics.record_drop(result);
    tracing::info!(table = %table, reason = %reason, "{note}");
    events::publish(
        &ctx.events,
        bt,
        vec![Transition {
            warning,
            reason,
            action: "Drop",
            note,
        }],
    )
    .await;
    super::write::record_result(ctx, ReconcileResult::Success, pass.started);
    Ok(Cleanup::Release)
}

/// How a drop that ended reads: its metric result, whether it is a Warning, its reason and its
/// note; or, for a drop that has not ended, what blocks it (see [`keep_blocked`]).
fn ended(
    table: &str,
    verdict: &DropVerdict,
    history_rows: u64,
) -> Result<(DropResult, bool, Reason, String), DropBlock> {
    Ok(match verdict {
        DropVerdict::Blocked(block) => return Err(*block),
        DropVerdict::Dropped { origin, rows } => (
            DropResult::Dropped,
            false,
            Reason::Dropped,
            format!(
                "dropped {table} ({}) and {history_rows} history rows{}",
                origin_text(*origin),
                rows_text(*rows)
                    .map(|r| format!("; it held {r}"))
                    .unwrap_or_default()
            ),
        ),
        DropVerdict::AlreadyGone => (
            DropResult::AlreadyGone,
            false,
            Reason::Dropped,
            format!("{table} was already gone; removed {history_rows} history rows"),
        ),
        DropVerdict::Kept { owner: Some(owner) } => (
            DropResult::Kept,
            true,
            Reason::TableKept,
            format!(
                "kept {table}: it belongs to BoxTable {} (uid {}), not to this one, so this deletion does not drop it",
                owner.boxtable, owner.uid
            ),
        ),
        DropVerdict::Kept { owner: None } => (
            DropResult::Kept,
            true,
            Reason::TableKept,
            format!(
                "kept {table}: it carries no ownership record of this BoxTable (it was made by an application or by hand, was never reconciled by this BoxTable, or was created again after this BoxTable's table went), so this deletion does not drop it; drop it by hand if it should go"
            ),
        ),
    })
}

/// The lock as a drop that took it and let it go again saw it (a first try that got it is no
/// wait, so an unchanged blocked drop does not rewrite its status on every resync).
fn released_lock(report: crate::lock::AcquireReport) -> LockObservation {
    let now = jiff::Timestamp::now();
    let waited = if report.attempts <= 1 {
        Duration::ZERO
    } else {
        report.waited
    };
    LockObservation::released(report.attempts, waited, now, now)
}

/// Whether the status already shows this deletion (so a retry does not flip it back to
/// `Deleting` first, which would write the status twice per pass).
fn already_deleting(pass: &InFlight<'_>) -> bool {
    let Some(status) = &pass.written else {
        return false;
    };
    let ready_reason = status.ready_reason();
    let waiting = status
        .lock
        .as_ref()
        .is_some_and(|l| l.state == LockState::Waiting);
    matches!(
        ready_reason,
        Some(Reason::Deleting | Reason::DropFailed | Reason::DropBlocked)
    ) || (waiting && ready_reason == Some(Reason::WaitingForLock))
}

/// Whether the BoxTable's last pass stalled because another BoxTable manages its table: then its
/// deletion is announced as keeping the table, which the drop's verdict is expected to confirm.
fn managed_elsewhere(bt: &BoxTable) -> bool {
    bt.status
        .as_ref()
        .is_some_and(|status| status.ready_reason() == Some(Reason::TableConflict))
}

/// Whether the confirm-drop annotation names this table exactly as `status.table` shows it
/// (`schema.table`, lowercase): no case folding, no trimming, so a value that only resembles the
/// table never consents to destroying its data.
fn consented(bt: &BoxTable, plan: &Plan) -> bool {
    bt.annotations()
        .get(CONFIRM_DROP_ANNOTATION)
        .is_some_and(|v| *v == plan.table().to_string())
}

fn origin_text(origin: Origin) -> &'static str {
    match origin {
        Origin::Created => "created by this BoxTable",
        Origin::Adopted => "adopted by this BoxTable",
    }
}

/// `1000 rows, 1000 of them undispatched (messages never sent)`, or `None` for an empty table.
fn rows_text(rows: Rows) -> Option<String> {
    if rows.total == 0 {
        return None;
    }
    let noun = if rows.total == 1 { "row" } else { "rows" };
    Some(match rows.undispatched {
        Some(n) => format!(
            "{} {noun}, {n} of them undispatched (messages never sent)",
            rows.total
        ),
        None => format!("{} {noun}", rows.total),
    })
}

/// What a blocked drop says: why, and the exact commands that unblock it either way.
fn blocked_message(bt: &BoxTable, namespace: &str, table: &str, block: DropBlock) -> String {
    let name = bt.name_any();
    let retain = format!(
        "kubectl -n {namespace} patch boxtable {name} --type merge -p '{{\"spec\":{{\"deletionPolicy\":\"Retain\"}}}}'"
    );
    match block {
        DropBlock::Suspended => format!(
            "not dropping {table}: spec.suspend is true, and a suspended BoxTable changes nothing; to drop it, set spec.suspend to false (kubectl -n {namespace} patch boxtable {name} --type merge -p '{{\"spec\":{{\"suspend\":false}}}}'); to keep the table, {retain}"
        ),
        DropBlock::NeedsConsent { origin, rows } => {
            let mut why = Vec::new();
            if let Some(rows) = rows_text(rows) {
                why.push(format!("it holds {rows}"));
            }
            if origin == Origin::Adopted {
                why.push(
                    "it existed before this BoxTable, which adopted rather than created it"
                        .to_owned(),
                );
            }
            format!(
                "not dropping {table}: {}; to drop it and its data, confirm with kubectl -n {namespace} annotate boxtable {name} {CONFIRM_DROP_ANNOTATION}={table}; to keep the table, {retain}",
                why.join(" and ")
            )
        }
    }
}

/// Writes `DropBlocked` (given up: the message says when the next try is) and keeps the
/// finalizer until something changes (the annotation, the spec) or the next resync; it ends as a
/// migration's pass does ([`InFlight::finish`]).
async fn keep_blocked(
    pass: InFlight<'_>,
    plan: &Plan,
    message: &str,
    lock: LockObservation,
) -> Result<Cleanup, ReconcileError> {
    let observed = Observed::Failed {
        reason: Reason::DropBlocked,
        message: message.to_owned(),
        lock: Some(lock),
    };
    pass.finish(Some(plan), observed).await.map(Cleanup::Keep)
}

/// Writes a `DropFailed` status naming the table, the cause and what the user can do, and keeps
/// the finalizer until the next backoff step.
async fn keep_failed(
    pass: InFlight<'_>,
    plan: &Plan,
    cause: &str,
    hint: &str,
    lock: Option<LockObservation>,
) -> Result<Cleanup, ReconcileError> {
    let observed = Observed::Failed {
        reason: Reason::DropFailed,
        message: format!("cannot drop {}: {cause}; {hint}", plan.table()),
        lock,
    };
    let metrics = pass.ctx.metrics.clone();
    let delay = pass.settle(Some(plan), observed).await?;
    metrics.record_drop(DropResult::Failed);
    tracing::warn!(table = %plan.table(), retry_in = ?delay, "drop failed: {cause}");
    Ok(Cleanup::Keep(Action::requeue(delay)))
}
