//! The API server's decoding of a custom resource, done here for manifests that never meet one:
//! strict field validation (an unknown field is an error, as `kubectl apply` reports it), nulls
//! dropped where the schema does not allow them, and the schema's defaults filled in.
//!
//! Driven entirely by the CRD's structural schema (`openAPIV3Schema` as JSON), so a field added
//! to `src/crd/` is known here without a second list.

use serde_json::{Map, Value};

use super::FieldError;

/// The fields the API server accepts at the top of every object besides the schema's own.
const TYPE_FIELDS: [&str; 2] = ["apiVersion", "kind"];

/// What the decoder knows about `metadata`: the top-level field names of `ObjectMeta` (the CRD
/// schema leaves `metadata` to the API server).
pub struct Decoder<'a> {
    schema: &'a Value,
    metadata_fields: &'a [&'a str],
}

impl<'a> Decoder<'a> {
    /// A decoder for objects of the CRD whose `openAPIV3Schema` is `schema`.
    pub fn new(schema: &'a Value, metadata_fields: &'a [&'a str]) -> Self {
        Self {
            schema,
            metadata_fields,
        }
    }

    /// Checks `object` for unknown fields, drops nulls the schema does not allow and applies the
    /// schema's defaults, in place. Returns every unknown field found.
    pub fn decode(&self, object: &mut Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let Value::Object(fields) = object else {
            return errors;
        };
        let properties = self.schema.get("properties").and_then(Value::as_object);
        for (name, value) in fields.iter_mut() {
            if TYPE_FIELDS.contains(&name.as_str()) {
                continue;
            }
            if name == "metadata" {
                self.metadata(value, &mut errors);
                continue;
            }
            match properties.and_then(|p| p.get(name)) {
                Some(schema) => walk(value, schema, name, &mut errors),
                None => errors.push(FieldError::Unknown { path: name.clone() }),
            }
        }
        prune_and_default(fields, self.schema, "", &mut errors);
        errors.sort_by(|a, b| a.path().cmp(b.path()));
        errors
    }

    fn metadata(&self, value: &Value, errors: &mut Vec<FieldError>) {
        let Value::Object(fields) = value else {
            return;
        };
        for name in fields.keys() {
            if !self.metadata_fields.contains(&name.as_str()) {
                errors.push(FieldError::Unknown {
                    path: format!("metadata.{name}"),
                });
            }
        }
    }
}

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn is_nullable(schema: &Value) -> bool {
    schema.get("nullable").and_then(Value::as_bool) == Some(true)
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

/// Walks `value` with its `schema`: unknown fields, then nulls and defaults, depth first.
fn walk(value: &mut Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (name, child) in fields.iter_mut() {
                let child_schema = properties.and_then(|p| p.get(name)).or(additional);
                match child_schema {
                    Some(child_schema) => {
                        walk(child, child_schema, &child_path(path, name), errors)
                    }
                    None if properties.is_some() && !preserves_unknown(schema) => {
                        errors.push(FieldError::Unknown {
                            path: child_path(path, name),
                        });
                    }
                    None => {}
                }
            }
            prune_and_default(fields, schema, path, errors);
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(item, item_schema, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// Drops null fields whose schema is not nullable (the API server prunes them before
/// defaulting), then fills in missing fields that have a default, and walks the defaults so
/// their own nested defaults apply too.
fn prune_and_default(
    fields: &mut Map<String, Value>,
    schema: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        if fields.get(name).is_some_and(Value::is_null) && !is_nullable(property) {
            fields.remove(name);
        }
        if fields.contains_key(name) {
            continue;
        }
        if let Some(default) = property.get("default") {
            let mut value = default.clone();
            walk(&mut value, property, &child_path(path, name), errors);
            fields.insert(name.clone(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "table": {"type": "string", "nullable": true},
                        "schema": {"type": "string", "default": "public"},
                        "lock": {
                            "type": "object",
                            "default": {},
                            "properties": {"timeout": {"type": "string", "default": "30s"}}
                        },
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    fn decode(mut object: Value) -> (Value, Vec<String>) {
        let schema = schema();
        let meta = ["name", "namespace"];
        let errors = Decoder::new(&schema, &meta).decode(&mut object);
        (object, errors.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn unknown_fields_are_named_by_their_full_path() {
        let (_, errors) = decode(json!({
            "apiVersion": "x/v1", "kind": "X",
            "metadata": {"name": "a", "nmae": "b"},
            "spec": {"tabel": "orders", "lock": {"timeuot": "1s"}},
            "extra": 1
        }));
        assert_eq!(
            errors,
            [
                "strict decoding error: unknown field \"extra\"",
                "strict decoding error: unknown field \"metadata.nmae\"",
                "strict decoding error: unknown field \"spec.lock.timeuot\"",
                "strict decoding error: unknown field \"spec.tabel\"",
            ]
        );
    }

    #[test]
    fn maps_and_preserved_objects_take_any_key() {
        let (_, errors) = decode(json!({"spec": {"labels": {"a": "b"}, "free": {"x": {"y": 1}}}}));
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn defaults_fill_missing_fields_and_their_nested_defaults() {
        let (object, errors) = decode(json!({"spec": {}}));
        assert!(errors.is_empty());
        assert_eq!(
            object["spec"],
            json!({"schema": "public", "lock": {"timeout": "30s"}})
        );
    }

    #[test]
    fn nulls_are_kept_only_where_the_schema_allows_them_and_defaults_replace_the_rest() {
        let (object, _) = decode(json!({"spec": {"table": null, "schema": null}}));
        assert_eq!(object["spec"]["table"], Value::Null);
        assert_eq!(object["spec"]["schema"], "public");
    }
}
