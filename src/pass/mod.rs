//! One pass over one BoxTable, shared by the controller and the `migrate` command:
//! [`source`] (a Secret, from the API server or from files, becomes a [`Connection`](crate::db::Connection)),
//! [`plan`] (the spec becomes a validated [`Plan`](crate::migrate::Plan)), then [`run()`] (a session
//! borrowed for one [`Step`]: migrate, observe, preview or drop, a migration or an observation
//! ending in an [`Observed`](crate::status::Observed) value the status is computed from).

pub mod plan;
mod run;
pub mod source;

pub use run::{DropTable, Left, Migrate, Observe, PassError, Preview, Step, Target, failure, run};
