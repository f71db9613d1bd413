//! Routing of one request: control endpoints, request counters and injected faults, then resource
//! requests (to the handlers), discovery, OpenAPI and kube-shaped 404s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::to_bytes;
use axum::extract::{Request, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{Shared, json_response};
use crate::error::{ApiError, Subject};
use crate::handlers::{self, Call};
use crate::request::{self, Query};
use crate::store::lock;
use crate::{discovery, openapi};

/// A 200 JSON response.
fn ok(body: Value) -> Response {
    json_response(StatusCode::OK, &body)
}

/// kube's 404 for a path it does not serve.
fn not_found(path: &str) -> Response {
    ApiError::new(
        404,
        "NotFound",
        format!("the server could not find the requested resource ({path})"),
    )
    .into_response()
}

/// Serves one request: control endpoints, stats and faults, then resources, discovery and OpenAPI.
pub(super) async fn dispatch(AxState(shared): AxState<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let query: HashMap<String, String> = axum::extract::Query::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let Ok(body) = to_bytes(body, 64 * 1024 * 1024).await else {
        return ApiError::bad_request("request body too large or unreadable").into_response();
    };
    if let Some(ctl) = path.strip_prefix("/__localapi/") {
        return crate::control::serve(&shared, &parts.method, ctl, &body);
    }
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => ("", "", &[]),
    };
    let target = if rest.is_empty() {
        None
    } else {
        request::resolve(&lock(&shared.state).registry, group, version, rest)
    };
    let verb = target.as_ref().map(|t| {
        let v = match (parts.method.as_str(), t.name.is_some()) {
            ("GET", false)
                if matches!(query.get("watch").map(String::as_str), Some("1" | "true")) =>
            {
                "watch"
            }
            ("GET", false) => "list",
            ("GET", true) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", false) => "deletecollection",
            ("DELETE", true) => "delete",
            (m, _) => m,
        };
        let sub = t.sub.as_ref().map(|s| format!("/{s}")).unwrap_or_default();
        format!("{v} {}{sub}", t.def.plural)
    });
    lock(&shared.stats).record(parts.method.as_str(), &path, verb);
    let decision = lock(&shared.faults).decide(parts.method.as_str(), &path);
    if decision.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(decision.latency_ms)).await;
    }
    if let Some((code, msg)) = decision.fail {
        return ApiError::for_code(code, msg).into_response();
    }
    if let Some(target) = target {
        let call = Call {
            method: &parts.method,
            target,
            query: Query(query),
            headers: &parts.headers,
            body,
        };
        return handlers::serve(&shared, call).await;
    }
    let state = lock(&shared.state);
    let reg = &state.registry;
    match segs.as_slice() {
        ["version"] => ok(discovery::version()),
        ["healthz" | "readyz" | "livez"] => (StatusCode::OK, "ok").into_response(),
        ["api"] => ok(discovery::core_versions(&shared.addr.to_string())),
        ["apis"] => ok(discovery::group_list(reg)),
        ["api", v] => discovery::resource_list(reg, "", v)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["apis", g] => discovery::group(reg, g)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["apis", g, v] => discovery::resource_list(reg, g, v)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["openapi", "v3"] => ok(openapi::index(reg)),
        ["openapi", "v3", "api", v] => openapi::gv_document(reg, "", v)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["openapi", "v3", "apis", g, v] => openapi::gv_document(reg, g, v)
            .map(ok)
            .unwrap_or_else(|| not_found(&path)),
        ["api", _, ..] | ["apis", _, _, ..] => {
            let plural = rest
                .get(if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
                    2
                } else {
                    0
                })
                .copied()
                .unwrap_or_default();
            ApiError::not_found(Subject {
                group,
                plural,
                kind: plural,
                name: rest.last().copied().unwrap_or_default(),
            })
            .into_response()
        }
        _ => not_found(&path),
    }
}
