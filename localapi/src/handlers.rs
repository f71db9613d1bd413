//! Resource endpoints: get, list, watch, create, update, patch, delete, deletecollection.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::crds;
use crate::error::{ApiError, Cause, Subject};
use crate::managed::{self, ApplyRequest};
use crate::meta;
use crate::patch::{self, JsonPatchError};
use crate::request::{Query, Target};
use crate::server::{Shared, json_response};
use crate::store::{ObjKey, State, lock};
use crate::table::{self, IncludeObject};
use crate::watch::{self, WatchParams};
use crate::write::{self, Owner, WriteCtx, Written};

/// One resource request after routing.
#[derive(Debug)]
pub struct Call<'a> {
    /// HTTP method.
    pub method: &'a Method,
    /// Resolved target.
    pub target: Target,
    /// Query options.
    pub query: Query,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// Request body.
    pub body: Bytes,
}

fn subject(t: &Target) -> Subject<'_> {
    Subject {
        group: &t.def.group,
        plural: &t.def.plural,
        kind: &t.def.kind,
        name: t.name.as_deref().unwrap_or_default(),
    }
}

fn key(t: &Target) -> ObjKey {
    let ns = if t.def.namespaced {
        t.namespace.clone().unwrap_or_default()
    } else {
        String::new()
    };
    (ns, t.name.clone().unwrap_or_default())
}

fn accept(headers: &HeaderMap) -> &str {
    headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice::<Value>(body))
        .map_err(|e| ApiError::bad_request(format!("the request body could not be decoded: {e}")))
}

