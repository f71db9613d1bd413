//! The worker pool: how many passes run at once (`--concurrency`), shared by every watched
//! namespace, and how the workers are shared out when namespaces compete for them.
//!
//! The rules, all in [`State`]:
//! - A pass starts when a worker is free, in the order the passes asked, work before checks: a
//!   pass with something to do (a new object, a spec change, an interrupted migration, a deletion,
//!   a request) goes ahead of every queued periodic check of an object already current (see
//!   [`Lane`]), so a new tenant's BoxTable never waits behind a fleet's resync.
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
//!
//! A pass that finds no worker does not wait inside the controller: it is queued here as its
//! object's name (a few dozen bytes) and its reconcile returns at once. When a worker is free for
//! it, the worker is kept for that object and the object is sent back to its controller
//! ([`Requeue`], which the controller reconciles on); the reconcile that follows takes the kept
//! worker ([`Workers::enter`]). The controller's runner polls every reconcile in flight each
//! time it is woken, so thousands of passes waiting there cost CPU for every one that ends; here
//! they cost nothing until their turn. A kept worker nobody comes for is freed after
//! [`KEPT_FOR`], and one kept for a deleted object when the watch sees it go.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

use crate::crd::BoxTable;
use crate::waits::{WaitHandle, Waits};

/// Where a queued pass's object goes when a worker is kept for it: the controller of its scope,
/// which then reconciles it again.
pub type Requeue = mpsc::UnboundedSender<ObjectRef<BoxTable>>;

/// How long a worker kept for a queued object waits for its reconcile to come and take it.
pub const KEPT_FOR: Duration = Duration::from_secs(30);

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

/// What [`Workers::enter`] gives a pass.
pub enum Entry {
    /// A worker: the pass runs now.
    Run(Worker),
    /// No worker yet: the object is queued and comes back through its [`Requeue`] when one is
    /// kept for it.
    Queued,
}

struct Busy {
    id: u64,
    namespace: String,
    /// The pass's waits, once it has any (see [`Worker::watch`]).
    waits: Option<WaitHandle>,
    /// Asked to give its worker back (it ends soon).
    gave_way: bool,
    /// Kept for a queued object whose reconcile has not come yet, and since when.
    kept: Option<(ObjectRef<BoxTable>, Instant)>,
}

struct Queued {
    namespace: String,
    object: ObjectRef<BoxTable>,
    requeue: Requeue,
}

/// Which queue a pass waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Something to do: served first.
    Work,
    /// The periodic check of an object already current (see
    /// [`super::schedule::is_current`]): served when no work waits.
    Check,
}

