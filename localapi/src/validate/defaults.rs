//! Defaulting: `default`s of absent properties, inside objects and arrays that are present.

use serde_json::Value;

/// Applies `default`s of absent properties, recursing into objects and arrays that are present.
pub fn apply_defaults(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    if !map.contains_key(k)
                        && let Some(d) = ps.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = map.get_mut(k) {
                        apply_defaults(ps, child);
                    }
                }
            }
            if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in map.values_mut() {
                    apply_defaults(ap, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                for item in items {
                    apply_defaults(is, item);
                }
            }
        }
        _ => {}
    }
}