/// Serves one resource request.
pub async fn serve(shared: &Arc<Shared>, call: Call<'_>) -> Response {
    match route(shared, call) {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn route(shared: &Arc<Shared>, c: Call<'_>) -> Result<Response, ApiError> {
    let t = &c.target;
    if t.sub
        .as_deref()
        .is_some_and(|s| s != "status" || !t.def.status_subresource)
    {
        return Err(ApiError::not_found(subject(t)));
    }
    if t.def.namespaced && t.namespace.is_none() && t.name.is_some() {
        return Err(ApiError::not_found(subject(t)));
    }
    match (c.method.as_str(), t.name.is_some()) {
        ("GET", false) if c.query.watch() => watch(shared, &c),
        ("GET", false) => list(shared, &c),
        ("GET", true) => get(shared, &c),
        ("POST", false) => create(shared, &c),
        ("PUT", true) => put(shared, &c),
        ("PATCH", true) => patch_object(shared, &c),
        ("DELETE", true) => delete(shared, &c),
        ("DELETE", false) => delete_collection(shared, &c),
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn watch(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let p = WatchParams {
        def: c.target.def.clone(),
        namespace: c.target.namespace.clone(),
        selector: c.query.selector()?,
        resource_version: c.query.start_rv()?,
        bookmarks: c.query.bookmarks(),
        send_initial_events: c.query.send_initial_events(),
        timeout: c.query.timeout(),
    };
    let body = watch::start(shared, p);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(body)
        .unwrap_or_else(|_| ApiError::internal("response build failed").into_response()))
}

fn present(t: &Target, obj: &Value) -> Value {
    let mut o = obj.clone();
    o["apiVersion"] = json!(t.def.api_version());
    o
}

fn list(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let t = &c.target;
    let sel = c.query.selector()?;
    let state = lock(&shared.state);
    let mut after: Option<(String, String)> = None;
    let mut list_rv = state.rv;
    if let Some(tok) = c.query.get("continue").filter(|s| !s.is_empty()) {
        let mut parts = tok.splitn(3, '|');
        let rv: u64 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
        if rv < state.floor {
            return Err(ApiError::gone(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ));
        }
        list_rv = rv;
        after = Some((
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        ));
    }
    let matching: Vec<&Value> = state
        .list(&t.def.storage_key(), t.namespace.as_deref())
        .into_iter()
        .filter(|o| sel.matches(o))
        .filter(|o| {
            after.as_ref().is_none_or(|(ans, aname)| {
                let k = (
                    meta::meta_str(o, "namespace").unwrap_or_default(),
                    meta::meta_str(o, "name").unwrap_or_default(),
                );
                k > (ans.as_str(), aname.as_str())
            })
        })
        .collect();
    let limit = c.query.limit();
    let (page, more) = if limit > 0 && matching.len() > limit {
        (&matching[..limit], true)
    } else {
        (&matching[..], false)
    };
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if more {
        let last = page.last().copied().unwrap_or(&Value::Null);
        metadata["continue"] = json!(format!(
            "{list_rv}|{}|{}",
            meta::meta_str(last, "namespace").unwrap_or_default(),
            meta::meta_str(last, "name").unwrap_or_default()
        ));
        metadata["remainingItemCount"] = json!(matching.len() - page.len());
    }
    if table::wants_table(accept(c.headers)) {
        let tbl = table::table(
            &t.def,
            page,
            &list_rv.to_string(),
            IncludeObject::parse(c.query.get("includeObject")),
        );
        return Ok(json_response(StatusCode::OK, &tbl));
    }
    let items: Vec<Value> = page.iter().map(|o| present(t, o)).collect();
    let body = json!({"kind": format!("{}List", t.def.kind), "apiVersion": t.def.api_version(), "metadata": metadata, "items": items});
    Ok(json_response(StatusCode::OK, &body))
}

fn get(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let t = &c.target;
    let state = lock(&shared.state);
    let obj = state
        .get(&t.def.storage_key(), &key(t))
        .ok_or_else(|| ApiError::not_found(subject(t)))?;
    if table::wants_table(accept(c.headers)) {
        let tbl = table::table(
            &t.def,
            &[obj],
            &meta::rv_of(obj).to_string(),
            IncludeObject::parse(c.query.get("includeObject")),
        );
        return Ok(json_response(StatusCode::OK, &tbl));
    }
    Ok(json_response(StatusCode::OK, &present(t, obj)))
}

fn ctx<'a>(c: &'a Call<'_>, owner: Owner) -> Result<WriteCtx<'a>, ApiError> {
    Ok(WriteCtx {
        def: &c.target.def,
        scope: write::scope_for(&c.target.def, c.target.sub.is_some()),
        owner,
        dry_run: c.query.dry_run(),
        validation: c.query.field_validation()?,
    })
}

fn written(t: &Target, w: Written) -> Response {
    let mut resp = json_response(
        StatusCode::from_u16(w.code).unwrap_or(StatusCode::OK),
        &present(t, &w.object),
    );
    for warning in w.warnings {
        if let Ok(v) = format!("299 - \"{}\"", warning.replace('"', "\\\"")).parse() {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

fn after_write(state: &mut State, c: &Call<'_>, w: &Written) {
    if c.target.def.plural == "customresourcedefinitions" && !c.query.dry_run() && w.code < 300 {
        crds::on_write(state, &w.object);
    }
}

fn create(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let body = parse_body(&c.body)?;
    let ctx = ctx(c, Owner::Update(c.query.manager(c.headers)))?;
    let mut state = lock(&shared.state);
    let w = write::create(&mut state, &ctx, c.target.namespace.as_deref(), body)?;
    after_write(&mut state, c, &w);
    Ok(written(&c.target, w))
}

fn put(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let body = parse_body(&c.body)?;
    let ctx = ctx(c, Owner::Update(c.query.manager(c.headers)))?;
    let mut state = lock(&shared.state);
    let old = state
        .get(&c.target.def.storage_key(), &key(&c.target))
        .cloned()
        .ok_or_else(|| ApiError::not_found(subject(&c.target)))?;
    let w = write::update(&mut state, &ctx, &old, body, c.target.def.custom)?;
    after_write(&mut state, c, &w);
    Ok(written(&c.target, w))
}

fn patch_object(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let t = &c.target;
    let ct = c
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let ct = ct.split(';').next().unwrap_or_default().trim().to_string();
    let body = parse_body(&c.body)?;
    let mut state = lock(&shared.state);
    let live = state.get(&t.def.storage_key(), &key(t)).cloned();
    let w = match ct.as_str() {
        "application/apply-patch+yaml" => {
            let manager = c
                .query
                .get("fieldManager")
                .filter(|m| !m.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid(
                        subject(t),
                        vec![Cause::new(
                            "FieldValueRequired",
                            "fieldManager",
                            "Required value: is required for apply patch",
                        )],
                    )
                })?;
            let ctx = ctx(c, Owner::Applied)?;
            let base = live
                .clone()
                .unwrap_or_else(|| json!({"metadata": {"name": t.name, "namespace": t.namespace}}));
            if live.is_none() && t.sub.is_some() {
                return Err(ApiError::not_found(subject(t)));
            }
            let now = meta::now();
            let api_version = t.def.api_version();
            let req = ApplyRequest {
                applied: &body,
                manager,
                scope: ctx.scope,
                force: c.query.force(),
                api_version: &api_version,
                now: &now,
            };
            let merged = managed::apply(&base, req).map_err(|conflicts| {
                let causes: Vec<Value> = conflicts.iter().map(|x| json!({"reason": "FieldManagerConflict",
                    "message": format!("conflict with \"{}\"", x.manager), "field": x.field})).collect();
                let list: Vec<String> = conflicts.iter().map(|x| format!("conflict with \"{}\": {}", x.manager, x.field)).collect();
                let mut e = ApiError::new(409, "Conflict", format!("Apply failed with {} conflict{}: {}",
                    conflicts.len(), if conflicts.len() == 1 { "" } else { "s" }, list.join(", ")));
                e.details = Some(json!({"name": t.name, "group": t.def.group, "kind": t.def.plural, "causes": causes}));
                e
            })?;
            match live {
                Some(old) => write::update(&mut state, &ctx, &old, merged, false)?,
                None => write::create(&mut state, &ctx, t.namespace.as_deref(), merged)?,
            }
        }
        "application/json-patch+json"
        | "application/merge-patch+json"
        | "application/strategic-merge-patch+json" => {
            if ct == "application/strategic-merge-patch+json" && t.def.custom {
                return Err(ApiError::unsupported_media(&ct));
            }
            let old = live.ok_or_else(|| ApiError::not_found(subject(t)))?;
            let new = if ct == "application/json-patch+json" {
                patch::json_patch(&old, &body).map_err(|e| match e {
                    JsonPatchError::Malformed(m) => ApiError::bad_request(m),
                    JsonPatchError::Failed(m) => ApiError::new(422, "Invalid", m),
                })?
            } else {
                let mut n = old.clone();
                patch::merge_patch(&mut n, &body);
                n
            };
            let ctx = ctx(c, Owner::Update(c.query.manager(c.headers)))?;
            write::update(&mut state, &ctx, &old, new, false)?
        }
        other => return Err(ApiError::unsupported_media(other)),
    };
    after_write(&mut state, c, &w);
    Ok(written(t, w))
}

fn delete(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let options = parse_body(&c.body)?;
    let mut state = lock(&shared.state);
    let obj = write::delete(
        &mut state,
        &c.target.def,
        key(&c.target),
        &options,
        c.query.dry_run(),
    )?;
    if !c.query.dry_run() {
        crds::on_delete(&mut state, &c.target.def, &obj);
    }
    Ok(json_response(StatusCode::OK, &present(&c.target, &obj)))
}

fn delete_collection(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let sel = c.query.selector()?;
    let options = parse_body(&c.body)?;
    let mut state = lock(&shared.state);
    let keys: Vec<ObjKey> = state
        .list(&c.target.def.storage_key(), c.target.namespace.as_deref())
        .into_iter()
        .filter(|o| sel.matches(o))
        .map(|o| {
            (
                meta::meta_str(o, "namespace")
                    .unwrap_or_default()
                    .to_string(),
                meta::meta_str(o, "name").unwrap_or_default().to_string(),
            )
        })
        .collect();
    let mut items = Vec::new();
    for k in keys {
        let obj = write::delete(&mut state, &c.target.def, k, &options, c.query.dry_run())?;
        items.push(present(&c.target, &obj));
    }
    let body = json!({"kind": format!("{}List", c.target.def.kind), "apiVersion": c.target.def.api_version(),
        "metadata": {"resourceVersion": state.rv.to_string()}, "items": items});
    Ok(json_response(StatusCode::OK, &body))
}
