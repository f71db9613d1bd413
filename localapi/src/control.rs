//! Control endpoints under `/__localapi/`: faults, watch dropping, compaction, statistics.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::ApiError;
use crate::faults::{Fault, Stats};
use crate::server::{Shared, json_response};
use crate::store::lock;

/// Serves `/__localapi/<path>`.
///
/// - `GET|POST|DELETE faults`: list, add (a [`Fault`] JSON object), clear
/// - `POST drop-watches`: close every open watch
/// - `POST compact`: forget the event history (watches from older positions get 410)
/// - `GET stats`, `POST stats/reset`
pub fn serve(shared: &Arc<Shared>, method: &Method, path: &str, body: &[u8]) -> Response {
    match (method.as_str(), path.trim_end_matches('/')) {
        ("GET", "faults") => json_response(StatusCode::OK, &json!(lock(&shared.faults).list())),
        ("POST", "faults") => match serde_json::from_slice::<Fault>(body) {
            Ok(f) => {
                lock(&shared.faults).add(f);
                json_response(StatusCode::CREATED, &json!({"status": "ok"}))
            }
            Err(e) => ApiError::bad_request(format!("invalid fault: {e}")).into_response(),
        },
        ("DELETE", "faults") => {
            lock(&shared.faults).clear();
            json_response(StatusCode::OK, &json!({"status": "ok"}))
        }
        ("POST", "drop-watches") => {
            shared.drop_watches.send_modify(|n| *n += 1);
            json_response(StatusCode::OK, &json!({"status": "ok"}))
        }
        ("POST", "compact") => {
            lock(&shared.state).compact();
            json_response(StatusCode::OK, &json!({"status": "ok"}))
        }
        ("GET", "stats") => json_response(StatusCode::OK, &json!(*lock(&shared.stats))),
        ("POST", "stats/reset") => {
            *lock(&shared.stats) = Stats::default();
            json_response(StatusCode::OK, &json!({"status": "ok"}))
        }
        _ => ApiError::new(
            404,
            "NotFound",
            format!("no control endpoint {method} /__localapi/{path}"),
        )
        .into_response(),
    }
}
