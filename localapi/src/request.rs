//! Request parsing: which resource a path names and the query options kube clients send.

use std::collections::HashMap;
use std::time::Duration;

use axum::http::HeaderMap;

use crate::error::ApiError;
use crate::registry::{Registry, ResourceDef};
use crate::selector::Selector;
use crate::write::FieldValidation;

/// The resource a request path addresses.
#[derive(Debug, Clone)]
pub struct Target {
    /// Resource definition.
    pub def: ResourceDef,
    /// Namespace from the path, if any.
    pub namespace: Option<String>,
    /// Object name, if any.
    pub name: Option<String>,
    /// Subresource (`status`), if any.
    pub sub: Option<String>,
}

/// Resolves `/api/v1/...` or `/apis/<g>/<v>/...` (segments after the version) to a target.
pub fn resolve(reg: &Registry, group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && reg
            .find(group, version, rest[2])
            .is_some_and(|d| d.namespaced);
    let (namespace, tail) = if namespaced_path {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let def = reg.find(group, version, tail.first()?)?.clone();
    if tail.len() > 3 {
        return None;
    }
    Some(Target {
        def,
        namespace,
        name: tail.get(1).map(|s| s.to_string()),
        sub: tail.get(2).map(|s| s.to_string()),
    })
}

/// Query options of one request.
#[derive(Debug, Clone, Default)]
pub struct Query(pub HashMap<String, String>);

impl Query {
    /// A query value.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("1" | "true" | "True"))
    }

    /// `watch=1|true`.
    pub fn watch(&self) -> bool {
        self.flag("watch")
    }

    /// `allowWatchBookmarks=true`.
    pub fn bookmarks(&self) -> bool {
        self.flag("allowWatchBookmarks")
    }

    /// `sendInitialEvents=true`.
    pub fn send_initial_events(&self) -> bool {
        self.flag("sendInitialEvents")
    }

    /// `force=true`.
    pub fn force(&self) -> bool {
        self.flag("force")
    }

    /// `dryRun=All`.
    pub fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }

    /// `timeoutSeconds`.
    pub fn timeout(&self) -> Option<Duration> {
        self.get("timeoutSeconds")
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs)
    }

    /// `limit` (0 = unlimited).
    pub fn limit(&self) -> usize {
        self.get("limit").and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    /// `resourceVersion` as a watch start: `None` for absent, empty or "0".
    ///
    /// # Errors
    /// 400 when it is not a number.
    pub fn start_rv(&self) -> Result<Option<u64>, ApiError> {
        match self.get("resourceVersion") {
            None | Some("") | Some("0") => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}"))),
        }
    }

    /// `labelSelector` and `fieldSelector`.
    ///
    /// # Errors
    /// 400 when a selector does not parse.
    pub fn selector(&self) -> Result<Selector, ApiError> {
        Selector::parse(self.get("labelSelector"), self.get("fieldSelector"))
            .map_err(ApiError::bad_request)
    }

    /// `fieldValidation` (default Warn, like kube).
    ///
    /// # Errors
    /// 400 for an unknown value.
    pub fn field_validation(&self) -> Result<FieldValidation, ApiError> {
        match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn, Strict, got {other}"
            ))),
        }
    }

    /// `fieldManager`, else the User-Agent's program name, else `unknown`.
    pub fn manager(&self, headers: &HeaderMap) -> String {
        if let Some(m) = self.get("fieldManager").filter(|m| !m.is_empty()) {
            return m.to_string();
        }
        headers
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string()
    }
}
