//! Bringing a table to its target version: fresh installs, upgrades from every older shape,
//! failures that leave nothing behind, and the controller doing it for BoxTables.

mod controller;
mod errors;
mod fresh;
mod killed_mid_run;
mod newer_history;
mod up_to_date_snapshot;
mod upgrade;
