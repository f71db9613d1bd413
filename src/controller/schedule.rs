//! When each BoxTable is next due, so that the watch events caused by the operator's own status
//! writes do not start another pass (which, for a contended lock, would wait all over again).
//!
//! A pass runs when the object is new, its [`Trigger`] changed (generation, deletion, the
//! drop-consent annotation, the reconcile-request annotation), its Secret changed, or its requeue time has come; any other trigger
//! (above all the watch event of the operator's own status write) is answered with "come back at
//! the due time". So a deletion that cannot finish makes one pass per backoff step, not one per
//! status write.
//!
//! Objects whose finalizer the operator has let go are remembered until the cache sees them go
//! (at most for a while), so that a trigger still queued for them does not run the drop again.
//! Every entry of an object is forgotten once the cache no longer has it (see
//! [`super::memory`]): a Retain object deleted, a Drop object released, one deleted while failing.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use kube::ResourceExt;
use tokio::time::Instant;

use crate::crd::{
    ADOPT_ANNOTATION, BoxTable, CONFIRM_DROP_ANNOTATION, RECONCILE_REQUESTED_ANNOTATION,
};

/// How long a released object is remembered (far longer than a queued trigger can wait).
const RELEASED_MEMORY: Duration = Duration::from_secs(600);

/// What about an object, when it changes, makes a pass due at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    generation: i64,
    deleting: bool,
    confirm_drop: Option<String>,
    requested: Option<String>,
    adopt: Option<String>,
}

impl Trigger {
    /// The trigger of `bt` as it is now.
    pub fn of(bt: &BoxTable) -> Self {
        Self {
            generation: bt.metadata.generation.unwrap_or(0),
            deleting: bt.metadata.deletion_timestamp.is_some(),
            confirm_drop: bt.annotations().get(CONFIRM_DROP_ANNOTATION).cloned(),
            requested: bt
                .annotations()
                .get(RECONCILE_REQUESTED_ANNOTATION)
                .cloned(),
            adopt: bt.annotations().get(ADOPT_ANNOTATION).cloned(),
        }
    }
}

#[derive(Debug, Clone)]
struct Due {
    trigger: Trigger,
    at: Instant,
}

/// Per-object due times and pending Secret changes, keyed by uid.
#[derive(Debug, Default)]
pub struct Schedule {
    due: Mutex<HashMap<String, Due>>,
    secret_changed: Mutex<HashSet<String>>,
    released: Mutex<HashMap<String, Instant>>,
}

impl Schedule {
    /// Records that `uid`, as `trigger`, finished a pass and is next due after `delay`.
    pub fn record(&self, uid: &str, trigger: &Trigger, delay: Duration) {
        if let Ok(mut due) = self.due.lock() {
            due.insert(
                uid.to_owned(),
                Due {
                    trigger: trigger.clone(),
                    at: Instant::now() + delay,
                },
            );
        }
    }

    /// Records that `uid`'s finalizer was let go: its deletion is finished, and nothing more is
    /// to be done for it.
    pub fn released(&self, uid: &str) {
        self.forget(uid);
        if let Ok(mut released) = self.released.lock() {
            let now = Instant::now();
            released.retain(|_, at| now.duration_since(*at) < RELEASED_MEMORY);
            released.insert(uid.to_owned(), now);
        }
    }

    /// Whether `uid`'s finalizer was let go (see [`Schedule::released`]).
    pub fn is_released(&self, uid: &str) -> bool {
        self.released
            .lock()
            .map(|released| released.contains_key(uid))
            .unwrap_or(false)
    }

    /// Marks `uid`'s Secret as changed: its next trigger runs a pass.
    pub fn secret_changed(&self, uid: &str) {
        if let Ok(mut changed) = self.secret_changed.lock() {
            changed.insert(uid.to_owned());
        }
    }

