//! The operator's PostgreSQL sessions, kept between passes: at most a few open per database
//! target ([`SessionKey`]), each lent to one pass at a time and taken back only after a clean run.
//!
//! A pass borrows one session ([`SessionPool::checkout`]), runs on it (taking and releasing its own
//! table's lock as it would on a fresh session) and hands it back with [`PooledSession::give_back`]
//! only when the run ended cleanly. Anything else (an error, a cancel, a dropped future, a lock
//! whose release was in doubt) drops the [`PooledSession`], which closes the connection; the server
//! then frees whatever the session held. A pass never holds two sessions, so passes waiting for a
//! session cannot deadlock each other.
//!
//! Idle sessions close after the idle timeout, when the idle cap overall is reached (oldest
//! first), and at once when the source they came from (a Secret) now gives another key.

mod checks;
mod events;
mod key;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{ConnectError, Session};

pub use events::{Closed, Opened, PoolEvents};
pub use key::SessionKey;

use checks::{check_out, is_clean};
use events::NoEvents;

/// Limits of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Sessions open at once per key, lent or idle (at least 1).
    pub per_target: usize,
    /// An idle session unused this long is closed.
    pub idle_timeout: Duration,
    /// Idle sessions kept across all keys; past it the oldest idle one is closed.
    pub max_idle: usize,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            per_target: 2,
            idle_timeout: Duration::from_secs(600),
            max_idle: 64,
        }
    }
}

/// Why no session could be lent.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// Opening a new session failed.
    #[error("could not open a session")]
    Connect(#[source] ConnectError),
    /// Shutdown came while the pass waited for a free session.
    #[error("cancelled while waiting for a free session")]
    Cancelled,
}

struct Idle {
    session: Session,
    since: Instant,
    /// The `application_name` of a session opened ahead ([`SessionPool::open_ahead`]) and not
    /// lent since: it is lent as it is, without the check a kept session gets.
    opened_as: Option<String>,
}

struct Target {
    permits: Arc<Semaphore>,
    idle: Vec<Idle>,
    retired: bool,
    /// Why opening a session ahead failed; the next checkout returns it instead of connecting.
    failed_ahead: Option<ConnectError>,
}

#[derive(Default)]
struct State {
    targets: HashMap<SessionKey, Target>,
    /// The key each source gave last.
    sources: HashMap<String, SessionKey>,
    open: usize,
    idle: usize,
    closing: bool,
    /// Sessions given back are closed, not kept (see [`SessionPool::keep_none`]).
    keep_none: bool,
}

/// The sessions of this process, by [`SessionKey`]. Share it (`Arc`) between passes.
pub struct SessionPool {
    settings: PoolSettings,
    state: Mutex<State>,
    events: Arc<dyn PoolEvents>,
}

impl SessionPool {
    /// An empty pool with these limits and no one told of its events.
    pub fn new(settings: PoolSettings) -> Self {
        Self::with_events(settings, Arc::new(NoEvents))
    }

