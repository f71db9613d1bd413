//! Integration tests of the local API server over real HTTP (and the real kubectl).
// Test helpers outside #[test] functions may fail loudly too; clippy.toml only covers #[test] bodies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod apply;
mod common;
mod crud;
mod discovery;
mod faults;
mod kube_client;
mod kubectl;
mod table;
mod validation;
mod watch;
