//! `metadata.managedFields` bookkeeping and the server-side apply merge (an approximation, see README).
//!
//! Ownership is tracked per (manager, operation, subresource) as a set of leaf paths; lists are atomic.
//! This file holds the ownership model and Update-operation recording; fields.rs reads and writes
//! the `managedFields` wire format; apply.rs is the server-side apply merge.

mod apply;
mod fields;

pub use apply::{ApplyConflict, ApplyRequest, apply};
pub use fields::{parse, store};

use std::collections::BTreeSet;

use serde_json::Value;

use crate::meta;

/// A path of object keys from the root, e.g. `["spec", "table"]`.
pub type FieldPath = Vec<String>;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// "" or `status`.
    pub subresource: String,
    /// apiVersion the manager used.
    pub api_version: String,
    /// Last change time.
    pub time: String,
    /// Owned leaf paths.
    pub fields: BTreeSet<FieldPath>,
}

/// Metadata no manager owns: what the server sets, plus the object's identity and bookkeeping.
fn server_owned(key: &str) -> bool {
    meta::SERVER_SET.contains(&key)
        || matches!(
            key,
            "name" | "namespace" | "managedFields" | "selfLink" | "generateName"
        )
}

/// Which part of the object a request may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything (resource without a status subresource).
    All,
    /// Everything except `.status`.
    Main,
    /// Only `.status`.
    Status,
}

impl Scope {
    /// The `subresource` value of managedFields entries written in this scope.
    pub fn subresource(self) -> &'static str {
        if self == Scope::Status { "status" } else { "" }
    }

    fn admits(self, top: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Main => top != "status",
            Scope::Status => top == "status",
        }
    }
}

/// Leaf paths of an object within a scope (scalars, lists and empty objects are leaves).
pub fn leaves(obj: &Value, scope: Scope) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    if let Value::Object(m) = obj {
        for (k, v) in m {
            if k == "apiVersion" || k == "kind" || !scope.admits(k) {
                continue;
            }
            if k == "metadata" {
                if let Value::Object(meta) = v {
                    for (mk, mv) in meta.iter().filter(|(mk, _)| !server_owned(mk)) {
                        walk(mv, vec![k.clone(), mk.clone()], &mut out);
                    }
                }
                continue;
            }
            walk(v, vec![k.clone()], &mut out);
        }
    }
    out
}

fn walk(v: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                let mut p = path.clone();
                p.push(k.clone());
                walk(c, p, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

/// The value at a path, if present.
pub fn at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.get(k))
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Leaf paths present in `new` whose value differs from `old` (what an Update manager takes ownership of).
pub fn changed(old: Option<&Value>, new: &Value, scope: Scope) -> BTreeSet<FieldPath> {
    leaves(new, scope)
        .into_iter()
        .filter(|p| old.and_then(|o| at(o, p)) != at(new, p))
        .collect()
}

/// The entry of (manager, operation, subresource), created if absent, stamped with `api_version` and `now`.
fn entry_mut<'a>(
    entries: &'a mut Vec<Entry>,
    manager: &str,
    op: &str,
    sub: &str,
    api_version: &str,
    now: &str,
) -> &'a mut Entry {
    let pos = entries
        .iter()
        .position(|e| e.manager == manager && e.operation == op && e.subresource == sub);
    let idx = match pos {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: manager.into(),
                operation: op.into(),
                subresource: sub.into(),
                api_version: String::new(),
                time: String::new(),
                fields: BTreeSet::new(),
            });
            entries.len() - 1
        }
    };
    let e = &mut entries[idx];
    e.api_version = api_version.to_string();
    e.time = now.to_string();
    e
}

/// Records an Update-operation change: the manager takes the changed paths from everyone else.
pub fn record_update(
    entries: &mut Vec<Entry>,
    manager: &str,
    scope: Scope,
    api_version: &str,
    now: &str,
    changed: BTreeSet<FieldPath>,
) {
    if changed.is_empty() {
        return;
    }
    let sub = scope.subresource();
    for e in entries.iter_mut().filter(|e| e.subresource == sub) {
        e.fields.retain(|p| !changed.iter().any(|c| overlaps(p, c)));
    }
    entry_mut(entries, manager, "Update", sub, api_version, now)
        .fields
        .extend(changed);
}
