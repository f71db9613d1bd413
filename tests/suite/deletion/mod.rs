//! Deleting BoxTables: `deletionPolicy: Drop` and `Retain`, namespaces and uninstalls, the Secret
//! finalizer, and nothing dropped that was not asked for.

mod controller;
mod drop_and_history_scope;
mod namespace;
mod secret_finalizer;
mod uninstall;