/// Who holds a worker and who waits for one.
#[derive(Default)]
struct State {
    busy: Vec<Busy>,
    work: VecDeque<Queued>,
    checks: VecDeque<Queued>,
    /// The objects queued and in which lane, and how many of them each namespace has (so that
    /// neither asking whether an object is queued nor counting the others' passes walks a queue).
    queued: HashMap<ObjectRef<BoxTable>, Lane>,
    waiting: HashMap<String, usize>,
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
        self.queued.len() - self.waiting.get(namespace).copied().unwrap_or(0)
    }

    fn lane(&mut self, lane: Lane) -> &mut VecDeque<Queued> {
        match lane {
            Lane::Work => &mut self.work,
            Lane::Check => &mut self.checks,
        }
    }

    fn enqueue(&mut self, lane: Lane, queued: Queued) {
        self.queued.insert(queued.object.clone(), lane);
        *self.waiting.entry(queued.namespace.clone()).or_default() += 1;
        self.lane(lane).push_back(queued);
    }

    fn dequeue(&mut self, lane: Lane, i: usize) -> Option<Queued> {
        let queued = self.lane(lane).remove(i)?;
        self.queued.remove(&queued.object);
        if let Some(n) = self.waiting.get_mut(&queued.namespace) {
            *n -= 1;
            if *n == 0 {
                self.waiting.remove(&queued.namespace);
            }
        }
        Some(queued)
    }

    /// Whether a pass of `namespace` may take a worker now.
    fn may_start(&self, total: usize, share: usize, namespace: &str) -> bool {
        self.busy.len() < total
            && (self.held(namespace) < share || self.others_waiting(namespace) == 0)
    }

    /// A worker for a pass of `namespace`, kept for `object` when it is a queued one.
    fn lend(&mut self, namespace: String, kept: Option<ObjectRef<BoxTable>>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.busy.push(Busy {
            id,
            namespace,
            waits: None,
            gave_way: false,
            kept: kept.map(|object| (object, Instant::now())),
        });
        id
    }

    /// The first queued pass that may start: work before checks.
    fn next(&self, total: usize, share: usize) -> Option<(Lane, usize)> {
        if self.busy.len() >= total {
            return None;
        }
        [(Lane::Work, &self.work), (Lane::Check, &self.checks)]
            .into_iter()
            .find_map(|(lane, queue)| {
                queue
                    .iter()
                    .position(|q| self.may_start(total, share, &q.namespace))
                    .map(|i| (lane, i))
            })
    }

    /// Moves a queued check of `object` to the work lane, behind the work already there.
    fn promote(&mut self, object: &ObjectRef<BoxTable>) {
        if self.queued.get(object) != Some(&Lane::Check) {
            return;
        }
        if let Some(i) = self.checks.iter().position(|q| &q.object == object)
            && let Some(queued) = self.dequeue(Lane::Check, i)
        {
            self.enqueue(Lane::Work, queued);
        }
    }

    /// Keeps free workers for the first queued objects that may start, and sends each back to
    /// its controller.
    fn dispatch(&mut self, total: usize, share: usize) {
        while let Some((lane, i)) = self.next(total, share) {
            let Some(next) = self.dequeue(lane, i) else {
                return;
            };
            let id = self.lend(next.namespace, Some(next.object.clone()));
            if next.requeue.send(next.object).is_err() {
                // Its controller has stopped: nobody will come for the worker.
                self.forget(id);
            }
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

    /// Frees the workers kept longer than [`KEPT_FOR`] for objects whose reconcile never came.
    fn expire(&mut self, now: Instant) {
        self.busy.retain(|b| {
            b.kept
                .as_ref()
                .is_none_or(|(_, since)| now.duration_since(*since) < KEPT_FOR)
        });
    }

    fn forget(&mut self, id: u64) {
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

    /// Changes the state, then keeps free workers for queued objects and asks for workers back
    /// as the rules say.
    fn settle<T>(&self, change: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state();
        state.expire(Instant::now());
        let changed = change(&mut state);
        state.dispatch(self.total, self.share());
        state.rebalance(self.share());
        changed
    }

    /// Where `object` already stands: the worker kept for it, now taken, if its turn has come;
    /// [`Entry::Queued`] while it waits for its turn (moved to the work lane if it now has
    /// work: `lane`); `None` when it has not asked.
    pub fn claim(self: &Arc<Self>, object: &ObjectRef<BoxTable>, lane: Lane) -> Option<Entry> {
        let id = self.settle(|state| {
            if let Some(busy) = state
                .busy
                .iter_mut()
                .find(|b| b.kept.as_ref().is_some_and(|(kept, _)| kept == object))
            {
                busy.kept = None;
                return Some(Some(busy.id));
            }
            if lane == Lane::Work {
                state.promote(object);
            }
            state.queued.contains_key(object).then_some(None)
        })?;
        Some(match id {
            Some(id) => Entry::Run(Worker {
                pool: self.clone(),
                id,
            }),
            None => Entry::Queued,
        })
    }

    /// A worker for a pass of `object` (in `namespace`) that has not asked before (see
    /// [`Workers::claim`]): a free one if the rules let it start now, else none, and the object
    /// is queued in `lane` (once, however often it asks) to come back through `requeue` when a
    /// worker is kept for it.
    pub fn enter(
        self: &Arc<Self>,
        namespace: &str,
        object: &ObjectRef<BoxTable>,
        requeue: &Requeue,
        lane: Lane,
    ) -> Entry {
        let (total, share) = (self.total, self.share());
        let id = self.settle(|state| {
            if state.queued.contains_key(object) {
                if lane == Lane::Work {
                    state.promote(object);
                }
                return None;
            }
            // Every queued pass that may start has just been given a worker, so one that may
            // start now is behind none that could.
            if state.may_start(total, share, namespace) {
                return Some(state.lend(namespace.to_owned(), None));
            }
            state.enqueue(
                lane,
                Queued {
                    namespace: namespace.to_owned(),
                    object: object.clone(),
                    requeue: requeue.clone(),
                },
            );
            None
        });
        match id {
            Some(id) => Entry::Run(Worker {
                pool: self.clone(),
                id,
            }),
            None => Entry::Queued,
        }
    }

    /// Forgets `object` (deleted): its place in the queue, or the worker kept for it.
    pub fn forget_object(&self, object: &ObjectRef<BoxTable>) {
        let known = {
            let state = self.state();
            state.queued.contains_key(object)
                || state
                    .busy
                    .iter()
                    .any(|b| b.kept.as_ref().is_some_and(|(kept, _)| kept == object))
        };
        if !known {
            return;
        }
        self.settle(|state| {
            if let Some(&lane) = state.queued.get(object)
                && let Some(i) = state.lane(lane).iter().position(|q| &q.object == object)
            {
                state.dequeue(lane, i);
            }
            state
                .busy
                .retain(|b| b.kept.as_ref().is_none_or(|(kept, _)| kept != object));
        });
    }

    /// Workers in use (kept ones among them) and passes waiting for one.
    pub fn sizes(&self) -> (usize, usize) {
        let state = self.state();
        (state.busy.len(), state.queued.len())
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

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::waits::Cut;

    /// One controller's end of the pool: where its queued objects come back.
    struct Scope {
        requeue: Requeue,
        back: mpsc::UnboundedReceiver<ObjectRef<BoxTable>>,
    }

    impl Scope {
        fn new() -> Self {
            let (requeue, back) = mpsc::unbounded_channel();
            Self { requeue, back }
        }

        fn enter(&self, pool: &Arc<Workers>, namespace: &str, name: &str) -> Entry {
            pool.enter(
                namespace,
                &object(namespace, name),
                &self.requeue,
                Lane::Work,
            )
        }

        /// Queues the periodic check of `namespace/name`.
        fn queue_check(&self, pool: &Arc<Workers>, namespace: &str, name: &str) {
            assert!(
                matches!(
                    pool.enter(
                        namespace,
                        &object(namespace, name),
                        &self.requeue,
                        Lane::Check
                    ),
                    Entry::Queued
                ),
                "{namespace}/{name} got a worker"
            );
        }

        fn take(&self, pool: &Arc<Workers>, namespace: &str, name: &str) -> Worker {
            match self.enter(pool, namespace, name) {
                Entry::Run(worker) => worker,
                Entry::Queued => panic!("{namespace}/{name} got no worker"),
            }
        }

        fn queue(&self, pool: &Arc<Workers>, namespace: &str, name: &str) {
            assert!(
                matches!(self.enter(pool, namespace, name), Entry::Queued),
                "{namespace}/{name} got a worker"
            );
        }

        /// Takes the worker kept for `namespace/name`.
        fn claim(&self, pool: &Arc<Workers>, namespace: &str, name: &str) -> Worker {
            match pool.claim(&object(namespace, name), Lane::Check) {
                Some(Entry::Run(worker)) => worker,
                Some(Entry::Queued) => panic!("{namespace}/{name} is still queued"),
                None => panic!("{namespace}/{name} never asked"),
            }
        }

        /// The objects sent back so far, in order.
        fn sent_back(&mut self) -> Vec<String> {
            let mut names = Vec::new();
            while let Ok(object) = self.back.try_recv() {
                names.push(object.name);
            }
            names
        }
    }

    fn object(namespace: &str, name: &str) -> ObjectRef<BoxTable> {
        ObjectRef::new(name).within(namespace)
    }

    fn waits() -> Waits {
        Waits::start(&CancellationToken::new(), Duration::from_secs(60))
    }

    #[test]
    fn a_namespace_alone_uses_every_worker_and_the_next_pass_gets_the_first_one_freed() {
        let pool = Workers::new(4);
        let mut scope = Scope::new();
        let held: Vec<Worker> = (0..4)
            .map(|i| scope.take(&pool, "busy", &format!("t{i}")))
            .collect();
        scope.queue(&pool, "busy", "t4");
        assert_eq!(pool.sizes(), (4, 1));
        assert!(scope.sent_back().is_empty());
        drop(held);
        assert_eq!(scope.sent_back(), ["t4"], "the freed worker is kept for t4");
        assert_eq!(pool.sizes(), (1, 0));
        let _t4 = scope.claim(&pool, "busy", "t4");
        assert_eq!(pool.sizes(), (1, 0), "t4 took the worker kept for it");
    }

    #[test]
    fn work_goes_ahead_of_every_queued_check_and_a_check_that_finds_work_moves_up() {
        let pool = Workers::new(1);
        let mut scope = Scope::new();
        let running = scope.take(&pool, "fleet", "running");
        for i in 0..3 {
            scope.queue_check(&pool, "fleet", &format!("c{i}"));
        }
        scope.queue(&pool, "tenant", "new");
        // c2's spec changed while it waited: it now has work, behind the work already queued.
        assert!(matches!(
            pool.claim(&object("fleet", "c2"), Lane::Work),
            Some(Entry::Queued)
        ));
        assert_eq!(pool.sizes(), (1, 4));
        let mut order = Vec::new();
        let mut worker = running;
        for _ in 0..4 {
            drop(worker);
            let sent = scope.sent_back();
            assert_eq!(sent.len(), 1, "one worker, one object at a time: {sent:?}");
            let namespace = if sent[0] == "new" { "tenant" } else { "fleet" };
            worker = scope.claim(&pool, namespace, &sent[0]);
            order.push(sent[0].clone());
        }
        assert_eq!(order, ["new", "c2", "c0", "c1"]);
    }

    #[test]
    fn a_queued_object_is_queued_once_however_often_it_asks() {
        let pool = Workers::new(1);
        let mut scope = Scope::new();
        let first = scope.take(&pool, "a", "one");
        assert!(
            pool.claim(&object("a", "two"), Lane::Check).is_none(),
            "it has not asked"
        );
        for _ in 0..3 {
            scope.queue(&pool, "a", "two");
        }
        assert!(matches!(
            pool.claim(&object("a", "two"), Lane::Check),
            Some(Entry::Queued)
        ));
        assert_eq!(pool.sizes(), (1, 1));
        drop(first);
        assert_eq!(scope.sent_back(), ["two"]);
    }

    #[test]
    fn under_contention_a_namespace_above_its_share_waits_behind_the_others() {
        let pool = Workers::new(4);
        assert_eq!(pool.share(), 2);
        let mut scope = Scope::new();
        let mut noisy: Vec<Worker> = (0..4)
            .map(|i| scope.take(&pool, "noisy", &format!("n{i}")))
            .collect();
        scope.queue(&pool, "noisy", "n4");
        scope.queue(&pool, "quiet", "q0");
        // A freed worker goes to the namespace below its share, though noisy asked first.
        noisy.pop();
        assert_eq!(scope.sent_back(), ["q0"]);
        let _quiet = scope.claim(&pool, "quiet", "q0");
        assert!(matches!(
            pool.claim(&object("noisy", "n4"), Lane::Check),
            Some(Entry::Queued)
        ));
        // Nothing else waits: noisy may take the next free one again.
        noisy.pop();
        assert_eq!(scope.sent_back(), ["n4"]);
        let _n4 = scope.claim(&pool, "noisy", "n4");
    }

    #[tokio::test]
    async fn waiting_passes_above_the_share_give_their_workers_back_one_per_waiting_pass() {
        let pool = Workers::new(4);
        let scope = Scope::new();
        let noisy: Vec<(Worker, Waits)> = (0..4)
            .map(|i| {
                let worker = scope.take(&pool, "noisy", &format!("n{i}"));
                let waits = waits();
                worker.watch(&waits);
                (worker, waits)
            })
            .collect();
        let cut = || noisy.iter().filter(|(_, w)| w.cut().is_some()).count();
        assert_eq!(cut(), 0, "nobody else waits: nobody gives way");
        scope.queue(&pool, "quiet", "q0");
        assert_eq!(cut(), 1);
        scope.queue(&pool, "quiet", "q1");
        assert_eq!(cut(), 2);
        scope.queue(&pool, "quiet", "q2");
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
        let scope = Scope::new();
        let noisy: Vec<(Worker, Waits)> = (0..2)
            .map(|i| {
                let worker = scope.take(&pool, "noisy", &format!("n{i}"));
                let waits = waits();
                assert!(waits.hold());
                worker.watch(&waits);
                (worker, waits)
            })
            .collect();
        scope.queue(&pool, "quiet", "q0");
        assert!(noisy.iter().all(|(_, w)| w.cut().is_none()));
    }

    #[test]
    fn a_deleted_object_leaves_no_trace_queued_or_with_a_worker_kept_for_it() {
        let pool = Workers::new(1);
        let mut scope = Scope::new();
        let first = scope.take(&pool, "a", "one");
        scope.queue(&pool, "b", "gone");
        assert_eq!(pool.sizes(), (1, 1));
        pool.forget_object(&object("b", "gone"));
        assert_eq!(pool.sizes(), (1, 0));
        scope.queue(&pool, "b", "gone-later");
        drop(first);
        assert_eq!(scope.sent_back(), ["gone-later"]);
        assert_eq!(pool.sizes(), (1, 0), "a worker is kept for it");
        pool.forget_object(&object("b", "gone-later"));
        assert_eq!(pool.sizes(), (0, 0));
        let _again = scope.take(&pool, "b", "next");
    }

    #[test]
    fn a_worker_kept_for_an_object_nobody_comes_for_is_freed_after_a_while() {
        let mut state = State::default();
        let now = Instant::now();
        state.lend("a".to_owned(), Some(object("a", "never")));
        state.lend("a".to_owned(), None);
        state.expire(now);
        assert_eq!(state.busy.len(), 2);
        state.expire(now + KEPT_FOR + Duration::from_millis(1));
        assert_eq!(state.busy.len(), 1, "the pass that runs keeps its worker");
        assert!(state.busy[0].kept.is_none());
    }

    #[test]
    fn a_worker_is_not_kept_for_a_controller_that_has_stopped() {
        let pool = Workers::new(1);
        let scope = Scope::new();
        let first = scope.take(&pool, "a", "one");
        scope.queue(&pool, "a", "two");
        drop(scope);
        drop(first);
        assert_eq!(pool.sizes(), (0, 0));
    }
}
