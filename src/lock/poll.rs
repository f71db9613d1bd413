//! The acquire loop, independent of the database: try, and on contention sleep 100, 200, 400, 800,
//! then 1000 ms between tries until the timeout.
//!
//! Time comes from tokio's monotonic clock, so tests drive it with a paused runtime and a fake
//! try-lock, without a database.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The first wait after a failed try.
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between tries.
pub const BACKOFF_CAP: Duration = Duration::from_millis(1000);

/// What a successful acquire reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireReport {
    /// Tries made, including the successful one.
    pub attempts: u32,
    /// Time from the first try to success.
    pub waited: Duration,
}

/// Why the loop stopped without the lock.
#[derive(Debug)]
pub enum PollError<E> {
    /// The try itself failed.
    Try(E),
    /// The try returned NULL.
    Null,
    /// The timeout passed with the lock still held elsewhere.
    TimedOut {
        /// Tries made.
        attempts: u32,
    },
    /// The cancellation token fired during a wait.
    Cancelled,
    /// `on_contended` said the lock is no longer needed (someone else already did the work).
    NotNeeded {
        /// Tries made.
        attempts: u32,
    },
}

/// The wait after `delay`: doubled, capped at [`BACKOFF_CAP`].
pub fn next_delay(delay: Duration) -> Duration {
    (delay * 2).min(BACKOFF_CAP)
}

/// How many tries [`poll_until_acquired`] has made once `waited` has passed since its first try,
/// counting the schedule's waits only (each try's round trip adds a little to the real times).
pub fn tries_within(waited: Duration) -> u32 {
    let mut tries = 1u32;
    let mut at = Duration::ZERO;
    let mut delay = FIRST_DELAY;
    while at + delay <= waited {
        at += delay;
        tries = tries.saturating_add(1);
        delay = next_delay(delay);
    }
    tries
}

