//! A black hole on loopback: a TCP listener the test owns that accepts every connection and never
//! answers (nor closes it), as a database behind a dead firewall rule or a hung server looks to a
//! client. It counts the connections it has swallowed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The listener and its accepting task; dropping it closes the listener and every connection.
pub struct BlackHole {
    /// The port on 127.0.0.1.
    pub port: u16,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl BlackHole {
    pub async fn start() -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(socket);
            }
        });
        BlackHole {
            port,
            accepted,
            task,
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// A connection string to the black hole, with `password` and a connect timeout of 60 s
    /// (the most allowed), so that connecting alone would outlast any pass's budget.
    pub fn url(&self, password: &str) -> String {
        format!(
            "postgres://blackhole:{password}@127.0.0.1:{}/nowhere?sslmode=disable&connect_timeout=60",
            self.port
        )
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}
