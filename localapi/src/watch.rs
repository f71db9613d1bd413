//! Watch streams: newline-delimited JSON events, bookmarks, timeouts, and 410 for expired positions.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::error::ApiError;
use crate::registry::ResourceDef;
use crate::selector::Selector;
use crate::server::Shared;
use crate::store::{Event, EventType, ResKey, lock};

/// What a watch request asked for.
#[derive(Debug, Clone)]
pub struct WatchParams {
    /// The resource watched.
    pub def: ResourceDef,
    /// Namespace filter (None = all namespaces or cluster-scoped).
    pub namespace: Option<String>,
    /// Label/field selector.
    pub selector: Selector,
    /// Start position; `None` for "" or "0" (synthetic ADDED events first).
    pub resource_version: Option<u64>,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `sendInitialEvents=true`: synthetic ADDED events then an `initial-events-end` bookmark.
    pub send_initial_events: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
}

impl WatchParams {
    fn res(&self) -> ResKey {
        self.def.storage_key()
    }

    fn matches(&self, obj: &Value) -> bool {
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.namespace.as_deref().is_none_or(|n| n == ns) && self.selector.matches(obj)
    }

    /// The event type this watcher sees for a store event, if any (selector transitions become ADDED/DELETED).
    fn view(&self, ev: &Event) -> Option<&'static str> {
        if ev.res != self.res() {
            return None;
        }
        let now = self.matches(&ev.object);
        let before = ev.old.as_ref().is_some_and(|o| self.matches(o));
        match ev.kind {
            EventType::Added => now.then_some("ADDED"),
            EventType::Deleted => (now || before).then_some("DELETED"),
            EventType::Modified => match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            },
        }
    }

    fn line(&self, kind: &str, obj: &Value) -> Bytes {
        let mut o = obj.clone();
        o["apiVersion"] = json!(self.def.api_version());
        let mut s = json!({"type": kind, "object": o}).to_string();
        s.push('\n');
        Bytes::from(s)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj =
            json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": meta});
        let mut s = json!({"type": "BOOKMARK", "object": obj}).to_string();
        s.push('\n');
        Bytes::from(s)
    }
}

/// Starts a watch: takes the initial events and subscribes under one lock so nothing is missed.
pub fn start(shared: &Arc<Shared>, p: WatchParams) -> Body {
    let mut initial: Vec<Bytes> = Vec::new();
    let (rx, position, expired) = {
        let state = lock(&shared.state);
        let mut expired = false;
        match p.resource_version {
            Some(rv) if rv < state.floor => {
                let status = ApiError::gone(format!(
                    "too old resource version: {rv} ({})",
                    state.floor + 1
                ))
                .to_status();
                let mut s = json!({"type": "ERROR", "object": status}).to_string();
                s.push('\n');
                initial.push(Bytes::from(s));
                expired = true;
            }
            Some(rv) if !p.send_initial_events => {
                for ev in state.history.iter().filter(|e| e.rv > rv) {
                    if let Some(kind) = p.view(ev) {
                        initial.push(p.line(kind, &ev.object));
                    }
                }
            }
            _ => {
                for obj in state.list(&p.res(), p.namespace.as_deref()) {
                    if p.matches(obj) {
                        initial.push(p.line("ADDED", obj));
                    }
                }
                if p.send_initial_events && p.bookmarks {
                    initial.push(p.bookmark(state.rv, true));
                }
            }
        }
        (state.tx.subscribe(), state.rv, expired)
    };
    let (tx, out) = mpsc::channel::<Bytes>(256);
    let shared = shared.clone();
    tokio::spawn(async move {
        for line in initial {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        if !expired {
            pump(&shared, &p, rx, position, &tx).await;
        }
    });
    Body::from_stream(ReceiverStream::new(out).map(Ok::<_, Infallible>))
}

async fn pump(
    shared: &Shared,
    p: &WatchParams,
    mut rx: broadcast::Receiver<Arc<Event>>,
    position: u64,
    tx: &mpsc::Sender<Bytes>,
) {
    let mut last = position;
    let mut drop_rx = shared.drop_watches.subscribe();
    let timeout = p.timeout.unwrap_or(Duration::from_secs(3600));
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(shared.bookmark_interval);
    tick.tick().await;
    loop {
        let line = tokio::select! {
            _ = &mut deadline => return,
            _ = drop_rx.changed() => return,
            _ = tx.closed() => return,
            _ = tick.tick(), if p.bookmarks => Some(p.bookmark(last, false)),
            got = rx.recv() => match got {
                Ok(ev) => {
                    last = ev.rv;
                    p.view(&ev).map(|kind| p.line(kind, &ev.object))
                }
                // A lagging watcher is closed, like kube closes slow watchers; clients re-watch from their last RV.
                Err(_) => return,
            },
        };
        if let Some(line) = line
            && tx.send(line).await.is_err()
        {
            return;
        }
    }
}
