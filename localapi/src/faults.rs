//! Fault injection (forced errors, latency) and request statistics.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One fault rule. A request matching `method` and `path_prefix` is delayed by `latency_ms`, then, if
/// `status` is set, answered with that HTTP status as a kube `Status`. `count` limits how many requests the
/// rule hits (absent = unlimited).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// HTTP status to answer with (e.g. 500, 503, 429, 409); absent = latency only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How many matching requests to affect; absent = every one until cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Only requests whose path starts with this (e.g. `/apis/brighter.dev`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// Only this HTTP method (e.g. `PATCH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Added delay before answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Message of the injected Status (default: `injected fault`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Fault {
    /// A fault answering `status` to every matching request.
    pub fn status(status: u16) -> Self {
        Self {
            status: Some(status),
            ..Self::default()
        }
    }

    /// Limits the fault to `count` requests.
    pub fn times(mut self, count: u32) -> Self {
        self.count = Some(count);
        self
    }

    /// Limits the fault to paths starting with `prefix`.
    pub fn path_prefix(mut self, prefix: &str) -> Self {
        self.path_prefix = Some(prefix.to_string());
        self
    }

    /// Limits the fault to one HTTP method.
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Adds latency.
    pub fn latency_ms(mut self, ms: u64) -> Self {
        self.latency_ms = Some(ms);
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .path_prefix
                .as_deref()
                .is_none_or(|p| path.starts_with(p))
    }
}

/// Active fault rules.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Vec<Fault>,
}

/// What to do to one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// Delay in ms.
    pub latency_ms: u64,
    /// Forced status and message.
    pub fail: Option<(u16, String)>,
}

impl Faults {
    /// Adds a rule.
    pub fn add(&mut self, f: Fault) {
        self.rules.push(f);
    }

    /// Removes every rule.
    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// The active rules.
    pub fn list(&self) -> Vec<Fault> {
        self.rules.clone()
    }

    /// Decides for one request, consuming counts of the rules that hit.
    pub fn decide(&mut self, method: &str, path: &str) -> Decision {
        let mut d = Decision::default();
        for rule in self.rules.iter_mut().filter(|r| r.matches(method, path)) {
            d.latency_ms += rule.latency_ms.unwrap_or(0);
            if d.fail.is_none()
                && let Some(code) = rule.status
            {
                d.fail = Some((
                    code,
                    rule.message
                        .clone()
                        .unwrap_or_else(|| "injected fault".into()),
                ));
            }
            if let Some(c) = rule.count.as_mut() {
                *c = c.saturating_sub(1);
            }
        }
        self.rules.retain(|r| r.count != Some(0));
        d
    }
}

/// Request counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Every API request (control endpoints excluded).
    pub total: u64,
    /// By `METHOD /path` (query stripped).
    pub by_path: BTreeMap<String, u64>,
    /// By `verb resource[/subresource]`, e.g. `patch boxtables/status`, `watch boxtables`.
    pub by_verb: BTreeMap<String, u64>,
}

impl Stats {
    /// Counts one request.
    pub fn record(&mut self, method: &str, path: &str, verb: Option<String>) {
        self.total += 1;
        *self.by_path.entry(format!("{method} {path}")).or_default() += 1;
        if let Some(v) = verb {
            *self.by_verb.entry(v).or_default() += 1;
        }
    }

    /// Requests whose method matches (or any, if `None`) and whose path starts with `prefix`.
    pub fn count(&self, method: Option<&str>, prefix: &str) -> u64 {
        self.by_path
            .iter()
            .filter(|(k, _)| {
                let (m, p) = k.split_once(' ').unwrap_or(("", k));
                method.is_none_or(|want| want.eq_ignore_ascii_case(m)) && p.starts_with(prefix)
            })
            .map(|(_, n)| n)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_fault_expires_after_its_hits() {
        let mut f = Faults::default();
        f.add(
            Fault::status(500)
                .times(2)
                .method("patch")
                .path_prefix("/apis/x"),
        );
        assert_eq!(f.decide("GET", "/apis/x").fail, None);
        assert!(f.decide("PATCH", "/apis/x/y").fail.is_some());
        assert!(f.decide("PATCH", "/apis/x/y").fail.is_some());
        assert_eq!(f.decide("PATCH", "/apis/x/y").fail, None);
    }
}
