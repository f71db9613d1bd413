//! The object store: objects by resource, one global resourceVersion counter, a bounded event history.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::broadcast;

use crate::registry::Registry;

/// Storage bucket of one resource (group, plural); all versions share it.
pub type ResKey = (String, String);
/// Object key inside a bucket: (namespace or "", name).
pub type ObjKey = (String, String);

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, `MODIFIED`, `DELETED`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as stored in the history and broadcast to watchers.
#[derive(Debug, Clone)]
pub struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Bucket the object lives in.
    pub res: ResKey,
    /// Change type.
    pub kind: EventType,
    /// The object after the change (for DELETED: the last state).
    pub object: Value,
    /// The object before the change, for selector transitions.
    pub old: Option<Value>,
}

/// All mutable server state behind one mutex.
#[derive(Debug)]
pub struct State {
    /// Served resource types.
    pub registry: Registry,
    /// Objects by bucket.
    pub objects: HashMap<ResKey, BTreeMap<ObjKey, Value>>,
    /// Last issued resourceVersion.
    pub rv: u64,
    /// Recent events, oldest first.
    pub history: VecDeque<Arc<Event>>,
    /// Events with rv <= floor are no longer available (watch from them gets 410).
    pub floor: u64,
    /// Maximum history length.
    pub history_limit: usize,
    /// Broadcast of every event, sent while the lock is held so order is global.
    pub tx: broadcast::Sender<Arc<Event>>,
}

impl State {
    /// An empty store with the built-in kinds registered.
    pub fn new(history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(8192);
        Self {
            registry: Registry::new(),
            objects: HashMap::new(),
            rv: 0,
            history: VecDeque::new(),
            floor: 0,
            history_limit: history_limit.max(1),
            tx,
        }
    }

    /// Issues the next resourceVersion.
    pub fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Reads one object.
    pub fn get(&self, res: &ResKey, key: &ObjKey) -> Option<&Value> {
        self.objects.get(res).and_then(|m| m.get(key))
    }

    /// Objects of a bucket, optionally in one namespace, sorted by (namespace, name).
    pub fn list(&self, res: &ResKey, namespace: Option<&str>) -> Vec<&Value> {
        self.objects
            .get(res)
            .map(|m| {
                m.iter()
                    .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
                    .map(|(_, v)| v)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stores (or removes, for `Deleted`) an object and records + broadcasts the event.
    /// The object must already carry `rv` in `metadata.resourceVersion`.
    pub fn commit(
        &mut self,
        res: &ResKey,
        key: ObjKey,
        kind: EventType,
        object: Value,
        old: Option<Value>,
        rv: u64,
    ) {
        let bucket = self.objects.entry(res.clone()).or_default();
        if kind == EventType::Deleted {
            bucket.remove(&key);
        } else {
            bucket.insert(key, object.clone());
        }
        let ev = Arc::new(Event {
            rv,
            res: res.clone(),
            kind,
            object,
            old,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_limit {
            if let Some(e) = self.history.pop_front() {
                self.floor = e.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(ev);
    }

    /// Forgets all history up to now, like an etcd compaction: older watch positions get 410.
    pub fn compact(&mut self) {
        self.history.clear();
        self.floor = self.rv;
    }
}

/// Locks a mutex, recovering the data if another thread panicked while holding it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
