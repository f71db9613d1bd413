//! One pass over one BoxTable: computing its status, writing it only when it changed, publishing
//! the transitions as events, and deciding when the object is due again.

use std::time::Instant;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;

use super::events;
use super::reconcile::{Context, ReconcileError};
use crate::crd::{BoxTable, BoxTableStatus, FIELD_MANAGER};
use crate::migrate::Plan;
use crate::reason::Reason;
use crate::status::{self, Observed};
use crate::telemetry::ReconcileResult;

/// A pass in progress for one object: what is known and what was last written.
pub(super) struct Pass<'a> {
    pub(super) bt: &'a BoxTable,
    pub(super) ctx: &'a Context,
    pub(super) api: &'a Api<BoxTable>,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) written: Option<BoxTableStatus>,
    pub(super) started: Instant,
}

impl<'a> Pass<'a> {
    pub(super) fn new(bt: &'a BoxTable, ctx: &'a Context, api: &'a Api<BoxTable>) -> Self {
        Self {
            bt,
            ctx,
            api,
            namespace: bt.namespace().unwrap_or_default(),
            name: bt.name_any(),
            written: bt.status.clone(),
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
        self.api
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
        let transitions = events::transitions(self.written.as_ref(), &desired);
        events::publish(&self.ctx.recorder, self.bt, transitions).await;
        self.written = Some(desired);
        Ok(())
    }

    /// After a shutdown cut a lock wait or a run short: writes that nothing happens any more (the
    /// lock as it stood before this pass, so no `Waiting` and no holder), so the status never
    /// claims a wait that has ended. Failures are logged: the process is stopping.
    pub(super) async fn interrupted(&mut self, plan: &Plan, what: &str) {
        if let Some(written) = &mut self.written {
            written.lock = self.bt.status.as_ref().and_then(|s| s.lock.clone());
        }
        let observed = Observed::Failed {
            reason: Reason::Cancelled,
            message: format!(
                "{what} of {} was interrupted by an operator shutdown and rolled back; the next operator replica runs it again",
                plan.table
            ),
            lock: None,
        };
        if let Err(error) = self.publish(Some(plan), &observed).await {
            tracing::warn!(error = %crate::report::chain(&error), "writing the interrupted status failed");
        }
    }

    /// Writes the final status of a pass and decides when to come back.
    pub(super) async fn finish(
        mut self,
        plan: Option<&Plan>,
        observed: Observed,
    ) -> Result<Action, ReconcileError> {
        self.publish(plan, &observed).await?;
        let uid = self.bt.uid().unwrap_or_default();
        let metrics = &self.ctx.metrics;
        let elapsed = self.started.elapsed();
        let (result, delay) = match &observed {
            Observed::Failed { reason, .. } if !reason.is_stalled() => {
                metrics.record_failure(*reason);
                (ReconcileResult::Retry, self.ctx.backoff.on_failure(&uid))
            }
            Observed::Failed { reason, .. } => {
                metrics.record_failure(*reason);
                self.ctx.backoff.on_success(&uid);
                (ReconcileResult::Stalled, self.ctx.resync)
            }
            Observed::Conflict { .. } => {
                metrics.record_failure(Reason::TableConflict);
                (ReconcileResult::Stalled, self.ctx.resync)
            }
            _ => {
                self.ctx.backoff.on_success(&uid);
                (ReconcileResult::Success, self.ctx.resync)
            }
        };
        metrics.record_reconcile(result, elapsed);
        self.ctx
            .schedule
            .record(&uid, &super::schedule::Trigger::of(self.bt), delay);
        Ok(Action::requeue(delay))
    }
}
