//! The HTTP server: builder, handle, routing of discovery/OpenAPI/resource/control requests.
//!
//! builder.rs configures and starts a server, handle.rs is the running server's handle,
//! dispatch.rs routes each request; this file holds the state they share.

mod builder;
mod dispatch;
mod handle;

pub use builder::{LocalApi, LocalApiBuilder};
pub use handle::LocalApiHandle;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::watch;

use crate::faults::{Faults, Stats};
use crate::store::State;

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CRD file could not be read.
    #[error("reading CRD file {path}")]
    ReadCrd {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A CRD document was refused.
    #[error("loading CRD: {0}")]
    LoadCrd(String),
    /// The listener could not bind.
    #[error("binding 127.0.0.1:{port}")]
    Bind {
        /// Requested port.
        port: u16,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// State shared by every request.
#[derive(Debug)]
pub struct Shared {
    /// Objects, registry and history.
    pub state: Mutex<State>,
    /// Active faults.
    pub faults: Mutex<Faults>,
    /// Request counters.
    pub stats: Mutex<Stats>,
    /// Bumped to close every open watch.
    pub drop_watches: watch::Sender<u64>,
    /// Interval of periodic BOOKMARK events.
    pub bookmark_interval: Duration,
    /// Bound address.
    pub addr: SocketAddr,
}

/// A JSON response.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}
