//! Kubernetes `Status` errors: the failure shape every kube client understands.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One field-level cause inside an `Invalid` status (`details.causes[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// Machine-readable reason, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Message without the field prefix, e.g. `Required value`.
    pub message: String,
    /// JSON path of the field, e.g. `spec.table`.
    pub field: String,
}

impl Cause {
    /// A cause with the given reason, field path and message body.
    pub fn new(reason: &str, field: &str, message: impl Into<String>) -> Self {
        Self {
            reason: reason.to_string(),
            message: message.into(),
            field: field.to_string(),
        }
    }

    /// `field: message`, the way kube joins causes into the top-level message.
    pub fn render(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// An API failure rendered as a `meta/v1 Status` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `reason` (NotFound, AlreadyExists, Conflict, Invalid, BadRequest, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `details` object, if any.
    pub details: Option<Value>,
}

/// Names of the object an error is about, for `details`.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Plural resource name, e.g. `boxtables`.
    pub plural: &'a str,
    /// Kind, e.g. `BoxTable`.
    pub kind: &'a str,
    /// Object name.
    pub name: &'a str,
}

impl Subject<'_> {
    /// `boxtables.brighter.dev` or `secrets` for the core group.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `BoxTable.brighter.dev` or `Secret` for the core group.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

impl ApiError {
    /// A bare error with a code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    /// 404 `<resource> "<name>" not found`.
    pub fn not_found(s: Subject<'_>) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", s.group_resource(), s.name),
        );
        e.details = Some(json!({"name": s.name, "group": s.group, "kind": s.plural}));
        e
    }

    /// 409 `<resource> "<name>" already exists`.
    pub fn already_exists(s: Subject<'_>) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", s.group_resource(), s.name),
        );
        e.details = Some(json!({"name": s.name, "group": s.group, "kind": s.plural}));
        e
    }

    /// 409 Conflict with kube's optimistic-concurrency wording, or a custom detail.
    pub fn conflict(s: Subject<'_>, detail: &str) -> Self {
        let msg = format!(
            "Operation cannot be fulfilled on {} \"{}\": {}",
            s.group_resource(),
            s.name,
            detail
        );
        let mut e = Self::new(409, "Conflict", msg);
        e.details = Some(json!({"name": s.name, "group": s.group, "kind": s.plural}));
        e
    }

    /// The standard "object has been modified" conflict.
    pub fn stale(s: Subject<'_>) -> Self {
        Self::conflict(
            s,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `<Kind.group> "<name>" is invalid: ...` with causes.
    pub fn invalid(s: Subject<'_>, causes: Vec<Cause>) -> Self {
        let rendered: Vec<String> = causes.iter().map(Cause::render).collect();
        let body = if rendered.len() == 1 {
            rendered.join("")
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let msg = format!("{} \"{}\" is invalid: {}", s.group_kind(), s.name, body);
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        let mut e = Self::new(422, "Invalid", msg);
        e.details =
            Some(json!({"name": s.name, "group": s.group, "kind": s.kind, "causes": causes}));
        e
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 410 Gone / Expired (too old resource version).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// 415 UnsupportedMediaType for a patch type the resource does not accept.
    pub fn unsupported_media(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type}) - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// A reason that matches an arbitrary HTTP code, for injected faults.
    pub fn for_code(code: u16, message: impl Into<String>) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = crate::server::json_response(code, &self.to_status());
        if self.code == 429 {
            resp.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        resp
    }
}
