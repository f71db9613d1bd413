//! Per-object retry timing: exponential backoff with jitter on failure, reset on success, and a
//! periodic resync once a table is up to date. An object's count goes on success and when the
//! object goes (see [`super::memory`]), also when it was deleted while failing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The first retry delay after a transient failure.
pub const BASE_DELAY: Duration = Duration::from_secs(5);
/// The longest retry delay.
pub const MAX_DELAY: Duration = Duration::from_secs(300);

/// Counts consecutive failures per object (keyed by uid) to space out retries.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(BASE_DELAY)
    }
}

impl Backoff {
    /// A backoff whose first retry waits `base` (doubling from there, capped at [`MAX_DELAY`]).
    pub fn new(base: Duration) -> Self {
        Self {
            base,
            failures: Mutex::default(),
        }
    }

    /// Records a failure of `uid` and returns how long to wait before the next try:
    /// base, 2 x base, 4 x base, ... capped at 5 min, each scaled by a random factor in [0.8, 1.2).
    pub fn on_failure(&self, uid: &str) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut map) => {
                let n = map.entry(uid.to_owned()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        jitter(delay_for(self.base, n), rand::random::<f64>())
    }

    /// Forgets the failures of `uid` after a success, or once it is gone.
    pub fn on_success(&self, uid: &str) {
        if let Ok(mut map) = self.failures.lock() {
            map.remove(uid);
        }
    }

    /// Forgets every object for which `live(uid)` is false (see [`super::memory`]).
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        if let Ok(mut map) = self.failures.lock() {
            map.retain(|uid, _| live(uid));
        }
    }

    /// How many objects have failures recorded.
    pub fn entries(&self) -> usize {
        self.failures.lock().map_or(0, |map| map.len())
    }

    /// Consecutive failures recorded for `uid` (what the tests below check).
    #[cfg(test)]
    fn failures(&self, uid: &str) -> u32 {
        self.failures
            .lock()
            .ok()
            .and_then(|map| map.get(uid).copied())
            .unwrap_or(0)
    }
}

/// The un-jittered delay after `n` consecutive failures (n >= 1), starting from `base`.
pub fn delay_for(base: Duration, n: u32) -> Duration {
    let exp = n.saturating_sub(1).min(16);
    base.saturating_mul(1 << exp).min(MAX_DELAY)
}

/// Scales `delay` by a factor in [0.8, 1.2) chosen by `unit` in [0, 1).
pub fn jitter(delay: Duration, unit: f64) -> Duration {
    delay.mul_f64(0.8 + 0.4 * unit.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_five_seconds_up_to_five_minutes() {
        let secs: Vec<u64> = (1..=8)
            .map(|n| delay_for(BASE_DELAY, n).as_secs())
            .collect();
        assert_eq!(secs, vec![5, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        assert_eq!(jitter(Duration::from_secs(10), 0.0), Duration::from_secs(8));
        assert_eq!(
            jitter(Duration::from_secs(10), 0.5),
            Duration::from_secs(10)
        );
        assert!(jitter(Duration::from_secs(10), 0.999) < Duration::from_secs(12));
    }

    #[test]
    fn success_resets_the_failure_count() {
        let backoff = Backoff::default();
        backoff.on_failure("a");
        backoff.on_failure("a");
        backoff.on_failure("b");
        assert_eq!(backoff.failures("a"), 2);
        backoff.on_success("a");
        assert_eq!(backoff.failures("a"), 0);
        assert_eq!(backoff.failures("b"), 1);
        let first_again = backoff.on_failure("a");
        assert!(first_again < Duration::from_secs(6), "{first_again:?}");
    }
}
