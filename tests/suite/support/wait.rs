//! Waiting on a condition, the one way the tests wait: poll until it holds, fail the test naming
//! what was awaited once the deadline passes. Never a bare sleep.

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
pub async fn wait_until_within<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < within,
            "gave up waiting until {what} after {within:?}"
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
