//! `x-kubernetes-validations`: CEL rules at a schema node, turned into kube's field errors.

use serde_json::Value;

use crate::cel::{self, CelError};
use crate::error::Cause;

/// Evaluates the `x-kubernetes-validations` rules at one node; transition rules only with an old value.
pub(super) fn check_rules(
    schema: &Value,
    v: &Value,
    old: Option<&Value>,
    path: &str,
    out: &mut Vec<Cause>,
) {
    let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    for r in rules {
        let Some(rule) = r.get("rule").and_then(Value::as_str) else {
            continue;
        };
        let transition = cel::parse(rule)
            .map(|e| cel::uses_old_self(&e))
            .unwrap_or(false);
        if transition && old.is_none() {
            continue;
        }
        let detail = match cel::check(rule, v, old) {
            Ok(true) => continue,
            Ok(false) => r
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("failed rule: {rule}")),
            Err(CelError::Runtime(e)) => format!("{e} evaluating rule: {rule}"),
            Err(CelError::Unsupported(e)) => {
                tracing::debug!(
                    rule,
                    error = e,
                    "CEL rule outside the supported subset; skipped"
                );
                continue;
            }
        };
        let field = match r.get("fieldPath").and_then(Value::as_str) {
            Some(fp) => format!("{path}{fp}"),
            None => path.to_string(),
        };
        let reason = r
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("FieldValueInvalid");
        let body = match reason {
            "FieldValueForbidden" => format!("Forbidden: {detail}"),
            "FieldValueRequired" => format!("Required value: {detail}"),
            "FieldValueDuplicate" => format!("Duplicate value: {detail}"),
            _ => format!(
                "Invalid value: \"{}\": {detail}",
                schema
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("object")
            ),
        };
        out.push(Cause::new(reason, &field, body));
    }
}
