//! The gauges counted over the BoxTables in the controller's cache at each scrape: how many are in
//! each state and why (`boxtable_objects{state,reason}`), and how many have drifted from their
//! recorded version's shape (`boxtable_drifted`). Computed from the cache, never kept up to date
//! by hand, so a deleted BoxTable stops counting as soon as the cache sees it go.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::crd::{BoxTable, DRIFTED, RECONCILING, STALLED};
use crate::reason::Reason;

/// Where the BoxTables come from at a scrape (the controller's cache, one per watched scope).
pub trait ObjectSource: Send + Sync {
    /// Every BoxTable known now.
    fn boxtables(&self) -> Vec<Arc<BoxTable>>;
}

/// Which kstatus state a BoxTable's conditions put it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectState {
    /// `Ready` is True.
    Ready,
    /// `Reconciling` is True: waiting, migrating, retrying, deleting.
    Reconciling,
    /// `Stalled` is True: given up until something changes.
    Stalled,
    /// `suspend: true`: observed only.
    Suspended,
    /// No condition yet: the operator has not reported on it.
    Pending,
}

impl ObjectState {
    /// Every state.
    pub const ALL: [ObjectState; 5] = [
        ObjectState::Ready,
        ObjectState::Reconciling,
        ObjectState::Stalled,
        ObjectState::Suspended,
        ObjectState::Pending,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectState::Ready => "ready",
            ObjectState::Reconciling => "reconciling",
            ObjectState::Stalled => "stalled",
            ObjectState::Suspended => "suspended",
            ObjectState::Pending => "pending",
        }
    }
}

/// The `reason` label before the first status (no condition).
pub const NO_REASON: &str = "None";
/// The `reason` label for a reason this operator does not know (written by another version).
pub const UNKNOWN_REASON: &str = "Unknown";

/// A BoxTable's state and the reason its conditions carry, from the status alone.
pub fn state_of(bt: &BoxTable) -> (ObjectState, &'static str) {
    let Some((status, ready)) = bt
        .status
        .as_ref()
        .and_then(|status| Some((status, status.ready()?)))
    else {
        return (ObjectState::Pending, NO_REASON);
    };
    let reason = ready.reason.map_or(UNKNOWN_REASON, Reason::as_str);
    let state = if ready.is_true() {
        ObjectState::Ready
    } else if status.is_true(STALLED) {
        ObjectState::Stalled
    } else if status.is_true(RECONCILING) {
        ObjectState::Reconciling
    } else if ready.reason == Some(Reason::Suspended) {
        ObjectState::Suspended
    } else {
        ObjectState::Pending
    };
    (state, reason)
}

/// Whether a BoxTable's `Drifted` condition is True.
pub fn is_drifted(bt: &BoxTable) -> bool {
    bt.status.as_ref().is_some_and(|s| s.is_true(DRIFTED))
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, EncodeLabelSet)]
struct ObjectLabels {
    state: &'static str,
    reason: &'static str,
}

/// The gauges of this module and the sources they count.
#[derive(Default)]
pub(super) struct ObjectGauges {
    sources: Vec<Arc<dyn ObjectSource>>,
    by_state: Family<ObjectLabels, Gauge>,
    drifted: Gauge,
    /// Every (state, reason) pair given a series so far; also serialises concurrent refreshes.
    seen: Mutex<BTreeSet<ObjectLabels>>,
}

impl std::fmt::Debug for ObjectGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectGauges")
            .field("sources", &self.sources.len())
            .finish_non_exhaustive()
    }
}

impl ObjectGauges {
    /// Registers `boxtable_objects` in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let gauges = Self::default();
        registry.register(
            "objects",
            "BoxTables by state (ready, reconciling, stalled, suspended, pending) and the reason of their Ready condition",
            gauges.by_state.clone(),
        );
        registry.register(
            "drifted",
            "BoxTables whose table no longer has the shape of its recorded version (condition Drifted is True)",
            gauges.drifted.clone(),
        );
        gauges
    }

    /// Counts from `source` too from now on.
    pub(super) fn add_source(&mut self, source: Arc<dyn ObjectSource>) {
        self.sources.push(source);
    }

    /// Recounts from the sources. A (state, reason) pair seen before and gone now
    /// reads 0 rather than vanishing.
    pub(super) fn refresh(&self) {
        let mut counts: BTreeMap<ObjectLabels, i64> = BTreeMap::new();
        let mut drifted = 0;
        for bt in self.sources.iter().flat_map(|s| s.boxtables()) {
            drifted += i64::from(is_drifted(&bt));
            let (state, reason) = state_of(&bt);
            *counts
                .entry(ObjectLabels {
                    state: state.as_str(),
                    reason,
                })
                .or_default() += 1;
        }
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        self.drifted.set(drifted);
        for labels in seen.iter() {
            counts.entry(labels.clone()).or_default();
        }
        for state in ObjectState::ALL {
            // Every state has a series from the start (with the reason it has before a status).
            counts
                .entry(ObjectLabels {
                    state: state.as_str(),
                    reason: NO_REASON,
                })
                .or_default();
        }
        for (labels, count) in counts {
            self.by_state.get_or_create(&labels).set(count);
            seen.insert(labels);
        }
    }
}
