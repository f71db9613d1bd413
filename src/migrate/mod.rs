//! Bringing a Brighter box table to its target version under the advisory lock, exactly as
//! Brighter's own runner would, so an application and the operator can share a database.
//!
//! - `plan`, `outcome`, `decision`: the vocabulary (pure): the [`Plan`], what a run did
//!   ([`Outcome`]) and what it decides to do ([`Decision`]); the box, its payload, its history
//!   scope and the run's path are the CRD's own words ([`crate::crd::BoxKind`] and the others).
//! - `catalog`: the versions, their descriptions and DDL (pure).
//! - `detect`: what is in the database now (table, columns, payload type, history).
//! - `history`: Brighter's `__BrighterMigrationHistory` table.
//! - `shape`: the latest (fresh) table shapes and their DDL (pure).
//! - `runner`: the one transaction: lock, BEGIN, ensure history, re-detect, apply, COMMIT, unlock.
//! - `statements`: the statements a transaction runs, as values (the runner executes them,
//!   `migrate --dry-run` prints them).
//! - `drift`: how a table differs from the shape its recorded version implies (pure).
//! - `inspect`: reading a table's actual shape and comparing it (drift, read-only).
//! - `index_name`: refusing a replay index whose name (cut to 63 bytes) is already taken.
//! - `observe`: what a run would do, read-only (suspended resources and `migrate --dry-run`).
//! - `ownership`: which BoxTable owns a table (a record in the table's comment).
//! - `postgres_version`: which PostgreSQL majors are supported (13 and newer).
//! - `teardown`: dropping a table and its history rows (`deletionPolicy: Drop`).
//! - `error`: [`RunError`] and its bounded [`crate::reason::Reason`].

pub mod catalog;
mod decision;
pub mod detect;
pub mod drift;
mod error;
pub mod history;
mod index_name;
pub mod inspect;
pub mod observe;
mod outcome;
pub mod ownership;
mod plan;
pub mod postgres_version;
pub mod runner;
pub mod shape;
pub mod statements;
pub mod teardown;

pub use crate::crd::{BoxKind, HistoryScope, Payload, RunPath};
pub use decision::Decision;
pub use error::RunError;
pub use observe::{Observation, Preview, observe, preview};
pub use outcome::Outcome;
pub use plan::{DEFAULT_DDL_LOCK_TIMEOUT, DdlTimeouts, InvalidPlan, Plan};
pub use runner::run;
pub use teardown::{DropBlock, DropOutcome, DropRequest, DropVerdict, Rows, drop_box_table};
