//! Validation against the schema: types, enum, string, number and list limits, required
//! properties, recursing into children; rules are left to rules.rs.

use serde_json::Value;

use super::rules::check_rules;
use super::{flag, join};
use crate::error::Cause;

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Renders a value the way kube's field errors quote it.
pub fn show(v: &Value) -> String {
    match v {
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Validates an object against a schema; `old` is the previous object on update (for transition rules).
pub fn validate(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut root = schema.clone();
    if let Some(props) = root.get_mut("properties").and_then(Value::as_object_mut) {
        props.remove("metadata");
    }
    check(&root, obj, old, "", &mut causes);
    causes
}

fn check(schema: &Value, v: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    if v.is_null() && flag(schema, "nullable") {
        return;
    }
    let actual = type_name(v);
    if flag(schema, "x-kubernetes-int-or-string") {
        if !matches!(actual, "integer" | "string") {
            out.push(Cause::new("FieldValueTypeInvalid", path, format!(
                "Invalid value: {}: {path} in body must be of type integer-or-string: \"{actual}\"", show(v))));
            return;
        }
    } else if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let ok = want == actual || (want == "number" && actual == "integer");
        if !ok {
            out.push(Cause::new("FieldValueTypeInvalid", path, format!(
                "Invalid value: \"{actual}\": {path} in body must be of type {want}: \"{actual}\"")));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        out.push(Cause::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                v,
                list.join(", ")
            ),
        ));
    }
    match v {
        Value::String(s) => check_string(schema, s, v, path, out),
        Value::Number(n) => check_number(schema, n.as_f64().unwrap_or(0.0), v, path, out),
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                out.push(Cause::new(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {}: must have at most {max} items", items.len()),
                ));
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {}: {path} in body should have at least {min} items",
                        items.len()
                    ),
                ));
            }
            if let Some(is) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(is, item, None, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            if let Some(req) = schema.get("required").and_then(Value::as_array) {
                for r in req.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        out.push(Cause::new(
                            "FieldValueRequired",
                            &join(path, r),
                            "Required value",
                        ));
                    }
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in map {
                if let Some(cs) = props.and_then(|p| p.get(k)).or(extra) {
                    check(cs, child, old.and_then(|o| o.get(k)), &join(path, k), out);
                }
            }
        }
        _ => {}
    }
    check_rules(schema, v, old, path, out);
}

fn check_string(schema: &Value, s: &str, v: &Value, path: &str, out: &mut Vec<Cause>) {
    let len = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        out.push(Cause::new(
            "FieldValueTooLong",
            path,
            format!("Too long: may not be longer than {max}"),
        ));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        out.push(Cause::new(
            "FieldValueInvalid",
            path,
            format!("Invalid value: {v}: {path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pat) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pat) {
            Ok(re) if !re.is_match(s) => out.push(Cause::new(
                "FieldValueInvalid",
                path,
                format!("Invalid value: {v}: {path} in body should match '{pat}'"),
            )),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(pattern = pat, error = %e, "schema pattern does not compile; skipped")
            }
        }
    }
}

fn check_number(schema: &Value, n: f64, v: &Value, path: &str, out: &mut Vec<Cause>) {
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let excl = flag(schema, "exclusiveMinimum");
        if n < min || (excl && n == min) {
            let rel = if excl {
                "greater than"
            } else {
                "greater than or equal to"
            };
            out.push(Cause::new(
                "FieldValueInvalid",
                path,
                format!(
                    "Invalid value: {v}: {path} in body should be {rel} {}",
                    schema["minimum"]
                ),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let excl = flag(schema, "exclusiveMaximum");
        if n > max || (excl && n == max) {
            let rel = if excl {
                "less than"
            } else {
                "less than or equal to"
            };
            out.push(Cause::new(
                "FieldValueInvalid",
                path,
                format!(
                    "Invalid value: {v}: {path} in body should be {rel} {}",
                    schema["maximum"]
                ),
            ));
        }
    }
}
