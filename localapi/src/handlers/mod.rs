//! Resource endpoints: get, list, watch, create, update, patch, delete, deletecollection.
//!
//! This file routes a resource request; read.rs serves GET (get, list, watch), write.rs POST, PUT
//! and DELETE, patch.rs PATCH (merge, JSON and apply patches) on top of the write pipeline.

mod patch;
mod read;
mod write;

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::{ApiError, Subject};
use crate::request::{Query, Target};
use crate::server::Shared;
use crate::store::ObjKey;

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

/// The target named in error bodies.
fn subject(t: &Target) -> Subject<'_> {
    Subject {
        group: &t.def.group,
        plural: &t.def.plural,
        kind: &t.def.kind,
        name: t.name.as_deref().unwrap_or_default(),
    }
}

/// The store key of the named target.
fn key(t: &Target) -> ObjKey {
    let ns = if t.def.namespaced {
        t.namespace.clone().unwrap_or_default()
    } else {
        String::new()
    };
    (ns, t.name.clone().unwrap_or_default())
}

/// The `Accept` header, or "".
fn accept(headers: &HeaderMap) -> &str {
    headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The body as JSON (or YAML); an empty body is `{}`.
fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .or_else(|_| serde_saphyr::from_slice::<Value>(body))
        .map_err(|e| ApiError::bad_request(format!("the request body could not be decoded: {e}")))
}

/// The object as served: apiVersion of the requested version.
fn present(t: &Target, obj: &Value) -> Value {
    let mut o = obj.clone();
    o["apiVersion"] = json!(t.def.api_version());
    o
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
        ("GET", false) if c.query.watch() => read::watch(shared, &c),
        ("GET", false) => read::list(shared, &c),
        ("GET", true) => read::get(shared, &c),
        ("POST", false) => write::create(shared, &c),
        ("PUT", true) => write::put(shared, &c),
        ("PATCH", true) => patch::patch_object(shared, &c),
        ("DELETE", true) => write::delete(shared, &c),
        ("DELETE", false) => write::delete_collection(shared, &c),
        _ => Err(ApiError::method_not_allowed()),
    }
}
