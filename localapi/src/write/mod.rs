//! The write pipeline shared by create, update, patch and apply: status isolation, schema, generation,
//! managedFields, finalizers, resourceVersion and events.
//!
//! [`create`] (create.rs) and [`update`] (update.rs) run the shared steps in steps.rs; [`delete`]
//! and the finalizer rules live in delete.rs. This file holds the per-request settings and results.

mod create;
mod delete;
mod steps;
mod update;

pub use create::{create, namespace_exists};
pub use delete::delete;
pub use update::update;

use crate::error::Subject;
use crate::managed::Scope;
use crate::registry::ResourceDef;
use serde_json::Value;

/// `?fieldValidation=`: what to do with unknown fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and return a `Warning` header (the server default).
    Warn,
    /// Refuse the request with 400 BadRequest.
    Strict,
}

/// Who owns the fields a write changes.
#[derive(Debug, Clone, PartialEq)]
pub enum Owner {
    /// An Update operation by this manager; ownership is derived from the diff.
    Update(String),
    /// Server-side apply already computed `metadata.managedFields` on the new object.
    Applied,
}

/// Per-request write settings.
#[derive(Debug, Clone)]
pub struct WriteCtx<'a> {
    /// The resource written.
    pub def: &'a ResourceDef,
    /// Main resource, status subresource, or both (no status subresource).
    pub scope: Scope,
    /// Field ownership.
    pub owner: Owner,
    /// `?dryRun=All`.
    pub dry_run: bool,
    /// `?fieldValidation=`.
    pub validation: FieldValidation,
}

/// A successful write.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as stored (or as it would be, for dry runs).
    pub object: Value,
    /// HTTP code: 201 for creates, 200 otherwise.
    pub code: u16,
    /// Warnings for the `Warning` header.
    pub warnings: Vec<String>,
}

/// Which scope a request on a resource targets.
pub fn scope_for(def: &ResourceDef, status: bool) -> Scope {
    match (def.status_subresource, status) {
        (true, true) => Scope::Status,
        (true, false) => Scope::Main,
        (false, _) => Scope::All,
    }
}

/// The object named in error bodies.
fn subject<'a>(def: &'a ResourceDef, name: &'a str) -> Subject<'a> {
    Subject {
        group: &def.group,
        plural: &def.plural,
        kind: &def.kind,
        name,
    }
}
