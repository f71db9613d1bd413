//! Deleting a BoxTable: `Retain` lets it go; `Drop` takes the lock, drops the table and its
//! history rows, and only then lets the finalizer go. A drop that cannot happen says why in status
//! and events, and what the user can do, instead of hanging silently.

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::events;
use super::pass::Pass;
use super::reconcile::{
    Context, ReconcileError, application_name, read_secret, secret_failure, target,
};
use crate::converge;
use crate::crd::{BoxTable, DeletionPolicy};
use crate::migrate::Plan;
use crate::reason::Reason;
use crate::report::chain;
use crate::status::Observed;

pub(super) async fn cleanup(
    bt: &BoxTable,
    ctx: &Context,
    api: &Api<BoxTable>,
) -> Result<Action, ReconcileError> {
    let result = cleanup_table(bt, ctx, api).await;
    if result.is_ok() {
        // The finalizer is about to be removed: forget the object's schedule and failures.
        let uid = bt.uid().unwrap_or_default();
        ctx.schedule.forget(&uid);
        ctx.backoff.on_success(&uid);
    }
    result
}

async fn cleanup_table(
    bt: &BoxTable,
    ctx: &Context,
    api: &Api<BoxTable>,
) -> Result<Action, ReconcileError> {
    if bt.spec.deletion_policy == DeletionPolicy::Retain {
        return Ok(Action::await_change());
    }
    let mut pass = Pass::new(bt, ctx, api);
    let Ok(plan) = crate::plan::plan(&bt.spec) else {
        // An invalid spec never created a table: nothing to drop.
        return Ok(Action::await_change());
    };
    pass.publish(
        Some(&plan),
        &Observed::Deleting {
            policy: DeletionPolicy::Drop,
        },
    )
    .await?;
    let table = plan.table.to_string();
    let secret = match read_secret(bt, ctx, &pass.namespace).await {
        Ok(secret) => secret,
        Err(error) => {
            let reason = secret_failure(&error).map(|_| Reason::SecretNotFound);
            let hint = "restore the secret, or set spec.deletionPolicy to Retain to delete without dropping";
            drop_failed(&mut pass, &plan, &chain(&error), hint).await?;
            return Err(match reason {
                Some(reason) => ReconcileError::Drop { table, reason },
                None => ReconcileError::ReadSecret(error),
            });
        }
    };
    let app = application_name(&pass.namespace, &pass.name);
    let target = target(&secret, &app);
    match converge::drop(&target, &plan, &ctx.shutdown).await {
        Ok(dropped) => {
            let note = if dropped.table_existed {
                format!(
                    "dropped {table} and {} history rows",
                    dropped.history_rows_deleted
                )
            } else {
                format!(
                    "{table} was already gone; removed {} history rows",
                    dropped.history_rows_deleted
                )
            };
            tracing::info!(table = %table, "{note}");
            events::publish(
                &ctx.recorder,
                bt,
                vec![events::Transition {
                    warning: false,
                    reason: Reason::Dropped.as_str(),
                    action: "Drop",
                    note,
                }],
            )
            .await;
            Ok(Action::await_change())
        }
        Err(error) if error.reason() == Reason::Cancelled => Ok(Action::await_change()),
        Err(error) => {
            let hint =
                "deletion waits until the drop succeeds (or set spec.deletionPolicy to Retain)";
            drop_failed(&mut pass, &plan, &chain(&error), hint).await?;
            Err(ReconcileError::Drop {
                table,
                reason: error.reason(),
            })
        }
    }
}

/// Writes a `DropFailed` status naming the table, the cause and what the user can do.
async fn drop_failed(
    pass: &mut Pass<'_>,
    plan: &Plan,
    cause: &str,
    hint: &str,
) -> Result<(), ReconcileError> {
    let observed = Observed::Failed {
        reason: Reason::DropFailed,
        message: format!("cannot drop {}: {cause}; {hint}", plan.table),
        lock: None,
    };
    pass.publish(Some(plan), &observed).await
}
