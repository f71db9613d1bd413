//! GET endpoints: get (object or table), list (selectors, pages, continue tokens, tables) and watch.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Call, accept, key, present, subject};
use crate::error::ApiError;
use crate::meta;
use crate::server::{Shared, json_response};
use crate::store::lock;
use crate::table::{self, IncludeObject};
use crate::watch::{self, WatchParams};

pub(super) fn watch(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
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

pub(super) fn list(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
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

pub(super) fn get(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
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
