//! Structural schema handling for custom resources: pruning, defaulting and validation (incl. CEL rules).
//!
//! prune.rs removes unknown fields, defaults.rs fills in `default`s, check.rs validates types and
//! limits, rules.rs runs `x-kubernetes-validations` through the CEL subset.

mod check;
mod defaults;
mod prune;
mod rules;

pub use check::{show, validate};
pub use defaults::apply_defaults;
pub use prune::prune;

use serde_json::Value;

/// `path.key`, or `key` at the root.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Whether a schema keyword is `true`.
fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}
