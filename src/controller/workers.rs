//! The worker pool: how many passes run at once (`--concurrency`), shared by every watched
//! namespace, and how the workers are shared out when namespaces compete for them.
//!
//! The rules, all in [`State`]:
//! - A pass starts when a worker is free, in the order the passes asked.
//! - While a pass of another namespace waits for a worker (contention), a namespace gets a new
//!   worker only while it holds fewer than its share, half the workers rounded up. With nothing
//!   else waiting, one namespace may use every worker.
//! - Under contention, passes of a namespace above its share that are still waiting (connecting,
//!   reading before the lock, waiting for the lock: see [`crate::waits`]) give their worker back,
//!   as many as bring it down to its share (and no more than there are passes of other namespaces
//!   waiting). A pass that holds the lock is never asked. A pass that gave way is queued again.
//!
//! So one namespace's slow or stuck BoxTables hold at most half the workers once another
//! namespace has work, and a busy namespace alone is not slowed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::waits::{WaitHandle, Waits};

/// The workers of this process, shared by every watched namespace.
pub struct Workers {
    total: usize,
    state: Mutex<State>,
}

/// A worker lent to one pass; dropping it gives it back.
pub struct Worker {
    pool: Arc<Workers>,
    id: u64,
}

struct Busy {
    id: u64,
    namespace: String,
    /// The pass's waits, once it has any (see [`Worker::watch`]).
    waits: Option<WaitHandle>,
    /// Asked to give its worker back (it ends soon).
    gave_way: bool,
}

struct Queued {
    id: u64,
    namespace: String,
    grant: oneshot::Sender<()>,
}

/// Who holds a worker and who waits for one.
#[derive(Default)]
struct State {
    busy: Vec<Busy>,
    queue: VecDeque<Queued>,
    next_id: u64,
}

impl State {
    fn held(&self, namespace: &str) -> usize {
        self.busy
            .iter()
            .filter(|b| b.namespace == namespace)
            .count()
    }

    /// Passes of namespaces other than `namespace` waiting for a worker.
    fn others_waiting(&self, namespace: &str) -> usize {
        self.queue
            .iter()
            .filter(|q| q.namespace != namespace)
            .count()
    }

    /// Whether a pass of `namespace` may take a worker now.
    fn may_start(&self, total: usize, share: usize, namespace: &str) -> bool {
        self.busy.len() < total
            && (self.held(namespace) < share || self.others_waiting(namespace) == 0)
    }

    /// Hands free workers to the first waiting passes that may start.
    fn dispatch(&mut self, total: usize, share: usize) {
        while let Some(i) =
            (0..self.queue.len()).find(|&i| self.may_start(total, share, &self.queue[i].namespace))
        {
            let Some(next) = self.queue.remove(i) else {
                return;
            };
            self.busy.push(Busy {
                id: next.id,
                namespace: next.namespace,
                waits: None,
                gave_way: false,
            });
            // A pass that stopped asking has already been forgotten (see `Pending`), so the
            // receiver is there; if not, its `Pending` frees the worker.
            let _ = next.grant.send(());
        }
    }

    /// Under contention, asks waiting passes of namespaces above their share to give way.
    fn rebalance(&mut self, share: usize) {
        let mut namespaces: Vec<String> = self.busy.iter().map(|b| b.namespace.clone()).collect();
        namespaces.sort();
        namespaces.dedup();
        for namespace in namespaces {
            let held = self.held(&namespace);
            let asked = self
                .busy
                .iter()
                .filter(|b| b.namespace == namespace && b.gave_way)
                .count();
            let excess = held.saturating_sub(share);
            let mut wanted = excess
                .min(self.others_waiting(&namespace))
                .saturating_sub(asked);
            // The newest passes first: the oldest have waited longest and are nearest the lock.
            for busy in self.busy.iter_mut().rev() {
                if wanted == 0 {
                    break;
                }
                if busy.namespace != namespace || busy.gave_way {
                    continue;
                }
                if busy.waits.as_ref().is_some_and(WaitHandle::give_way) {
                    busy.gave_way = true;
                    wanted -= 1;
                    tracing::debug!(namespace = %busy.namespace, "a waiting pass gives its worker back to another namespace");
                }
            }
        }
    }

    fn forget(&mut self, id: u64) {
        self.queue.retain(|q| q.id != id);
        self.busy.retain(|b| b.id != id);
    }
}

impl Workers {
    /// A pool of `total` workers (at least 1).
    pub fn new(total: usize) -> Arc<Self> {
        Arc::new(Self {
            total: total.max(1),
            state: Mutex::new(State::default()),
        })
    }

