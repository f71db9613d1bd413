//! Waiting on a condition, the one way the tests wait: poll until it holds, fail the test naming
//! what was awaited once the deadline passes. Never a bare sleep.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// The deadline most waits use: generous, because the suite runs on busy machines and every wait
/// returns as soon as its condition holds.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// How often a wait checks its condition.
const POLL: Duration = Duration::from_millis(50);

/// Polls `check` until it yields true; fails the test naming `what` after [`DEADLINE`].
pub async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until_within(what, DEADLINE, check).await;
}

/// Polls `check` until it yields true; fails the test naming `what` after `within`.
pub async fn wait_until_within<F, Fut>(what: &str, within: Duration, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for_value(what, within, check, |held| *held).await;
}

/// Polls `look` until `holds` accepts what it returns, and returns that; fails the test naming
/// `what` and the last value seen after `within`.
pub async fn wait_for_value<T, F, Fut>(
    what: &str,
    within: Duration,
    mut look: F,
    holds: impl Fn(&T) -> bool,
) -> T
where
    T: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let started = Instant::now();
    loop {
        let seen = look().await;
        if holds(&seen) {
            return seen;
        }
        assert!(
            started.elapsed() < within,
            "gave up waiting until {what} after {within:?}; last seen: {seen:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The same wait for code outside a runtime (tests that drive `kubectl` and `helm` synchronously):
/// `check` says what it last saw, which the failure message carries.
pub fn wait_until_blocking(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) {
    let started = Instant::now();
    loop {
        match check() {
            Ok(()) => return,
            Err(last) if started.elapsed() > within => {
                panic!("{what} within {within:?}; last: {last}")
            }
            Err(_) => std::thread::sleep(POLL * 5),
        }
    }
}
