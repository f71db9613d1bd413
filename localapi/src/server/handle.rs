//! [`LocalApiHandle`]: the running server's URL, kubeconfig, faults, watches, history, counters
//! and shutdown.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::Shared;
use crate::faults::{Fault, Stats};
use crate::kubeconfig;
use crate::store::lock;

/// A running server. Dropping it stops the server.
#[derive(Debug)]
pub struct LocalApiHandle {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl LocalApiHandle {
    /// The handle of a server task that stops when `stop` fires.
    pub(super) fn new(
        shared: Arc<Shared>,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    ) -> Self {
        LocalApiHandle {
            shared,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Writes a kubeconfig for this server (empty user, namespace `default`).
    ///
    /// # Errors
    /// The I/O error when the file cannot be written.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        kubeconfig::write(path.as_ref(), &self.url())
    }

    /// Adds a fault rule.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared.faults).add(fault);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Closes every open watch stream (clients see the connection end and re-watch).
    pub fn drop_watches(&self) {
        self.shared.drop_watches.send_modify(|n| *n += 1);
    }

    /// Forgets the event history, so watches from any earlier resourceVersion get 410 Gone.
    pub fn compact(&self) {
        lock(&self.shared.state).compact();
    }

    /// Total API requests served (control endpoints excluded).
    pub fn request_count(&self) -> u64 {
        lock(&self.shared.stats).total
    }

    /// A snapshot of the request counters.
    pub fn stats(&self) -> Stats {
        lock(&self.shared.stats).clone()
    }

    /// Resets the request counters.
    pub fn reset_stats(&self) {
        *lock(&self.shared.stats) = Stats::default();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.state).rv
    }

    /// Stops serving and waits for the server task to end.
    pub async fn shutdown(mut self) {
        self.drop_watches();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LocalApiHandle {
    fn drop(&mut self) {
        self.shared.drop_watches.send_modify(|n| *n += 1);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
