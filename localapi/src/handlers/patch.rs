//! PATCH: server-side apply (with field-manager conflicts), JSON patch, merge patch and, on
//! built-ins only, strategic merge patch treated as a merge patch.

use std::sync::Arc;

use axum::response::Response;
use serde_json::{Value, json};

use super::write::{after_write, ctx, written};
use super::{Call, key, parse_body, subject};
use crate::error::{ApiError, Cause};
use crate::managed::{self, ApplyRequest};
use crate::meta;
use crate::patch::{self, JsonPatchError};
use crate::server::Shared;
use crate::store::lock;
use crate::write::{self, Owner};

pub(super) fn patch_object(shared: &Arc<Shared>, c: &Call<'_>) -> Result<Response, ApiError> {
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
