//! When each BoxTable is next due, so that the watch events caused by the operator's own status
//! writes do not start another pass (which, for a contended lock, would wait all over again).
//!
//! A pass runs when the object is new, its generation changed, its Secret changed, or its requeue
//! time has come; any other trigger is answered with "come back at the due time".

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
struct Due {
    generation: i64,
    at: Instant,
}

/// Per-object due times and pending Secret changes, keyed by uid.
#[derive(Debug, Default)]
pub struct Schedule {
    due: Mutex<HashMap<String, Due>>,
    secret_changed: Mutex<HashSet<String>>,
}

impl Schedule {
    /// Records that `uid` at `generation` finished a pass and is next due after `delay`.
    pub fn record(&self, uid: &str, generation: i64, delay: Duration) {
        if let Ok(mut due) = self.due.lock() {
            due.insert(
                uid.to_owned(),
                Due {
                    generation,
                    at: Instant::now() + delay,
                },
            );
        }
    }

    /// Marks `uid`'s Secret as changed: its next trigger runs a pass.
    pub fn secret_changed(&self, uid: &str) {
        if let Ok(mut changed) = self.secret_changed.lock() {
            changed.insert(uid.to_owned());
        }
    }

    /// Forgets `uid` (after deletion).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut due) = self.due.lock() {
            due.remove(uid);
        }
        if let Ok(mut changed) = self.secret_changed.lock() {
            changed.remove(uid);
        }
    }

    /// `None` when a pass should run now; otherwise how long until the object is due.
    pub fn not_due(&self, uid: &str, generation: i64) -> Option<Duration> {
        if self
            .secret_changed
            .lock()
            .map(|mut c| c.remove(uid))
            .unwrap_or(true)
        {
            return None;
        }
        let due = self.due.lock().ok()?.get(uid).copied()?;
        if due.generation != generation {
            return None;
        }
        let now = Instant::now();
        (due.at > now).then(|| due.at - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_new_object_is_due_at_once() {
        assert_eq!(Schedule::default().not_due("a", 1), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trigger_before_the_due_time_waits_for_it() {
        let schedule = Schedule::default();
        schedule.record("a", 1, Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(schedule.not_due("a", 1), Some(Duration::from_secs(50)));
        tokio::time::advance(Duration::from_secs(50)).await;
        assert_eq!(schedule.not_due("a", 1), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spec_change_or_a_secret_change_runs_at_once() {
        let schedule = Schedule::default();
        schedule.record("a", 1, Duration::from_secs(60));
        assert_eq!(schedule.not_due("a", 2), None);
        schedule.secret_changed("a");
        assert_eq!(schedule.not_due("a", 1), None);
        assert!(
            schedule.not_due("a", 1).is_some(),
            "the secret change is consumed once"
        );
    }
}