    /// An empty pool whose opens, closes and sizes are reported to `events`.
    pub fn with_events(settings: PoolSettings, events: Arc<dyn PoolEvents>) -> Self {
        let settings = PoolSettings {
            per_target: settings.per_target.max(1),
            ..settings
        };
        Self {
            settings,
            state: Mutex::new(State::default()),
            events,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; were it poisoned, the lists and counts in it are
        // still whole (each change is made before the guard drops), so go on with them.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lends a session for `key`, named `application_name`: an idle one that passes its check,
    /// else a new one. Waits while `per_target` sessions of the key are lent. `source` names where
    /// the key came from (a Secret); when it gave another key before, the sessions of that key
    /// are closed (unless another source still gives it).
    ///
    /// # Errors
    /// [`CheckoutError::Connect`] when a new session cannot be opened,
    /// [`CheckoutError::Cancelled`] when `cancel` fires while waiting for a free one.
    ///
    /// # Cancel safety
    /// Dropping the future while it waits or connects leaves the pool as it was.
    pub async fn checkout(
        &self,
        key: &SessionKey,
        source: Option<&str>,
        application_name: &str,
        cancel: &CancellationToken,
    ) -> Result<PooledSession<'_>, CheckoutError> {
        let permits = {
            let mut state = self.state();
            if let Some(source) = source {
                self.note_source(&mut state, source, key);
            }
            self.target(&mut state, key).permits.clone()
        };
        let permit = tokio::select! {
            permit = permits.acquire_owned() => permit.map_err(|_| CheckoutError::Cancelled)?,
            () = cancel.cancelled() => return Err(CheckoutError::Cancelled),
        };
        let failed_ahead = self
            .state()
            .targets
            .get_mut(key)
            .and_then(|target| target.failed_ahead.take());
        if let Some(error) = failed_ahead {
            return Err(CheckoutError::Connect(error));
        }
        let mut why = Opened::NoneIdle;
        while let Some((session, opened_as)) = self.take_idle(key) {
            let checked = if opened_as.as_deref() == Some(application_name) && !session.is_closed()
            {
                Ok(())
            } else {
                check_out(&session, application_name).await
            };
            match checked {
                Ok(()) => {
                    return Ok(PooledSession {
                        session,
                        lent: Lent {
                            pool: self,
                            key: key.clone(),
                            handed_back: false,
                            _permit: permit,
                        },
                    });
                }
                Err(reason) => {
                    tracing::debug!(target = ?key, reason, "an idle session failed its check; closing it");
                    self.discard(session, Closed::Broken);
                    why = Opened::ReplacedBroken;
                }
            }
        }
        let session = tokio::select! {
            session = Session::connect(key.connection(), application_name) => {
                session.map_err(CheckoutError::Connect)?
            }
            () = cancel.cancelled() => return Err(CheckoutError::Cancelled),
        };
        self.events.opened(why);
        let sizes = {
            let mut state = self.state();
            state.open += 1;
            (state.open, state.idle)
        };
        self.events.sizes(sizes.0, sizes.1);
        Ok(PooledSession {
            session,
            lent: Lent {
                pool: self,
                key: key.clone(),
                handed_back: false,
                _permit: permit,
            },
        })
    }

    /// Opens a session for `key`, named `application_name`, before any pass asks for one, and
    /// keeps it idle for the first checkout, which lends it without the check a kept session gets
    /// (it has never been lent). A command that knows its database before it knows its work
    /// (`migrate --database-url`) connects while it reads its input. When the open fails, the
    /// next checkout of `key` returns that failure instead of connecting again. Waits while
    /// `per_target` sessions of the key are lent.
    ///
    /// # Cancel safety
    /// Dropping the future while it waits or connects leaves the pool as it was.
    pub async fn open_ahead(&self, key: &SessionKey, application_name: &str) {
        let permits = {
            let mut state = self.state();
            self.target(&mut state, key).permits.clone()
        };
        let Ok(_permit) = permits.acquire_owned().await else {
            return;
        };
        let opened = Session::connect(key.connection(), application_name).await;
        let mut state = self.state();
        match opened {
            Ok(session) if state.closing => drop(session),
            Ok(session) => {
                self.events.opened(Opened::NoneIdle);
                state.open += 1;
                let target = self.target(&mut state, key);
                target.idle.push(Idle {
                    session,
                    since: Instant::now(),
                    opened_as: Some(application_name.to_owned()),
                });
                state.idle += 1;
            }
            Err(error) => self.target(&mut state, key).failed_ahead = Some(error),
        }
        self.events.sizes(state.open, state.idle);
    }

    /// The entry of `key`, made if there is none; a retired key is in use again.
    fn target<'s>(&self, state: &'s mut State, key: &SessionKey) -> &'s mut Target {
        let target = state.targets.entry(key.clone()).or_insert_with(|| Target {
            permits: Arc::new(Semaphore::new(self.settings.per_target)),
            idle: Vec::new(),
            retired: false,
            failed_ahead: None,
        });
        target.retired = false;
        target
    }

    /// Records that `source` now gives `key`; retires the key it gave before if no source gives
    /// that one any more.
    fn note_source(&self, state: &mut State, source: &str, key: &SessionKey) {
        let before = state.sources.insert(source.to_owned(), key.clone());
        let Some(before) = before.filter(|b| b != key) else {
            return;
        };
        if state.sources.values().any(|k| *k == before) {
            return;
        }
        if let Some(target) = state.targets.get_mut(&before) {
            target.retired = true;
            let idle = std::mem::take(&mut target.idle);
            tracing::info!(target = ?before, closed = idle.len(), "a connection string changed at its source; closing the sessions opened with the previous one");
            for entry in idle {
                state.idle -= 1;
                state.open -= 1;
                self.events.closed(Closed::Superseded);
                drop(entry.session);
            }
            self.events.sizes(state.open, state.idle);
        }
    }

    /// The most recently kept idle session of `key`, and the name it was opened ahead with.
    fn take_idle(&self, key: &SessionKey) -> Option<(Session, Option<String>)> {
        let mut state = self.state();
        let idle = state.targets.get_mut(key)?.idle.pop()?;
        state.idle -= 1;
        self.events.sizes(state.open, state.idle);
        Some((idle.session, idle.opened_as))
    }

    /// Closes a session that was lent or just taken from the idle list.
    fn discard(&self, session: Session, why: Closed) {
        drop(session);
        self.count_closed(why);
    }

    fn count_closed(&self, why: Closed) {
        self.events.closed(why);
        let mut state = self.state();
        state.open = state.open.saturating_sub(1);
        self.events.sizes(state.open, state.idle);
    }

    fn put_idle(&self, key: &SessionKey, session: Session) {
        let mut state = self.state();
        let keep = !state.closing && state.targets.get(key).is_some_and(|t| !t.retired);
        if !keep {
            drop(state);
            let why = if self.state().closing {
                Closed::Shutdown
            } else {
                Closed::Superseded
            };
            self.discard(session, why);
            return;
        }
        if let Some(target) = state.targets.get_mut(key) {
            target.idle.push(Idle {
                session,
                since: Instant::now(),
                opened_as: None,
            });
            state.idle += 1;
        }
        while state.idle > self.settings.max_idle {
            if !self.close_oldest_idle(&mut state) {
                break;
            }
        }
        self.events.sizes(state.open, state.idle);
    }

    fn close_oldest_idle(&self, state: &mut State) -> bool {
        let oldest = state
            .targets
            .values_mut()
            .filter(|t| !t.idle.is_empty())
            .min_by_key(|t| t.idle.first().map(|i| i.since));
        let Some(target) = oldest else {
            return false;
        };
        drop(target.idle.remove(0));
        state.idle -= 1;
        state.open -= 1;
        self.events.closed(Closed::IdleCap);
        true
    }

    /// Closes the idle sessions unused for longer than the idle timeout, and forgets keys with
    /// no session left and no pass waiting. Returns how many it closed.
    pub fn close_expired(&self) -> usize {
        let mut state = self.state();
        let timeout = self.settings.idle_timeout;
        let mut closed = 0;
        for target in state.targets.values_mut() {
            let before = target.idle.len();
            target.idle.retain(|i| i.since.elapsed() < timeout);
            closed += before - target.idle.len();
        }
        state.idle -= closed;
        state.open -= closed;
        for _ in 0..closed {
            self.events.closed(Closed::IdleTimeout);
        }
        // A lent session's permit holds the semaphore too, so a key with a pass on it stays.
        state
            .targets
            .retain(|_, t| !t.idle.is_empty() || Arc::strong_count(&t.permits) > 1);
        let State {
            targets, sources, ..
        } = &mut *state;
        sources.retain(|_, key| targets.contains_key(key));
        self.events.sizes(state.open, state.idle);
        closed
    }

    /// Closes expired idle sessions (see [`SessionPool::close_expired`]) every quarter of the idle
    /// timeout (at least every 30 s) until `stop` fires, then closes the pool.
    ///
    /// # Cancel safety
    /// Stops at once on `stop`.
    pub async fn expire_idle_until(&self, stop: &CancellationToken) {
        let every = (self.settings.idle_timeout / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(30));
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => { self.close_expired(); }
                () = stop.cancelled() => break,
            }
        }
        self.close();
    }

    /// From now on, sessions given back are closed at once, without the check that would keep
    /// them; idle ones stay to be lent. For a caller that knows no later pass will borrow a
    /// session given back (the `migrate` command, when every table has a session of its own):
    /// the check would cost a round trip for a session about to close anyway.
    pub fn keep_none(&self) {
        self.state().keep_none = true;
    }

    /// Closes every idle session; sessions lent now are closed when they come back.
    pub fn close(&self) {
        let mut state = self.state();
        state.closing = true;
        let mut closed = 0;
        for target in state.targets.values_mut() {
            closed += target.idle.len();
            target.idle.clear();
        }
        state.idle -= closed;
        state.open -= closed;
        for _ in 0..closed {
            self.events.closed(Closed::Shutdown);
        }
        self.events.sizes(state.open, state.idle);
    }

    /// Sessions open now (lent or idle) and idle.
    pub fn sizes(&self) -> (usize, usize) {
        let state = self.state();
        (state.open, state.idle)
    }
}

