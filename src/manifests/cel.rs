//! The CRD's `x-kubernetes-validations` CEL rules evaluated on a decoded object with the `cel`
//! crate, with `self` bound to the value the rule is attached to, as the API server does.
//!
//! Transition rules (those that read `oldSelf`) only run when an object is updated; a manifest
//! is always a create, so the API server skips them and so does this. Any other rule that cannot
//! be compiled or does not evaluate to a boolean refuses the object: a rule is never silently
//! passed.

use std::collections::HashMap;

use ::cel::{Context, Program, Value as CelValue};
use serde_json::Value;

use super::FieldError;

/// Checks every rule in `schema` against the matching values of `object`.
pub fn errors(schema: &Value, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    walk(schema, object, "", &mut errors);
    errors
}

fn walk(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        return;
    }
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            if let Some(error) = check(rule, value, path) {
                errors.push(error);
            }
        }
    }
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (name, child) in fields {
                if let Some(child_schema) = properties.and_then(|p| p.get(name)).or(additional) {
                    let child_path = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}.{name}")
                    };
                    walk(child_schema, child, &child_path, errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// One rule against one value: `None` when it holds (or is a transition rule).
fn check(rule: &Value, value: &Value, path: &str) -> Option<FieldError> {
    let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
    let message = rule
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| format!("failed rule: {text}"), str::to_owned);
    let not_evaluated = |problem: String| FieldError::RuleNotEvaluated {
        path: path.to_owned(),
        rule: text.to_owned(),
        problem,
    };
    let program = match Program::compile(text) {
        Ok(program) => program,
        Err(error) => return Some(not_evaluated(format!("it does not compile: {error}"))),
    };
    if program.references().has_variable("oldSelf") {
        return None;
    }
    let mut context = Context::default();
    context.add_variable_from_value("self", to_cel(value));
    match program.execute(&context) {
        Ok(CelValue::Bool(true)) => None,
        Ok(CelValue::Bool(false)) => Some(FieldError::Rule {
            path: path.to_owned(),
            message,
        }),
        Ok(other) => Some(not_evaluated(format!(
            "it gave {other:?} instead of a boolean"
        ))),
        Err(error) => Some(not_evaluated(format!("evaluating it failed: {error}"))),
    }
}

/// JSON as CEL sees it in Kubernetes: integers are `int`, objects are maps keyed by field name.
fn to_cel(value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => CelValue::Int(i),
            (None, Some(u)) => CelValue::UInt(u),
            _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::from(s.as_str()),
        Value::Array(items) => CelValue::from(items.iter().map(to_cel).collect::<Vec<_>>()),
        Value::Object(fields) => CelValue::from(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<HashMap<String, CelValue>>(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(rule: &str) -> Value {
        json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [{"rule": rule, "message": "the rule says no"}],
            "properties": {"box": {"type": "string"}, "targetVersion": {"type": "integer"}}
        }}})
    }

    fn check_spec(rule: &str, spec: Value) -> Vec<String> {
        errors(&schema(rule), &json!({ "spec": spec }))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_rule_that_holds_passes_and_one_that_fails_names_its_field_and_message() {
        let rule = "self.box == 'Outbox' || !has(self.targetVersion) || self.targetVersion <= 2";
        assert!(check_spec(rule, json!({"box": "Inbox", "targetVersion": 2})).is_empty());
        assert!(check_spec(rule, json!({"box": "Inbox"})).is_empty());
        assert_eq!(
            check_spec(rule, json!({"box": "Inbox", "targetVersion": 3})),
            ["spec: Invalid value: \"object\": the rule says no"]
        );
    }

    #[test]
    fn list_membership_works_on_strings() {
        let rule = "!(self.box in ['Json', 'Jsonb'])";
        assert!(check_spec(rule, json!({"box": "Text"})).is_empty());
        assert_eq!(check_spec(rule, json!({"box": "Json"})).len(), 1);
    }

    #[test]
    fn transition_rules_are_left_to_updates() {
        assert!(check_spec("self == oldSelf", json!({"box": "Inbox"})).is_empty());
        assert!(check_spec("has(self.box) == has(oldSelf.box)", json!({})).is_empty());
    }

    #[test]
    fn a_rule_that_cannot_be_evaluated_refuses_the_object() {
        for rule in ["self.box ==", "self.box", "self.nothing.deeper == 1"] {
            let found = check_spec(rule, json!({"box": "Inbox"}));
            assert_eq!(found.len(), 1, "{rule}: {found:?}");
            assert!(found[0].contains("could not be evaluated"), "{found:?}");
        }
    }
}