/// Calls `try_lock` until it yields `Some(true)`, waiting with backoff in between.
///
/// `on_contended(n)` runs after the n-th failed try, before the wait; when it answers `false` the
/// lock is no longer needed and the loop stops with [`PollError::NotNeeded`]. The last wait is cut short at
/// the deadline so that a final try happens exactly when the timeout expires; a timeout of zero
/// means exactly one try.
///
/// # Errors
/// [`PollError::TimedOut`] when the timeout passes, [`PollError::Null`] on a NULL result,
/// [`PollError::Try`] when a try fails, [`PollError::Cancelled`] when `cancel` fires.
///
/// # Cancel safety
/// Cancellation is observed during waits and before each try.
pub async fn poll_until_acquired<E, T, TFut, C, CFut>(
    timeout: Duration,
    cancel: &CancellationToken,
    mut try_lock: T,
    mut on_contended: C,
) -> Result<AcquireReport, PollError<E>>
where
    T: FnMut() -> TFut,
    TFut: Future<Output = Result<Option<bool>, E>>,
    C: FnMut(u32) -> CFut,
    CFut: Future<Output = bool>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    let mut delay = FIRST_DELAY;
    let mut attempts = 0u32;
    loop {
        if cancel.is_cancelled() {
            return Err(PollError::Cancelled);
        }
        attempts += 1;
        match try_lock().await.map_err(PollError::Try)? {
            Some(true) => {
                return Ok(AcquireReport {
                    attempts,
                    waited: started.elapsed(),
                });
            }
            Some(false) => {}
            None => return Err(PollError::Null),
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(PollError::TimedOut { attempts });
        }
        if !on_contended(attempts).await {
            return Err(PollError::NotNeeded { attempts });
        }
        let wait = delay.min(deadline.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = cancel.cancelled() => return Err(PollError::Cancelled),
            () = tokio::time::sleep(wait) => {}
        }
        delay = next_delay(delay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Runs the loop against a fake lock that is free from try number `free_at` on (never if 0),
    /// returning the outcome and the instants (ms since start) of every try.
    async fn run_fake(
        timeout_ms: u64,
        free_at: u32,
    ) -> (Result<AcquireReport, PollError<()>>, Vec<u64>) {
        let start = Instant::now();
        let tries = RefCell::new(Vec::new());
        let cancel = CancellationToken::new();
        let result = poll_until_acquired(
            Duration::from_millis(timeout_ms),
            &cancel,
            || {
                tries.borrow_mut().push(start.elapsed().as_millis() as u64);
                let n = tries.borrow().len() as u32;
                async move { Ok::<_, ()>(Some(free_at != 0 && n >= free_at)) }
            },
            |_| async { true },
        )
        .await;
        (result, tries.into_inner())
    }

    #[tokio::test(start_paused = true)]
    async fn waits_follow_100_200_400_800_then_1000_ms() {
        let (result, tries) = run_fake(60_000, 8).await;
        assert_eq!(tries, vec![0, 100, 300, 700, 1500, 2500, 3500, 4500]);
        let report = result.unwrap();
        assert_eq!(report.attempts, 8);
        assert_eq!(report.waited, Duration::from_millis(4500));
    }

    #[tokio::test(start_paused = true)]
    async fn tries_within_counts_the_tries_the_loop_has_made() {
        let (_, tries) = run_fake(20_000, 0).await;
        for waited_ms in [0, 99, 100, 299, 300, 1_499, 1_500, 4_999, 5_000, 19_999] {
            let made = tries.iter().filter(|&&at| at <= waited_ms).count() as u32;
            assert_eq!(
                tries_within(Duration::from_millis(waited_ms)),
                made,
                "after {waited_ms} ms"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn zero_timeout_means_exactly_one_attempt() {
        let (result, tries) = run_fake(0, 0).await;
        assert_eq!(tries, vec![0]);
        assert!(matches!(result, Err(PollError::TimedOut { attempts: 1 })));
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_try_happens_at_the_deadline() {
        let (result, tries) = run_fake(1000, 0).await;
        assert_eq!(tries, vec![0, 100, 300, 700, 1000]);
        assert!(matches!(result, Err(PollError::TimedOut { attempts: 5 })));
    }

    #[tokio::test(start_paused = true)]
    async fn free_lock_is_taken_on_the_first_try_without_waiting() {
        let (result, tries) = run_fake(30_000, 1).await;
        assert_eq!(tries, vec![0]);
        assert_eq!(result.unwrap().waited, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn null_result_is_an_error() {
        let cancel = CancellationToken::new();
        let result = poll_until_acquired(
            Duration::from_secs(5),
            &cancel,
            || async { Ok::<_, ()>(None) },
            |_| async { true },
        )
        .await;
        assert!(matches!(result, Err(PollError::Null)));
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_stops_the_wait_promptly() {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1_250)).await;
            trigger.cancel();
        });
        let start = Instant::now();
        let result = poll_until_acquired(
            Duration::from_secs(3600),
            &cancel,
            || async { Ok::<_, ()>(Some(false)) },
            |_| async { true },
        )
        .await;
        assert!(matches!(result, Err(PollError::Cancelled)));
        assert_eq!(start.elapsed(), Duration::from_millis(1_250));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_that_is_no_longer_needed_stops_at_the_next_check() {
        let cancel = CancellationToken::new();
        let start = Instant::now();
        let result = poll_until_acquired(
            Duration::from_secs(60),
            &cancel,
            || async { Ok::<_, ()>(Some(false)) },
            |attempt| async move { attempt < 3 },
        )
        .await;
        assert!(matches!(result, Err(PollError::NotNeeded { attempts: 3 })));
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(300),
            "stopped before the third wait"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn contention_is_reported_once_per_failed_try() {
        let cancel = CancellationToken::new();
        let seen = RefCell::new(Vec::new());
        let mut n = 0;
        let _ = poll_until_acquired(
            Duration::from_secs(60),
            &cancel,
            || {
                n += 1;
                let free = n == 3;
                async move { Ok::<_, ()>(Some(free)) }
            },
            |attempt| {
                seen.borrow_mut().push(attempt);
                async { true }
            },
        )
        .await;
        assert_eq!(seen.into_inner(), vec![1, 2]);
    }
}
