//! The write pipeline shared by create, update, patch and apply: status isolation, schema, generation,
//! managedFields, finalizers, resourceVersion and events.

use serde_json::{Value, json};

use crate::error::{ApiError, Cause, Subject};
use crate::managed::{self, Scope};
use crate::meta::{self, meta_mut, meta_str};
use crate::registry::ResourceDef;
use crate::store::{EventType, ObjKey, State};
use crate::validate;

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

fn subject<'a>(def: &'a ResourceDef, name: &'a str) -> Subject<'a> {
    Subject {
        group: &def.group,
        plural: &def.plural,
        kind: &def.kind,
        name,
    }
}

fn spec_part(def: &ResourceDef, obj: &Value) -> Value {
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

fn tracks_generation(def: &ResourceDef) -> bool {
    def.custom || def.plural == "customresourcedefinitions"
}

/// Prunes, defaults and validates a custom resource; returns warnings.
fn schema_pass(
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

/// Sets apiVersion/kind from the URL and applies built-in conversions (Secret stringData).
fn normalize(def: &ResourceDef, obj: &mut Value) {
    if def.group.is_empty() && def.plural == "secrets" {
        meta::normalize_secret(obj);
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(def.api_version()));
        m.insert("kind".into(), json!(def.kind));
    }
}

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
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
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
    for k in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        m.remove(k);
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
    if let Owner::Update(manager) = &ctx.owner {
        let mut entries = Vec::new();
        let changed = managed::changed(None, &obj, ctx.scope);
        managed::record_update(
            &mut entries,
            manager,
            ctx.scope,
            &ctx.def.api_version(),
            &now,
            changed,
        );
        managed::store(&mut obj, &entries);
    }
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

/// Replaces `old` by `new` (PUT, patch, apply). `require_rv` enforces kube's rule that custom resources
/// need `metadata.resourceVersion` on PUT.
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
    if !new.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    normalize(ctx.def, &mut new);
    if meta_str(&new, "name").is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta_str(&new, "name").unwrap_or_default()
        )));
    }
    match meta_str(&new, "resourceVersion").filter(|r| !r.is_empty()) {
        Some(rv) if rv != meta_str(old, "resourceVersion").unwrap_or_default() => {
            return Err(ApiError::stale(subject(ctx.def, &name)));
        }
        None if require_rv => {
            let cause = Cause::new(
                "FieldValueInvalid",
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
            );
            return Err(ApiError::invalid(subject(ctx.def, &name), vec![cause]));
        }
        _ => {}
    }
    let mut obj = match ctx.scope {
        Scope::Status => {
            let mut o = old.clone();
            match new.get("status") {
                Some(s) => o["status"] = s.clone(),
                None => {
                    if let Some(m) = o.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
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
            match old.get("status") {
                Some(s) => o["status"] = s.clone(),
                None => {
                    if let Some(m) = o.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            o
        }
        Scope::All => new,
    };
    let old_meta = old.get("metadata").cloned().unwrap_or_default();
    let deleting = old_meta.get("deletionTimestamp").is_some();
    if let Some(m) = meta_mut(&mut obj) {
        for k in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            match old_meta.get(k) {
                Some(v) => m.insert(k.into(), v.clone()),
                None => m.remove(k),
            };
        }
        if ctx.owner != Owner::Applied {
            match old_meta.get("managedFields") {
                Some(v) => m.insert("managedFields".into(), v.clone()),
                None => m.remove("managedFields"),
            };
        }
    }
    if deleting {
        let before = meta::finalizers(old);
        let added: Vec<String> = meta::finalizers(&obj)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            let cause = Cause::new(
                "FieldValueForbidden",
                "metadata.finalizers",
                format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                ),
            );
            return Err(ApiError::invalid(subject(ctx.def, &name), vec![cause]));
        }
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
    let now = meta::now();
    if let Owner::Update(manager) = &ctx.owner {
        let mut entries = managed::parse(old);
        let changed = managed::changed(Some(old), &obj, ctx.scope);
        managed::record_update(
            &mut entries,
            manager,
            ctx.scope,
            &ctx.def.api_version(),
            &now,
            changed,
        );
        managed::store(&mut obj, &entries);
    }
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

fn without_times(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(Value::Array(list)) = v.pointer_mut("/metadata/managedFields") {
        for e in list.iter_mut().filter_map(Value::as_object_mut) {
            e.remove("time");
        }
    }
    v
}

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
