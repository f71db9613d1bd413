//! Creating an object (POST, or apply/patch of a missing one): name and namespace, server-set
//! metadata, uid, creation time, first resourceVersion and generation, ADDED event.

use serde_json::{Value, json};

use super::steps::{normalize, record_update, require_object, schema_pass, tracks_generation};
use super::{Owner, WriteCtx, Written, subject};
use crate::error::{ApiError, Cause, Subject};
use crate::managed::Scope;
use crate::meta::{self, meta_mut};
use crate::store::{EventType, ObjKey, State};

/// Creates an object (POST, or apply/patch of a missing object).
///
/// # Errors
/// 400 for a namespace mismatch, 404 for a missing namespace, 409 if it exists, 422 when invalid.
pub fn create(
    state: &mut State,
    ctx: &WriteCtx<'_>,
    ns: Option<&str>,
    mut obj: Value,
) -> Result<Written, ApiError> {
    require_object(&obj)?;
    normalize(ctx.def, &mut obj);
    let Some(m) = meta_mut(&mut obj) else {
        return Err(ApiError::bad_request("object has no metadata"));
    };
    let name = match (
        m.get("name").and_then(Value::as_str),
        m.get("generateName").and_then(Value::as_str),
    ) {
        (Some(n), _) if !n.is_empty() => n.to_string(),
        (_, Some(prefix)) => meta::generated_name(prefix),
        _ => {
            let cause = Cause::new(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            );
            return Err(ApiError::invalid(subject(ctx.def, ""), vec![cause]));
        }
    };
    m.insert("name".into(), json!(name));
    let namespace = if ctx.def.namespaced {
        let body_ns = m
            .get("namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        let ns = ns.unwrap_or("default").to_string();
        if body_ns.as_deref().is_some_and(|b| b != ns) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        m.insert("namespace".into(), json!(ns));
        ns
    } else {
        m.remove("namespace");
        String::new()
    };
    for k in meta::SERVER_SET {
        m.remove(*k);
    }
    if ctx.owner != Owner::Applied {
        m.remove("managedFields");
    }
    if ctx.def.namespaced && !namespace_exists(state, &namespace) {
        return Err(ApiError::not_found(Subject {
            group: "",
            plural: "namespaces",
            kind: "Namespace",
            name: &namespace,
        }));
    }
    let res = ctx.def.storage_key();
    let key: ObjKey = (namespace, name.clone());
    if state.get(&res, &key).is_some() {
        return Err(ApiError::already_exists(subject(ctx.def, &name)));
    }
    if ctx.scope == Scope::Main
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    if ctx.def.plural == "namespaces" {
        obj["status"] = json!({"phase": "Active"});
    }
    let warnings = schema_pass(ctx, &name, &mut obj, None)?;
    let now = meta::now();
    let rv = if ctx.dry_run {
        state.rv
    } else {
        state.next_rv()
    };
    if let Some(m) = meta_mut(&mut obj) {
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        if tracks_generation(ctx.def) {
            m.insert("generation".into(), json!(1));
        }
    }
    record_update(ctx, None, &mut obj, &now);
    if !ctx.dry_run {
        state.commit(&res, key, EventType::Added, obj.clone(), None, rv);
    }
    Ok(Written {
        object: obj,
        code: 201,
        warnings,
    })
}

/// Whether a namespace object exists.
pub fn namespace_exists(state: &State, ns: &str) -> bool {
    state
        .get(
            &(String::new(), "namespaces".into()),
            &(String::new(), ns.to_string()),
        )
        .is_some()
}
