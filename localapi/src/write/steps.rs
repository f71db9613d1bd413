//! The steps create and update share: setting apiVersion/kind, the schema pass (prune, default,
//! validate), generation tracking and recording an Update manager's fields.

use serde_json::{Value, json};

use super::{FieldValidation, Owner, WriteCtx, subject};
use crate::error::{ApiError, Cause};
use crate::managed;
use crate::meta;
use crate::registry::ResourceDef;
use crate::validate;

/// Refuses a body that is not a JSON object.
pub(super) fn require_object(obj: &Value) -> Result<(), ApiError> {
    if obj.is_object() {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ))
    }
}

/// Sets apiVersion/kind from the URL and applies built-in conversions (Secret stringData).
pub(super) fn normalize(def: &ResourceDef, obj: &mut Value) {
    if def.group.is_empty() && def.plural == "secrets" {
        meta::normalize_secret(obj);
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(def.api_version()));
        m.insert("kind".into(), json!(def.kind));
    }
}

/// Prunes, defaults and validates a custom resource; returns warnings.
pub(super) fn schema_pass(
    ctx: &WriteCtx<'_>,
    name: &str,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    let mut causes: Vec<Cause> = meta::validate_name(name).into_iter().collect();
    let mut warnings = Vec::new();
    if let Some(schema) = &ctx.def.schema {
        let unknown = validate::prune(schema, obj);
        match ctx.validation {
            FieldValidation::Strict if !unknown.is_empty() => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|u| format!("unknown field \"{u}\""))
                    .collect();
                let kind = &ctx.def.kind;
                return Err(ApiError::bad_request(format!(
                    "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
                    ctx.def.version,
                    list.join(", ")
                )));
            }
            FieldValidation::Warn => {
                warnings.extend(unknown.iter().map(|u| format!("unknown field \"{u}\"")))
            }
            _ => {}
        }
        validate::apply_defaults(schema, obj);
        causes.extend(validate::validate(schema, obj, old));
    }
    if causes.is_empty() {
        Ok(warnings)
    } else {
        Err(ApiError::invalid(subject(ctx.def, name), causes))
    }
}

/// Whether the resource has `metadata.generation` (custom resources and CRDs).
pub(super) fn tracks_generation(def: &ResourceDef) -> bool {
    def.custom || def.plural == "customresourcedefinitions"
}

/// What the generation tracks: the object without metadata, apiVersion, kind and (when it is a
/// subresource) status.
pub(super) fn spec_part(def: &ResourceDef, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if def.status_subresource {
            m.remove("status");
        }
    }
    v
}

/// For an Update owner, gives the manager the leaf paths this write changes (from `old`, or from
/// nothing on create) and stores `metadata.managedFields`. Applied owners already have theirs.
pub(super) fn record_update(ctx: &WriteCtx<'_>, old: Option<&Value>, obj: &mut Value, now: &str) {
    if let Owner::Update(manager) = &ctx.owner {
        let mut entries = old.map(managed::parse).unwrap_or_default();
        let changed = managed::changed(old, obj, ctx.scope);
        managed::record_update(
            &mut entries,
            manager,
            ctx.scope,
            &ctx.def.api_version(),
            now,
            changed,
        );
        managed::store(obj, &entries);
    }
}
