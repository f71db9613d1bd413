//! POST, PUT and DELETE endpoints on top of the write pipeline, and what every write response
//! shares (the write settings from the request, `Warning` headers, CRD side effects).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::{Call, key, parse_body, present, subject};
use crate::crds;
use crate::error::ApiError;
use crate::meta;
use crate::request::Target;
use crate::server::{Shared, json_response};
use crate::store::{ObjKey, State, lock};
use crate::write::{self, Owner, WriteCtx, Written};

/// The write settings a request asks for.
pub(super) fn ctx<'a>(c: &'a Call<'_>, owner: Owner) -> Result<WriteCtx<'a>, ApiError> {
    Ok(WriteCtx {
        def: &c.target.def,
        scope: write::scope_for(&c.target.def, c.target.sub.is_some()),
        owner,
        dry_run: c.query.dry_run(),
        validation: c.query.field_validation()?,
    })
}

/// The response for a write: its code, the object, and a `Warning` header per warning.
pub(super) fn written(t: &Target, w: Written) -> Response {
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

/// Side effects of a stored write: a written CRD is served at once.
pub(super) fn after_write(state: &mut State, c: &Call<'_>, w: &Written) {
    if c.target.def.plural == "customresourcedefinitions" && !c.query.dry_run() && w.code < 300 {
        crds::on_write(state, &w.object);
    }
}

pub(super) fn create(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let body = parse_body(&c.body)?;
    let ctx = ctx(c, Owner::Update(c.query.manager(c.headers)))?;
    let mut state = lock(&shared.state);
    let w = write::create(&mut state, &ctx, c.target.namespace.as_deref(), body)?;
    after_write(&mut state, c, &w);
    Ok(written(&c.target, w))
}

pub(super) fn put(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
    let body = parse_body(&c.body)?;
    let ctx = ctx(c, Owner::Update(c.query.manager(c.headers)))?;
    let mut state = lock(&shared.state);
    let old = state
        .get(&c.target.def.storage_key(), &key(&c.target))
        .cloned()
        .ok_or_else(|| ApiError::not_found(subject(&c.target)))?;
    let w = write::update(
        &mut state,
        &ctx,
        &old,
        body,
        c.target.def.requires_resource_version_on_update(),
    )?;
    after_write(&mut state, c, &w);
    Ok(written(&c.target, w))
}

pub(super) fn delete(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
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

pub(super) fn delete_collection(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
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
