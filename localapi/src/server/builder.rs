//! [`LocalApi::builder`] and [`LocalApiBuilder`]: configuration, the initial namespaces and CRDs,
//! binding and the background server task.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::{oneshot, watch};

use super::{Error, LocalApiHandle, Shared, dispatch};
use crate::crds;
use crate::faults::{Faults, Stats};
use crate::store::State;
use crate::write::{self, FieldValidation, Owner, WriteCtx};

/// Configures and starts a server. See [`LocalApi::builder`].
#[derive(Debug, Clone)]
pub struct LocalApiBuilder {
    crds: Vec<String>,
    crd_files: Vec<PathBuf>,
    port: u16,
    history_limit: usize,
    bookmark_interval: Duration,
    namespaces: Vec<String>,
}

/// Entry point: `LocalApi::builder().crd_yaml(..).start().await`.
#[derive(Debug, Clone, Copy)]
pub struct LocalApi;

impl LocalApi {
    /// A builder with defaults: random port, 1000 history events, bookmarks every 1 s,
    /// namespaces `default`, `kube-system`, `kube-public`.
    pub fn builder() -> LocalApiBuilder {
        LocalApiBuilder {
            crds: Vec::new(),
            crd_files: Vec::new(),
            port: 0,
            history_limit: 1000,
            bookmark_interval: Duration::from_secs(1),
            namespaces: vec!["default".into(), "kube-system".into(), "kube-public".into()],
        }
    }
}

impl LocalApiBuilder {
    /// Adds CRDs from a YAML file (multi-document allowed).
    pub fn crd_file(mut self, path: impl AsRef<Path>) -> Self {
        self.crd_files.push(path.as_ref().to_path_buf());
        self
    }

    /// Adds CRDs from YAML text.
    pub fn crd_yaml(mut self, yaml: &str) -> Self {
        self.crds.push(yaml.to_string());
        self
    }

    /// Listens on this port instead of a random one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Number of events kept for watch resumption; older positions get 410 Gone.
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Interval between BOOKMARK events on watches that allow them.
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Creates an extra namespace at start.
    pub fn namespace(mut self, name: &str) -> Self {
        self.namespaces.push(name.to_string());
        self
    }

    /// Binds 127.0.0.1, loads CRDs and serves in a background task.
    ///
    /// # Errors
    /// When a CRD cannot be read or loaded, or the port cannot be bound.
    pub async fn start(self) -> Result<LocalApiHandle, Error> {
        let mut state = State::new(self.history_limit);
        let ns_def = state.registry.find("", "v1", "namespaces").cloned();
        if let Some(def) = ns_def {
            for ns in &self.namespaces {
                let ctx = WriteCtx {
                    def: &def,
                    scope: crate::managed::Scope::Main,
                    owner: Owner::Update("localapi".into()),
                    dry_run: false,
                    validation: FieldValidation::Ignore,
                };
                // An already existing namespace is fine.
                let _ = write::create(&mut state, &ctx, None, json!({"metadata": {"name": ns}}));
            }
        }
        let mut yamls = self.crds;
        for path in &self.crd_files {
            yamls.push(
                std::fs::read_to_string(path).map_err(|source| Error::ReadCrd {
                    path: path.clone(),
                    source,
                })?,
            );
        }
        for y in &yamls {
            crds::load_yaml(&mut state, y).map_err(Error::LoadCrd)?;
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .map_err(|source| Error::Bind {
                port: self.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            port: self.port,
            source,
        })?;
        let (drop_watches, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            faults: Mutex::new(Faults::default()),
            stats: Mutex::new(Stats::default()),
            drop_watches,
            bookmark_interval: self.bookmark_interval,
            addr,
        });
        let app = axum::Router::new()
            .fallback(dispatch::dispatch)
            .with_state(shared.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stop_rx.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "local API server stopped");
            }
        });
        Ok(LocalApiHandle::new(shared, stop_tx, task))
    }
}
