//! Deletion and finalizers: delete preconditions, `deletionTimestamp` while finalizers remain,
//! removal (DELETED) without them, and no new finalizers on an object being deleted.

use serde_json::{Value, json};

use super::subject;
use crate::error::{ApiError, Cause};
use crate::meta::{self, meta_mut, meta_str};
use crate::registry::ResourceDef;
use crate::store::{EventType, ObjKey, State};

/// Deletes an object: with finalizers it only gains `deletionTimestamp` (and a generation bump);
/// without, it is removed and watchers see DELETED.
///
/// # Errors
/// 404 if missing, 409 when a precondition fails.
pub fn delete(
    state: &mut State,
    def: &ResourceDef,
    key: ObjKey,
    options: &Value,
    dry_run: bool,
) -> Result<Value, ApiError> {
    let res = def.storage_key();
    let old = state
        .get(&res, &key)
        .cloned()
        .ok_or_else(|| ApiError::not_found(subject(def, &key.1)))?;
    for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        if let Some(want) = options
            .pointer(&format!("/preconditions/{field}"))
            .and_then(Value::as_str)
        {
            let have = meta_str(&old, field).unwrap_or_default();
            if want != have {
                return Err(ApiError::conflict(
                    subject(def, &key.1),
                    &format!(
                        "Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}"
                    ),
                ));
            }
        }
    }
    if dry_run {
        return Ok(old);
    }
    if !meta::finalizers(&old).is_empty() {
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(old);
        }
        let mut obj = old.clone();
        let rv = state.next_rv();
        if let Some(m) = meta_mut(&mut obj) {
            m.insert("deletionTimestamp".into(), json!(meta::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("resourceVersion".into(), json!(rv.to_string()));
            if let Some(g) = m.get("generation").and_then(Value::as_i64) {
                m.insert("generation".into(), json!(g + 1));
            }
        }
        state.commit(&res, key, EventType::Modified, obj.clone(), Some(old), rv);
        return Ok(obj);
    }
    let rv = state.next_rv();
    let mut obj = old.clone();
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
    state.commit(&res, key, EventType::Deleted, obj.clone(), Some(old), rv);
    Ok(obj)
}

/// Refuses an update of an object being deleted that adds finalizers (kube's 422).
pub(super) fn refuse_new_finalizers(
    def: &ResourceDef,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let before = meta::finalizers(old);
    let added: Vec<String> = meta::finalizers(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    let cause = Cause::new(
        "FieldValueForbidden",
        "metadata.finalizers",
        format!(
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
        ),
    );
    Err(ApiError::invalid(subject(def, name), vec![cause]))
}
