//! The CRD's OpenAPI v3 schema applied to a decoded object with the `jsonschema` crate: types,
//! patterns, lengths, enums, ranges and required fields, exactly as the schema states them.
//!
//! OpenAPI's `nullable: true` has no JSON Schema keyword; it becomes `null` among the allowed
//! types (and enum values). Everything else in a structural schema is plain JSON Schema draft 4,
//! which is what the validator is built for; the `x-kubernetes-*` extensions are ignored here
//! (unknown fields are [`super::strict`]'s job, CEL rules [`super::cel`]'s).

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use super::FieldError;

/// A compiled validator for the CRD's `openAPIV3Schema`.
pub struct SchemaValidator(jsonschema::Validator);

/// Why the CRD's own schema could not be compiled (a bug in the generated CRD, never input).
#[derive(Debug, thiserror::Error)]
#[error("the BoxTable schema does not compile: {0}")]
pub struct SchemaCompileError(String);

impl SchemaCompileError {
    /// The error, worded.
    pub(super) fn new(message: String) -> Self {
        Self(message)
    }
}

impl SchemaValidator {
    /// Compiles `schema` (an `openAPIV3Schema`).
    ///
    /// # Errors
    /// [`SchemaCompileError`] when the schema is not valid JSON Schema.
    pub fn new(schema: &Value) -> Result<Self, SchemaCompileError> {
        let converted = to_json_schema(schema);
        jsonschema::draft4::new(&converted)
            .map(Self)
            .map_err(|e| SchemaCompileError(e.to_string()))
    }

    /// Every schema violation in `object`, in document order.
    pub fn errors(&self, object: &Value) -> Vec<FieldError> {
        self.0
            .iter_errors(object)
            .map(|error| {
                let path = dotted(error.instance_path().as_str());
                match error.kind() {
                    ValidationErrorKind::Required { property } => FieldError::Required {
                        path: match property.as_str() {
                            Some(name) if path.is_empty() => name.to_owned(),
                            Some(name) => format!("{path}.{name}"),
                            None => path,
                        },
                    },
                    kind => FieldError::Invalid {
                        path,
                        detail: error.to_string(),
                        blocks_rules: blocks_rules(kind),
                    },
                }
            })
            .collect()
    }
}

/// Whether kube-apiserver counts this violation among those that keep it from evaluating the CEL
/// rules: its `NotSupported` (enum), `TooLong` (maxLength), `TooMany` (maxItems, maxProperties)
/// and `TypeInvalid` (type) errors; `Required` ones block too (see [`FieldError::blocks_rules`]).
fn blocks_rules(kind: &ValidationErrorKind) -> bool {
    matches!(
        kind,
        ValidationErrorKind::Enum { .. }
            | ValidationErrorKind::MaxLength { .. }
            | ValidationErrorKind::MaxItems { .. }
            | ValidationErrorKind::MaxProperties { .. }
            | ValidationErrorKind::Type { .. }
    )
}

/// `/spec/items/0/name` as `spec.items[0].name`.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment.bytes().all(|b| b.is_ascii_digit()) && !segment.is_empty() {
            out.push_str(&format!("[{segment}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&segment);
        }
    }
    out
}

/// The schema with `nullable: true` spelt as JSON Schema: `null` added to `type` and `enum`.
fn to_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(fields) => {
            let mut out = serde_json::Map::new();
            let nullable = fields.get("nullable").and_then(Value::as_bool) == Some(true);
            for (key, value) in fields {
                let converted = match key.as_str() {
                    "nullable" => continue,
                    // Values, not schemas: copied as they are.
                    "default" | "enum" | "example" | "x-kubernetes-validations" => value.clone(),
                    // Maps from names to schemas.
                    "properties" | "definitions" | "patternProperties" => match value {
                        Value::Object(map) => Value::Object(
                            map.iter()
                                .map(|(k, v)| (k.clone(), to_json_schema(v)))
                                .collect(),
                        ),
                        other => other.clone(),
                    },
                    _ => to_json_schema(value),
                };
                out.insert(key.clone(), converted);
            }
            if nullable {
                if let Some(Value::String(ty)) = out.get("type").cloned() {
                    out.insert("type".to_owned(), serde_json::json!([ty, "null"]));
                }
                if let Some(Value::Array(values)) = out.get_mut("enum") {
                    values.push(Value::Null);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(to_json_schema).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn validator() -> SchemaValidator {
        SchemaValidator::new(&json!({
            "type": "object",
            "required": ["spec"],
            "properties": {"spec": {
                "type": "object",
                "required": ["box"],
                "properties": {
                    "box": {"type": "string", "enum": ["Outbox", "Inbox"]},
                    "table": {"type": "string", "nullable": true, "pattern": "^[a-z]+$", "maxLength": 5},
                    "targetVersion": {"type": "integer", "minimum": 1.0, "maximum": 8.0, "nullable": true}
                }
            }}
        }))
        .unwrap()
    }

    fn errors(object: Value) -> Vec<String> {
        validator()
            .errors(&object)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_valid_object_and_nulls_where_nullable_pass() {
        assert!(
            errors(json!({"spec": {"box": "Outbox", "table": null, "targetVersion": null}}))
                .is_empty()
        );
    }

    #[test]
    fn each_violation_names_its_field() {
        let found = errors(json!({"spec": {"table": "Orders_Long", "targetVersion": 9}}));
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(
            found.contains(&"spec.box: Required value".to_owned()),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|e| e.starts_with("spec.table: Invalid value: ") && e.contains("^[a-z]+$")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|e| e.starts_with("spec.targetVersion: Invalid value: ") && e.contains('8')),
            "{found:?}"
        );
    }

    #[test]
    fn pointers_become_kubernetes_field_paths() {
        assert_eq!(dotted("/spec/items/0/name"), "spec.items[0].name");
        assert_eq!(dotted(""), "");
    }
}