    /// Forgets when `uid` is due and whether its Secret changed (its finalizer was let go).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut due) = self.due.lock() {
            due.remove(uid);
        }
        if let Ok(mut changed) = self.secret_changed.lock() {
            changed.remove(uid);
        }
    }

    /// Forgets everything about `uid`, released or not: the object is gone from the cache, so no
    /// trigger can start a pass for it any more.
    pub fn gone(&self, uid: &str) {
        self.forget(uid);
        if let Ok(mut released) = self.released.lock() {
            released.remove(uid);
        }
    }

    /// Forgets every object for which `live(uid)` is false.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        if let Ok(mut due) = self.due.lock() {
            due.retain(|uid, _| live(uid));
        }
        if let Ok(mut changed) = self.secret_changed.lock() {
            changed.retain(|uid| live(uid));
        }
        if let Ok(mut released) = self.released.lock() {
            released.retain(|uid, _| live(uid));
        }
    }

    /// How many entries are kept (due times, Secret changes, released objects).
    pub fn entries(&self) -> usize {
        let due = self.due.lock().map_or(0, |d| d.len());
        let changed = self.secret_changed.lock().map_or(0, |c| c.len());
        let released = self.released.lock().map_or(0, |r| r.len());
        due + changed + released
    }

    /// Whether `trigger` carries a reconcile request the last recorded pass of `uid` did not see
    /// (a new value of the annotation; a first pass sees no request as new).
    pub fn newly_requested(&self, uid: &str, trigger: &Trigger) -> bool {
        let Ok(due) = self.due.lock() else {
            return false;
        };
        due.get(uid).is_some_and(|seen| {
            trigger.requested.is_some() && seen.trigger.requested != trigger.requested
        })
    }

    /// `None` when a pass should run now; otherwise how long until the object is due.
    pub fn not_due(&self, uid: &str, trigger: &Trigger) -> Option<Duration> {
        if self
            .secret_changed
            .lock()
            .map(|mut c| c.remove(uid))
            .unwrap_or(true)
        {
            return None;
        }
        let due = self.due.lock().ok()?.get(uid).cloned()?;
        if due.trigger != *trigger {
            return None;
        }
        let now = Instant::now();
        (due.at > now).then(|| due.at - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(generation: i64) -> Trigger {
        Trigger {
            generation,
            deleting: false,
            confirm_drop: None,
            requested: None,
            adopt: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_object_is_due_at_once() {
        assert_eq!(Schedule::default().not_due("a", &at(1)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trigger_before_the_due_time_waits_for_it() {
        let schedule = Schedule::default();
        schedule.record("a", &at(1), Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(schedule.not_due("a", &at(1)), Some(Duration::from_secs(50)));
        tokio::time::advance(Duration::from_secs(50)).await;
        assert_eq!(schedule.not_due("a", &at(1)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spec_change_or_a_secret_change_runs_at_once() {
        let schedule = Schedule::default();
        schedule.record("a", &at(1), Duration::from_secs(60));
        assert_eq!(schedule.not_due("a", &at(2)), None);
        schedule.secret_changed("a");
        assert_eq!(schedule.not_due("a", &at(1)), None);
        assert!(
            schedule.not_due("a", &at(1)).is_some(),
            "the secret change is consumed once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn deletion_or_drop_consent_runs_at_once() {
        let schedule = Schedule::default();
        let deleting = Trigger {
            deleting: true,
            ..at(1)
        };
        schedule.record("a", &at(1), Duration::from_secs(60));
        assert_eq!(schedule.not_due("a", &deleting), None);
        schedule.record("a", &deleting, Duration::from_secs(60));
        assert!(
            schedule.not_due("a", &deleting).is_some(),
            "a status write is no trigger"
        );
        let confirmed = Trigger {
            confirm_drop: Some("public.outbox".to_owned()),
            ..deleting
        };
        assert_eq!(schedule.not_due("a", &confirmed), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_reconcile_request_runs_at_once_and_is_new_only_once() {
        let schedule = Schedule::default();
        let requested = |value: &str| Trigger {
            requested: Some(value.to_owned()),
            ..at(1)
        };
        schedule.record("a", &at(1), Duration::from_secs(300));
        assert!(schedule.not_due("a", &at(1)).is_some());
        assert_eq!(schedule.not_due("a", &requested("t1")), None);
        assert!(schedule.newly_requested("a", &requested("t1")));
        schedule.record("a", &requested("t1"), Duration::from_secs(300));
        assert!(!schedule.newly_requested("a", &requested("t1")));
        assert!(schedule.not_due("a", &requested("t1")).is_some());
        assert!(schedule.newly_requested("a", &requested("t2")));
        assert!(
            !schedule.newly_requested("b", &requested("t1")),
            "a first pass"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_object_leaves_no_entry_released_or_not() {
        let schedule = Schedule::default();
        schedule.record("a", &at(1), Duration::from_secs(60));
        schedule.secret_changed("a");
        schedule.released("b");
        schedule.record("c", &at(1), Duration::from_secs(60));
        assert_eq!(
            schedule.entries(),
            4,
            "a's due time and Secret change, b, c"
        );
        schedule.gone("a");
        schedule.gone("b");
        assert!(!schedule.is_released("b"));
        assert_eq!(schedule.entries(), 1);
        schedule.retain(|uid| uid != "c");
        assert_eq!(schedule.entries(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_object_is_remembered_for_a_while() {
        let schedule = Schedule::default();
        schedule.released("a");
        assert!(schedule.is_released("a") && !schedule.is_released("b"));
        tokio::time::advance(RELEASED_MEMORY).await;
        schedule.released("b");
        assert!(!schedule.is_released("a"), "old entries are purged");
    }
}
