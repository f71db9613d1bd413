//! Pruning: fields the schema does not know are removed (and reported), nulls of non-nullable
//! fields dropped.

use serde_json::{Map, Value};

use super::{flag, join};

/// Removes fields the schema does not know (returning their paths) and nulls of non-nullable fields.
/// `metadata`, `apiVersion` and `kind` at the root are left alone.
pub fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Value::Object(map) = obj {
        let props = schema.get("properties").and_then(Value::as_object);
        let keys: Vec<String> = map.keys().cloned().collect();
        for k in keys {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            prune_member(schema, props, map, &k, "", &mut unknown);
        }
    }
    unknown
}

fn prune_member(
    schema: &Value,
    props: Option<&Map<String, Value>>,
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
    unknown: &mut Vec<String>,
) {
    let child_path = join(path, key);
    let child_schema = props
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
    match child_schema {
        Some(cs) => {
            if map.get(key).is_some_and(Value::is_null) && !flag(cs, "nullable") {
                map.remove(key);
            } else if let Some(v) = map.get_mut(key) {
                prune_value(cs, v, &child_path, unknown);
            }
        }
        None if flag(schema, "x-kubernetes-preserve-unknown-fields")
            || schema.get("additionalProperties").and_then(Value::as_bool) == Some(true) => {}
        None => {
            map.remove(key);
            unknown.push(child_path);
        }
    }
}

fn prune_value(schema: &Value, v: &mut Value, path: &str, unknown: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            if flag(schema, "x-kubernetes-embedded-resource") {
                return;
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                prune_member(schema, props, map, &k, path, unknown);
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(is, item, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}
