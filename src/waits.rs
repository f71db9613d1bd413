//! Bounded waits: how long one pass may spend on the parts that only wait (a free session,
//! connecting, the reads before the lock, the advisory-lock wait), and how long connecting to a
//! list of hosts may take in all. What runs under the lock (a long index build) is never cut.
//!
//! A pass gets a [`Waits`]: a cancellation token that fires on shutdown, when the pass's budget
//! ([`pass_budget`]: `lock.timeout` plus [`PASS_MARGIN`]) runs out, or when the worker pool asks
//! the pass to give its worker back ([`WaitHandle::give_way`]). Once the lock is held the pass calls
//! [`Waits::hold`], and from then on only shutdown fires the token. Whoever cancels a wait this way
//! also cancels the statement in flight on the server (the runner does, on any cancel).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What a pass may spend on connecting and reading before the lock, on top of `lock.timeout`.
pub const PASS_MARGIN: Duration = Duration::from_secs(15);

/// The longest connecting to one connection string may take, all hosts (and a `prefer` retry
/// without TLS) together, whatever `connect_timeout` times the number of hosts comes to.
pub const CONNECT_TOTAL_MAX: Duration = Duration::from_secs(120);

/// The budget for connecting to `hosts` hosts, each tried with `per_host`: their sum, at most
/// [`CONNECT_TOTAL_MAX`].
pub fn connect_budget(per_host: Duration, hosts: usize) -> Duration {
    let hosts = u32::try_from(hosts.max(1)).unwrap_or(u32::MAX);
    per_host.saturating_mul(hosts).min(CONNECT_TOTAL_MAX)
}

/// The budget of a pass's waits for a table whose `lock.timeout` is `lock_timeout`.
pub fn pass_budget(lock_timeout: Duration) -> Duration {
    lock_timeout.saturating_add(PASS_MARGIN)
}

/// Why a pass's waits were cut short (shutdown aside, which the caller knows from its own token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The budget ran out before the lock was held.
    Deadline,
    /// The worker pool asked for the worker back (another namespace is waiting for one).
    GaveWay,
}

/// Where a pass stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Connecting, reading or waiting for the lock: may be cut.
    Waiting,
    /// The lock is held (or the pass has nothing left that waits): only shutdown stops it.
    Holding,
    /// Cut short.
    Cut(Cut),
}

struct Shared {
    phase: Mutex<Phase>,
    token: CancellationToken,
}

impl Shared {
    fn phase(&self) -> MutexGuard<'_, Phase> {
        // Nothing panics while holding it; a poisoned phase is still a whole value.
        self.phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Cuts the waits for `why` if the pass is still waiting.
    fn cut(&self, why: Cut) -> bool {
        let mut phase = self.phase();
        if *phase != Phase::Waiting {
            return false;
        }
        *phase = Phase::Cut(why);
        drop(phase);
        self.token.cancel();
        true
    }
}

/// The waiting part of one pass (see the module docs). Dropping it stops its timer.
pub struct Waits {
    shared: Arc<Shared>,
    budget: Duration,
    timer: JoinHandle<()>,
}

impl Waits {
    /// Starts the clock: the token fires when `shutdown` does, or after `budget` unless
    /// [`Waits::hold`] came first. Must be called inside a tokio runtime.
    pub fn start(shutdown: &CancellationToken, budget: Duration) -> Self {
        let shared = Arc::new(Shared {
            phase: Mutex::new(Phase::Waiting),
            token: shutdown.child_token(),
        });
        let timer = {
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(budget) => { shared.cut(Cut::Deadline); }
                    () = shared.token.cancelled() => {}
                }
            })
        };
        Self {
            shared,
            budget,
            timer,
        }
    }

    /// The token to hand to the pass as its cancellation.
    pub fn token(&self) -> &CancellationToken {
        &self.shared.token
    }

    /// The budget this pass was given.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The lock is held: from now on only shutdown fires the token. Returns false when the waits
    /// were already cut (the token has fired; the pass must not go on).
    pub fn hold(&self) -> bool {
        let mut phase = self.shared.phase();
        match *phase {
            Phase::Cut(_) => false,
            Phase::Waiting | Phase::Holding => {
                *phase = Phase::Holding;
                true
            }
        }
    }

    /// Why the waits were cut short, if they were.
    pub fn cut(&self) -> Option<Cut> {
        match *self.shared.phase() {
            Phase::Cut(why) => Some(why),
            Phase::Waiting | Phase::Holding => None,
        }
    }

    /// A handle for the worker pool to ask this pass for its worker back.
    pub fn handle(&self) -> WaitHandle {
        WaitHandle(self.shared.clone())
    }
}

impl Drop for Waits {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

/// Lets the worker pool ask a waiting pass to give its worker back.
#[derive(Clone)]
pub struct WaitHandle(Arc<Shared>);

impl WaitHandle {
    /// Cuts the pass's waits if it is still waiting (never once it holds the lock); returns
    /// whether it did.
    pub fn give_way(&self) -> bool {
        self.0.cut(Cut::GaveWay)
    }
}

impl std::fmt::Debug for WaitHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("WaitHandle").field(&*self.0.phase()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connecting_to_many_hosts_is_bounded_in_total() {
        let ten = Duration::from_secs(10);
        assert_eq!(connect_budget(ten, 1), ten);
        assert_eq!(connect_budget(ten, 0), ten);
        assert_eq!(connect_budget(ten, 3), Duration::from_secs(30));
        assert_eq!(
            connect_budget(Duration::from_secs(60), 16),
            CONNECT_TOTAL_MAX
        );
    }

    #[test]
    fn a_pass_waits_its_lock_timeout_and_the_margin() {
        assert_eq!(
            pass_budget(Duration::from_secs(30)),
            Duration::from_secs(45)
        );
        assert_eq!(pass_budget(Duration::ZERO), PASS_MARGIN);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_cuts_a_wait_and_says_so() {
        let shutdown = CancellationToken::new();
        let waits = Waits::start(&shutdown, Duration::from_secs(45));
        tokio::time::sleep(Duration::from_secs(44)).await;
        assert!(!waits.token().is_cancelled());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(waits.token().is_cancelled());
        assert_eq!(waits.cut(), Some(Cut::Deadline));
        assert!(!waits.hold(), "a cut pass must not go on under the lock");
        assert!(!shutdown.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn once_the_lock_is_held_only_shutdown_stops_the_pass() {
        let shutdown = CancellationToken::new();
        let waits = Waits::start(&shutdown, Duration::from_secs(1));
        assert!(waits.hold());
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(
            !waits.token().is_cancelled(),
            "a long index build is never cut"
        );
        assert!(!waits.handle().give_way());
        assert_eq!(waits.cut(), None);
        shutdown.cancel();
        assert!(waits.token().is_cancelled());
        assert_eq!(waits.cut(), None, "a shutdown is not a cut");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_pass_gives_way_once() {
        let waits = Waits::start(&CancellationToken::new(), Duration::from_secs(45));
        let handle = waits.handle();
        assert!(handle.give_way());
        assert!(!handle.give_way());
        assert!(waits.token().is_cancelled());
        assert_eq!(waits.cut(), Some(Cut::GaveWay));
    }
}
