//! The connections of the metrics and health server: accepted up to a limit, each with deadlines
//! on reading a request head and on a stalled read or write, served over HTTP/1.1 (in TLS when
//! the server is secured) and let finish on shutdown.
//!
//! The limit is enforced by eviction: a connection accepted at the limit closes the oldest
//! connection that is not in the middle of a request (one that is idle between requests or
//! still sending its request head), so a flood of half-sent requests cannot lock out the
//! kubelet's probes or a scraper; when every connection is in a request, the new one is closed
//! at once. Either way the number of connections, and of tasks serving them, never exceeds the
//! limit.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use std::convert::Infallible;

use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt as _;
use hyper::Request;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The limits every connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; past it the oldest one not in a request is closed.
    pub max_connections: usize,
    /// Time to send a whole request head (and to finish the TLS handshake) after connecting or
    /// after the previous response: a connection idle between requests is closed after it too.
    pub header_read: Duration,
    /// Time a read or a write may make no progress while a request is read or a response is
    /// written (a client that stops reading its response).
    pub stall: Duration,
    /// Bytes buffered for a request head.
    pub max_head_bytes: usize,
}

/// The limits of the operator's server: 64 connections (a scraper or two and the kubelet's
/// probes need a handful), 5 s to send a request head, 10 s of no progress.
pub const LIMITS: Limits = Limits {
    max_connections: 64,
    header_read: Duration::from_secs(5),
    stall: Duration::from_secs(10),
    max_head_bytes: 16 * 1024,
};

/// Accepts connections on `listener` until `shutdown` is cancelled, serving each with `app`
/// (in TLS through `tls` when given); then lets every open connection finish the request it is
/// in and returns. An accept that fails (out of file descriptors, for example) is logged and
/// retried after a pause.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Slots::new(limits.max_connections));
    let tasks = TaskTracker::new();
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) if is_per_connection(&error) => continue,
                Err(error) => {
                    tracing::warn!(error = %error, "accepting a metrics connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(slot) = slots.admit() else {
            tracing::debug!("closing a new metrics connection: every connection is in a request");
            continue;
        };
        let connection = Connection {
            slot,
            app: app.clone(),
            limits,
            shutdown: shutdown.clone(),
        };
        tasks.spawn(connection.serve(stream, tls.clone()));
    }
    drop(listener);
    tasks.close();
    tasks.wait().await;
}

/// Errors of one connection that `accept` reports (the peer gave up before it was accepted).
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}

/// One accepted connection and what it is served with.
struct Connection {
    slot: Slot,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
}

impl Connection {
    /// Serves the connection until the client closes it, a deadline passes, it is evicted, or
    /// (after the request in progress) the server shuts down.
    async fn serve(self, stream: TcpStream, tls: Option<TlsAcceptor>) {
        let stream = Stalls::new(stream, self.limits.stall);
        match tls {
            None => self.serve_io(stream).await,
            Some(acceptor) => {
                let evicted = self.slot.evicted.clone();
                let handshake =
                    tokio::time::timeout(self.limits.header_read, acceptor.accept(stream));
                let stream = tokio::select! {
                    () = evicted.cancelled() => return,
                    done = handshake => match done {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(error)) => {
                            tracing::debug!(error = %error, "a metrics client's TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    },
                };
                self.serve_io(stream).await
            }
        }
    }

    async fn serve_io<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let busy = self.slot.busy.clone();
        let app = TowerToHyperService::new(self.app);
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let guard = Busy::enter(busy.clone());
            let call = app.call(request);
            async move {
                let response = call.await?;
                // In a request until its response is written (its body dropped).
                Ok::<_, Infallible>(response.map(move |body| {
                    Body::new(body.map_frame(move |frame| {
                        let _in_request = &guard;
                        frame
                    }))
                }))
            }
        });
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read)
            .max_buf_size(self.limits.max_head_bytes);
        let connection = http.serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        tokio::select! {
            _ = connection.as_mut() => return,
            () = self.slot.evicted.cancelled() => return,
            () = self.shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
        }
        tokio::select! {
            _ = connection.as_mut() => {}
            () = self.slot.evicted.cancelled() => {}
        }
    }
}