/// A session lent to one pass. Dropping it closes the session (its run did not end cleanly);
/// [`PooledSession::give_back`] returns it after a clean run.
pub struct PooledSession<'p> {
    session: Session,
    lent: Lent<'p>,
}

/// Counts a lent session as closed when it is dropped without being handed back, and frees its
/// place among the key's sessions.
struct Lent<'p> {
    pool: &'p SessionPool,
    key: SessionKey,
    handed_back: bool,
    _permit: OwnedSemaphorePermit,
}

impl PooledSession<'_> {
    /// The session.
    pub fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Returns the session to the idle list after a run that ended cleanly (committed or rolled
    /// back, its lock released with `pg_advisory_unlock` returning true), once the server confirms
    /// that no transaction is open and no advisory lock is held; otherwise closes it. A session
    /// that only ran the fixed reads since it was last kept (a periodic check of a current table)
    /// cannot hold either, and is kept without asking.
    pub async fn give_back(self) {
        let PooledSession { session, mut lent } = self;
        lent.handed_back = true;
        let keep_none = lent.pool.state().keep_none;
        if keep_none {
            lent.pool.discard(session, Closed::Shutdown);
        } else if session.only_read_since_kept() && !session.is_closed() {
            lent.pool.put_idle(&lent.key, session);
        } else if is_clean(&session).await {
            session.mark_kept();
            lent.pool.put_idle(&lent.key, session);
        } else {
            tracing::warn!(target = ?lent.key, "a session was not idle after a clean run (open transaction or advisory lock); closing it");
            lent.pool.discard(session, Closed::Broken);
        }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if !self.handed_back {
            // The session itself closes as the `PooledSession` holding it drops.
            self.pool.count_closed(Closed::NotClean);
        }
    }
}
