//! Forgetting: what the controller keeps about a BoxTable (when it is next due, its failures) or
//! a Secret (the connection read from it, the finalizers it carries) goes when the object goes,
//! so that the operator's memory follows the objects that exist, not every object it ever saw.
//!
//! Three ways in, so that no order of events leaves an entry behind:
//! - the watches' delete events: a BoxTable gone (Retain or Drop, released or not) takes its
//!   entries and, when no other BoxTable refers to its Secret, what was read from that Secret; a
//!   Secret gone takes what was read from it and its finalizers;
//! - after each pass ([`Memory::settle`]): a pass that ended after the cache saw its object go
//!   (a Retain BoxTable deleted while its pass ran) forgets what it just recorded;
//! - a sweep when a watch relists (deletions it missed while disconnected) and every
//!   [`SWEEP_EVERY`], which keeps only the entries of objects the caches hold, and of the
//!   Secrets they refer to (so a Secret a `secretRef` moved away from goes within a minute), and
//!   files each BoxTable in the conflict check's index only under the table it names now.
//!
//! A trigger queued for an object that is gone never reaches a pass (the controller looks the
//! object up in its cache first), so forgetting it cannot start a pass again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::conflicts::{TableIndex, table_key};
use super::own_writes::OwnWrites;
use super::schedule::Schedule;
use super::secret_guard::Holds;
use super::secrets::{SecretMetadata, SecretReader};
use crate::crd::BoxTable;
use crate::telemetry::{CacheEntries, CacheSource};

/// How often every entry is checked against the caches, whatever the events.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The per-object and per-Secret state of one watch scope, and the BoxTable cache it follows.
pub(crate) struct Memory {
    boxtables: Store<BoxTable>,
    schedule: Arc<Schedule>,
    backoff: Arc<Backoff>,
    secrets: Arc<SecretReader>,
    holds: Arc<Holds>,
    tables: Arc<TableIndex>,
    own_writes: Arc<OwnWrites>,
}

impl Memory {
    /// The state of one scope, forgotten by what `boxtables` (the controller's cache) holds.
    pub(super) fn new(
        boxtables: Store<BoxTable>,
        schedule: Arc<Schedule>,
        backoff: Arc<Backoff>,
        secrets: Arc<SecretReader>,
        holds: Arc<Holds>,
        tables: Arc<TableIndex>,
        own_writes: Arc<OwnWrites>,
    ) -> Self {
        Self {
            boxtables,
            schedule,
            backoff,
            secrets,
            holds,
            tables,
            own_writes,
        }
    }

    /// Follows an event of the BoxTable watch, after the cache has taken it in.
    pub(super) fn boxtable_event(&self, event: &Event<BoxTable>) {
        match event {
            Event::Delete(bt) => self.boxtable_gone(bt),
            Event::InitDone => self.sweep(),
            Event::InitApply(bt) | Event::Apply(bt) => self.own_writes.seen(bt),
            Event::Init => {}
        }
    }

    /// A watcher of the Secret watch's events (after its cache has taken them in): deleted
    /// Secrets are forgotten, and on a relist those that were not listed again.
    pub(super) fn secret_observer(
        self: Arc<Self>,
    ) -> impl FnMut(&Event<SecretMetadata>) + Send + 'static {
        let mut listed: Option<HashSet<(String, String)>> = None;
        move |event| match event {
            Event::Delete(secret) => {
                let namespace = secret.namespace().unwrap_or_default();
                let name = secret.name_any();
                self.secrets.forget(&namespace, &name);
                self.holds.forget(&namespace, &name);
            }
            Event::Init => listed = Some(HashSet::new()),
            Event::InitApply(secret) => {
                if let Some(listed) = &mut listed {
                    listed.insert((secret.namespace().unwrap_or_default(), secret.name_any()));
                }
            }
            Event::InitDone => {
                if let Some(listed) = listed.take() {
                    let live =
                        |ns: &str, name: &str| listed.contains(&(ns.to_owned(), name.to_owned()));
                    self.holds.retain(live);
                    self.secrets.retain(live);
                }
            }
            Event::Apply(_) => {}
        }
    }

    /// Forgets a BoxTable the cache no longer holds, and its Secret when no other BoxTable in
    /// the cache refers to it.
    fn boxtable_gone(&self, bt: &BoxTable) {
        if let Some(uid) = bt.uid() {
            self.forget(&uid);
        }
        let namespace = bt.namespace().unwrap_or_default();
        let secret = &bt.spec.database.secret_ref.name;
        let still_read = self.boxtables.state().iter().any(|other| {
            other.namespace().as_deref() == Some(namespace.as_str())
                && other.spec.database.secret_ref.name == *secret
        });
        if !still_read {
            self.secrets.forget(&namespace, secret);
        }
    }

    fn forget(&self, uid: &str) {
        self.schedule.gone(uid);
        self.own_writes.forget(uid);
        self.backoff.on_success(uid);
    }

    /// After a pass of `bt` (or its error policy): when the cache no longer holds `bt` (it went
    /// while the pass ran), forgets what the pass recorded, as its delete event did before. One
    /// lookup when `bt` is still there, so every pass stays O(1); a Secret a `secretRef` moved
    /// away from is left to the sweep.
    pub(super) fn settle(&self, bt: &BoxTable) {
        let cached = self.boxtables.get(&ObjectRef::from_obj(bt));
        if cached.is_none_or(|cached| cached.uid() != bt.uid()) {
            self.boxtable_gone(bt);
        }
    }

    /// Keeps only the entries of the objects the caches hold now.
    pub(super) fn sweep(&self) {
        // Each live object's uid with the version the cache holds.
        let live: HashMap<String, Option<String>> = self
            .boxtables
            .state()
            .iter()
            .filter_map(|bt| Some((bt.uid()?, bt.resource_version())))
            .collect();
        self.schedule.retain(|uid| live.contains_key(uid));
        self.tables
            .sweep(|object| self.boxtables.get(object).map(|bt| table_key(&bt.spec)));
        self.backoff.retain(|uid| live.contains_key(uid));
        self.own_writes
            .retain(|uid| live.get(uid).cloned().flatten());
        self.forget_unreferenced_secrets();
    }

    fn forget_unreferenced_secrets(&self) {
        let referenced: HashSet<(String, String)> = self
            .boxtables
            .state()
            .iter()
            .map(|bt| {
                (
                    bt.namespace().unwrap_or_default(),
                    bt.spec.database.secret_ref.name.clone(),
                )
            })
            .collect();
        self.secrets
            .retain(|ns, name| referenced.contains(&(ns.to_owned(), name.to_owned())));
        self.schedule
            .retain_secrets(|ns, name| referenced.contains(&(ns.to_owned(), name.to_owned())));
    }

    /// Sweeps every [`SWEEP_EVERY`] until `stop` fires.
    ///
    /// # Cancel safety
    /// Stops at once on `stop`.
    pub(super) async fn sweep_until(&self, stop: &CancellationToken) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(SWEEP_EVERY) => self.sweep(),
                () = stop.cancelled() => return,
            }
        }
    }
}

impl CacheSource for Memory {
    fn entries(&self) -> CacheEntries {
        CacheEntries {
            secret_reads: self.secrets.entries(),
            secret_finalizers: self.holds.entries(),
            schedule: self.schedule.entries() + self.own_writes.entries(),
            backoff: self.backoff.entries(),
        }
    }
}