/// The open connections, oldest first, and which are in a request.
struct Slots {
    max: usize,
    open: Mutex<SlotTable>,
}

#[derive(Default)]
struct SlotTable {
    next: u64,
    entries: BTreeMap<u64, SlotEntry>,
}

struct SlotEntry {
    busy: Arc<AtomicUsize>,
    evicted: CancellationToken,
}

/// A connection's place among the open ones; freed when dropped.
struct Slot {
    slots: Arc<Slots>,
    id: u64,
    busy: Arc<AtomicUsize>,
    evicted: CancellationToken,
}

impl Slots {
    fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            open: Mutex::new(SlotTable::default()),
        }
    }

    /// A place for a new connection: at the limit, the oldest connection not in a request is
    /// evicted to make room; `None` when every connection is in a request.
    fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut table = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if table.entries.len() >= self.max {
            let idle = table
                .entries
                .iter()
                .find(|(_, entry)| entry.busy.load(Ordering::Acquire) == 0)
                .map(|(id, _)| *id)?;
            if let Some(entry) = table.entries.remove(&idle) {
                entry.evicted.cancel();
            }
        }
        let id = table.next;
        table.next += 1;
        let busy = Arc::new(AtomicUsize::new(0));
        let evicted = CancellationToken::new();
        table.entries.insert(
            id,
            SlotEntry {
                busy: busy.clone(),
                evicted: evicted.clone(),
            },
        );
        Some(Slot {
            slots: self.clone(),
            id,
            busy,
            evicted,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        table.entries.remove(&self.id);
    }
}

/// Marks its connection as in a request while it lives.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn enter(count: Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A stream whose reads and writes fail with `TimedOut` once they have waited `limit` without
/// progress.
struct Stalls<S> {
    inner: S,
    limit: Duration,
    read: Option<Pin<Box<Sleep>>>,
    write: Option<Pin<Box<Sleep>>>,
}

impl<S> Stalls<S> {
    fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            read: None,
            write: None,
        }
    }
}

/// Passes `poll` through, failing it once it has been pending for `limit` since the last
/// progress (`deadline` holds the running timer).
fn within<T>(
    deadline: &mut Option<Pin<Box<Sleep>>>,
    limit: Duration,
    cx: &mut Context<'_>,
    poll: Poll<io::Result<T>>,
) -> Poll<io::Result<T>> {
    match poll {
        Poll::Ready(result) => {
            *deadline = None;
            Poll::Ready(result)
        }
        Poll::Pending => {
            let timer = deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
            match timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    *deadline = None;
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the metrics client made no progress",
                    )))
                }
                Poll::Pending => Poll::Pending,
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalls<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        within(&mut this.read, this.limit, cx, poll)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        within(&mut this.write, this.limit, cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        within(&mut this.write, this.limit, cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        within(&mut this.write, this.limit, cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        within(&mut this.write, this.limit, cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_limit_the_oldest_connection_not_in_a_request_makes_room() {
        let slots = Arc::new(Slots::new(2));
        let first = slots.admit().unwrap();
        let second = slots.admit().unwrap();
        let _in_request = Busy::enter(first.busy.clone());
        let third = slots.admit().unwrap();
        assert!(!first.evicted.is_cancelled(), "the first is in a request");
        assert!(second.evicted.is_cancelled(), "the oldest idle one goes");
        assert!(!third.evicted.is_cancelled());
        let _also_busy = Busy::enter(third.busy.clone());
        assert!(
            slots.admit().is_none(),
            "every connection is in a request: the new one is refused"
        );
    }

    #[test]
    fn a_closed_connection_frees_its_place() {
        let slots = Arc::new(Slots::new(1));
        let only = slots.admit().unwrap();
        let _in_request = Busy::enter(only.busy.clone());
        assert!(slots.admit().is_none());
        drop(_in_request);
        drop(only);
        let next = slots.admit().unwrap();
        assert!(!next.evicted.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_makes_no_progress_fails_after_the_stall_limit() {
        use tokio::io::AsyncReadExt as _;
        let (client, server) = tokio::io::duplex(64);
        let mut server = Stalls::new(server, Duration::from_secs(10));
        let started = tokio::time::Instant::now();
        let mut buf = [0u8; 8];
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        drop(client);
    }
}
