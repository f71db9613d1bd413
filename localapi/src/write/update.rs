//! Replacing an object (PUT, patch, apply): name and resourceVersion checks, status isolation,
//! server-set metadata carried over, generation, no-op detection, MODIFIED (or DELETED once the
//! last finalizer of a deleting object is gone).

use serde_json::{Value, json};

use super::delete::refuse_new_finalizers;
use super::steps::{
    normalize, record_update, require_object, schema_pass, spec_part, tracks_generation,
};
use super::{Owner, WriteCtx, Written, subject};
use crate::error::{ApiError, Cause};
use crate::managed::Scope;
use crate::meta::{self, meta_mut, meta_str};
use crate::store::{EventType, State};

/// Replaces `old` by `new` (PUT, patch, apply). `require_rv` enforces kube's rule that custom
/// resources, CRDs and Leases need `metadata.resourceVersion` on PUT.
///
/// # Errors
/// 400 for a name mismatch, 409 for a stale resourceVersion, 422 when invalid.
pub fn update(
    state: &mut State,
    ctx: &WriteCtx<'_>,
    old: &Value,
    mut new: Value,
    require_rv: bool,
) -> Result<Written, ApiError> {
    let name = meta_str(old, "name").unwrap_or_default().to_string();
    let ns = meta_str(old, "namespace").unwrap_or_default().to_string();
    require_object(&new)?;
    normalize(ctx.def, &mut new);
    check_name_and_version(ctx, &name, old, &new, require_rv)?;
    let mut obj = isolate_scope(ctx, old, new);
    let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
    keep_server_meta(ctx, old, &mut obj);
    if deleting {
        refuse_new_finalizers(ctx.def, &name, old, &obj)?;
    }
    let warnings = schema_pass(ctx, &name, &mut obj, Some(old))?;
    if tracks_generation(ctx.def) && spec_part(ctx.def, &obj) != spec_part(ctx.def, old) {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            + 1;
        obj["metadata"]["generation"] = json!(g);
    }
    record_update(ctx, Some(old), &mut obj, &meta::now());
    let finished = deleting && meta::finalizers(&obj).is_empty();
    if !finished && without_times(&obj) == without_times(old) {
        return Ok(Written {
            object: old.clone(),
            code: 200,
            warnings,
        });
    }
    if ctx.dry_run {
        return Ok(Written {
            object: obj,
            code: 200,
            warnings,
        });
    }
    let rv = state.next_rv();
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
    let kind = if finished {
        EventType::Deleted
    } else {
        EventType::Modified
    };
    state.commit(
        &ctx.def.storage_key(),
        (ns, name),
        kind,
        obj.clone(),
        Some(old.clone()),
        rv,
    );
    Ok(Written {
        object: obj,
        code: 200,
        warnings,
    })
}

/// The body may not rename the object; a resourceVersion it gives must be the current one (and
/// `require_rv` demands one).
fn check_name_and_version(
    ctx: &WriteCtx<'_>,
    name: &str,
    old: &Value,
    new: &Value,
    require_rv: bool,
) -> Result<(), ApiError> {
    if meta_str(new, "name").is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta_str(new, "name").unwrap_or_default()
        )));
    }
    match meta_str(new, "resourceVersion").filter(|r| !r.is_empty()) {
        Some(rv) if rv != meta_str(old, "resourceVersion").unwrap_or_default() => {
            Err(ApiError::stale(subject(ctx.def, name)))
        }
        None if require_rv => {
            let cause = Cause::new(
                "FieldValueInvalid",
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
            );
            Err(ApiError::invalid(subject(ctx.def, name), vec![cause]))
        }
        _ => Ok(()),
    }
}

/// The object this write produces within its scope: `/status` changes only `.status` (and an
/// apply's managedFields), the main resource keeps the old `.status`, `All` takes `new` whole.
fn isolate_scope(ctx: &WriteCtx<'_>, old: &Value, new: Value) -> Value {
    match ctx.scope {
        Scope::Status => {
            let mut o = old.clone();
            copy_status(&new, &mut o);
            if ctx.owner == Owner::Applied
                && let (Some(m), Some(mf)) =
                    (meta_mut(&mut o), new.pointer("/metadata/managedFields"))
            {
                m.insert("managedFields".into(), mf.clone());
            }
            o
        }
        Scope::Main => {
            let mut o = new;
            copy_status(old, &mut o);
            o
        }
        Scope::All => new,
    }
}

/// Sets `to.status` to `from.status`, removing it when `from` has none.
fn copy_status(from: &Value, to: &mut Value) {
    match from.get("status") {
        Some(s) => to["status"] = s.clone(),
        None => {
            if let Some(m) = to.as_object_mut() {
                m.remove("status");
            }
        }
    }
}

/// Carries name, namespace and the server-set metadata (and, unless applied, managedFields) over
/// from `old`, whatever the body said.
fn keep_server_meta(ctx: &WriteCtx<'_>, old: &Value, obj: &mut Value) {
    let old_meta = old.get("metadata").cloned().unwrap_or_default();
    if let Some(m) = meta_mut(obj) {
        for k in ["name", "namespace"].iter().chain(meta::SERVER_SET) {
            match old_meta.get(*k) {
                Some(v) => m.insert((*k).into(), v.clone()),
                None => m.remove(*k),
            };
        }
        if ctx.owner != Owner::Applied {
            match old_meta.get("managedFields") {
                Some(v) => m.insert("managedFields".into(), v.clone()),
                None => m.remove("managedFields"),
            };
        }
    }
}

/// The object without managedFields times, for no-op detection.
fn without_times(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(Value::Array(list)) = v.pointer_mut("/metadata/managedFields") {
        for e in list.iter_mut().filter_map(Value::as_object_mut) {
            e.remove("time");
        }
    }
    v
}