    /// A namespace's share under contention: half the workers, rounded up.
    pub fn share(&self) -> usize {
        self.total.div_ceil(2)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; the lists in a poisoned state are still whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes the state, then lets waiting passes start and asks for workers back as the rules
    /// say.
    fn settle(&self, change: impl FnOnce(&mut State)) {
        let mut state = self.state();
        change(&mut state);
        state.dispatch(self.total, self.share());
        state.rebalance(self.share());
    }

    /// Waits for a worker for a pass of `namespace`.
    ///
    /// # Cancel safety
    /// Dropping the future gives up its place in the queue (or the worker it was just given).
    pub async fn acquire(self: &Arc<Self>, namespace: &str) -> Worker {
        let (grant, granted) = oneshot::channel();
        let mut id = 0;
        self.settle(|state| {
            id = state.next_id;
            state.next_id += 1;
            state.queue.push_back(Queued {
                id,
                namespace: namespace.to_owned(),
                grant,
            });
        });
        let mut pending = Pending {
            pool: self,
            id,
            done: false,
        };
        // The sender lives in the queue until the grant is sent, and the queue lives in `self`.
        let _ = granted.await;
        pending.done = true;
        Worker {
            pool: self.clone(),
            id,
        }
    }

    /// Workers in use and passes waiting for one.
    pub fn sizes(&self) -> (usize, usize) {
        let state = self.state();
        (state.busy.len(), state.queue.len())
    }
}

/// Forgets a pass that stopped waiting before it got its worker.
struct Pending<'a> {
    pool: &'a Workers,
    id: u64,
    done: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            let id = self.id;
            self.pool.settle(|state| state.forget(id));
        }
    }
}

impl Worker {
    /// From now on the pool may ask the pass to give this worker back while `waits` is waiting.
    pub fn watch(&self, waits: &Waits) {
        let handle = waits.handle();
        self.pool.settle(|state| {
            if let Some(busy) = state.busy.iter_mut().find(|b| b.id == self.id) {
                busy.waits = Some(handle);
            }
        });
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let id = self.id;
        self.pool.settle(|state| state.forget(id));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::waits::Cut;

    fn take(pool: &Arc<Workers>, namespace: &str) -> Worker {
        pool.acquire(namespace)
            .now_or_never()
            .expect("a worker at once")
    }

    fn waits() -> Waits {
        Waits::start(&CancellationToken::new(), Duration::from_secs(60))
    }

    #[tokio::test]
    async fn a_namespace_alone_uses_every_worker() {
        let pool = Workers::new(4);
        let held: Vec<Worker> = (0..4).map(|_| take(&pool, "busy")).collect();
        assert_eq!(pool.sizes(), (4, 0));
        let mut fifth = Box::pin(pool.acquire("busy"));
        assert!(futures::poll!(&mut fifth).is_pending());
        drop(held);
        assert!(futures::poll!(&mut fifth).is_ready());
    }

    #[tokio::test]
    async fn under_contention_a_namespace_above_its_share_waits_behind_the_others() {
        let pool = Workers::new(4);
        assert_eq!(pool.share(), 2);
        let mut noisy: Vec<Worker> = (0..4).map(|_| take(&pool, "noisy")).collect();
        let mut noisy_next = Box::pin(pool.acquire("noisy"));
        assert!(futures::poll!(&mut noisy_next).is_pending());
        let mut quiet = Box::pin(pool.acquire("quiet"));
        assert!(futures::poll!(&mut quiet).is_pending());
        // A freed worker goes to the namespace below its share, though noisy asked first.
        noisy.pop();
        let std::task::Poll::Ready(_quiet_worker) = futures::poll!(&mut quiet) else {
            panic!("the quiet pass got no worker");
        };
        assert!(futures::poll!(&mut noisy_next).is_pending());
        // Nothing else waits: noisy may take the next free one again.
        noisy.pop();
        assert!(futures::poll!(&mut noisy_next).is_ready());
    }

    #[tokio::test]
    async fn waiting_passes_above_the_share_give_their_workers_back_one_per_waiting_pass() {
        let pool = Workers::new(4);
        let noisy: Vec<(Worker, Waits)> = (0..4)
            .map(|_| {
                let worker = take(&pool, "noisy");
                let waits = waits();
                worker.watch(&waits);
                (worker, waits)
            })
            .collect();
        let cut = || noisy.iter().filter(|(_, w)| w.cut().is_some()).count();
        assert_eq!(cut(), 0, "nobody else waits: nobody gives way");
        let mut quiet: Vec<_> = (0..3).map(|_| Box::pin(pool.acquire("quiet"))).collect();
        assert!(futures::poll!(&mut quiet[0]).is_pending());
        assert_eq!(cut(), 1);
        assert!(futures::poll!(&mut quiet[1]).is_pending());
        assert_eq!(cut(), 2);
        assert!(futures::poll!(&mut quiet[2]).is_pending());
        assert_eq!(cut(), 2, "never below the share");
        assert!(
            noisy
                .iter()
                .filter_map(|(_, w)| w.cut())
                .all(|c| c == Cut::GaveWay)
        );
    }

    #[tokio::test]
    async fn a_pass_that_holds_the_lock_never_gives_way() {
        let pool = Workers::new(2);
        let noisy: Vec<(Worker, Waits)> = (0..2)
            .map(|_| {
                let worker = take(&pool, "noisy");
                let waits = waits();
                assert!(waits.hold());
                worker.watch(&waits);
                (worker, waits)
            })
            .collect();
        let mut quiet = Box::pin(pool.acquire("quiet"));
        assert!(futures::poll!(&mut quiet).is_pending());
        assert!(noisy.iter().all(|(_, w)| w.cut().is_none()));
    }

    #[tokio::test]
    async fn a_pass_that_stops_waiting_leaves_no_trace() {
        let pool = Workers::new(1);
        let first = take(&pool, "a");
        let mut second = Box::pin(pool.acquire("b"));
        assert!(futures::poll!(&mut second).is_pending());
        assert_eq!(pool.sizes(), (1, 1));
        drop(second);
        assert_eq!(pool.sizes(), (1, 0));
        drop(first);
        assert_eq!(pool.sizes(), (0, 0));
        let _again = take(&pool, "b");
    }
}
