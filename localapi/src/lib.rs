//! A development-only local Kubernetes API server for boxtable-operator tests and demos.
//!
//! It speaks plain HTTP on 127.0.0.1 and serves discovery, CRUD, watch, server-side apply, CRD schema
//! validation (with a CEL subset), server-side tables and OpenAPI v3, faithfully enough for kube-rs and
//! kubectl 1.31. See `README.md` for what is faithful and what is approximated.
//!
//! ```no_run
//! # async fn demo() -> Result<(), boxtable_localapi::Error> {
//! let api = boxtable_localapi::LocalApi::builder().crd_file("crds/boxtable.yaml").start().await?;
//! println!("{}", api.url());
//! api.shutdown().await;
//! # Ok(()) }
//! ```

pub mod cel;
mod control;
mod crds;
pub mod discovery;
pub mod error;
pub mod faults;
mod handlers;
pub mod jsonpath;
pub mod kubeconfig;
pub mod managed;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod registry;
mod request;
pub mod selector;
mod server;
pub mod store;
pub mod table;
pub mod validate;
mod watch;
pub mod write;

pub use faults::{Fault, Stats};
pub use server::{Error, LocalApi, LocalApiBuilder, LocalApiHandle};
