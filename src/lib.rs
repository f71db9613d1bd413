//! boxtable-operator: provisions Brighter outbox and inbox tables in PostgreSQL from `BoxTable`
//! resources, under the same advisory lock Brighter applications take.
//!
//! A `BoxTable` becomes a [`migrate::Plan`]; the runner takes the lock derived in [`lock`] on one
//! dedicated connection, brings the table to its target version in one transaction with Brighter's
//! history table, releases the lock, and the result becomes the resource's status.

pub mod controller;
pub mod crd;
pub mod db;
pub mod duration;
pub mod ident;
pub mod lock;
#[cfg(feature = "manifests")]
pub mod manifests;
pub mod migrate;
pub mod pass;
pub mod reason;
pub mod report;
pub mod status;
pub mod telemetry;
pub mod waits;
