//! The CRD's `x-kubernetes-validations` CEL rules evaluated on a decoded object with the `cel`
//! crate, with `self` bound to the value the rule is attached to, as the API server does.
//!
//! Transition rules (those that read `oldSelf`) only run when an object is updated; a manifest
//! is always a create, so the API server skips them and so does this. Any other rule that cannot
//! be compiled or does not evaluate to a boolean refuses the object: a rule is never silently
//! passed. A failed rule is worded as the API server words it: its `messageExpression`'s result
//! (else its `message`), after the value for a string, number or boolean field, in Go's quoting.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use ::cel::{Context, Program, Value as CelValue};
use serde_json::Value;

use super::FieldError;

/// Rules and message expressions compiled so far, by their text: each is compiled once, when a
/// document first reaches it, however many documents use it. With them, the standard library's
/// context, built once: every evaluation binds `self` in a scope of its own inside it.
#[derive(Default)]
pub struct Programs {
    compiled: RefCell<HashMap<String, Result<Rc<Program>, String>>>,
    stdlib: std::cell::OnceCell<Context<'static, 'static>>,
}

impl Programs {
    /// The context every evaluation's scope sits in.
    fn stdlib(&self) -> &Context<'static, 'static> {
        self.stdlib.get_or_init(Context::default)
    }

    /// `text` compiled, or why it does not compile.
    fn get(&self, text: &str) -> Result<Rc<Program>, String> {
        if let Some(found) = self.compiled.borrow().get(text) {
            return found.clone();
        }
        let compiled = Program::compile(text)
            .map(Rc::new)
            .map_err(|error| error.to_string());
        self.compiled
            .borrow_mut()
            .insert(text.to_owned(), compiled.clone());
        compiled
    }
}

/// Checks every rule in `schema` against the matching values of `object`.
pub fn errors(programs: &Programs, schema: &Value, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    walk(programs, schema, object, "", &mut errors);
    errors
}

fn walk(
    programs: &Programs,
    schema: &Value,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if value.is_null() {
        return;
    }
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        let node_type = schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("object");
        for rule in rules {
            if let Some(error) = check(programs, rule, node_type, value, path) {
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
                    walk(programs, child_schema, child, &child_path, errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(programs, item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// One rule against one value of schema type `node_type`: `None` when it holds (or is a
/// transition rule).
fn check(
    programs: &Programs,
    rule: &Value,
    node_type: &str,
    value: &Value,
    path: &str,
) -> Option<FieldError> {
    let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
    let not_evaluated = |problem: String| FieldError::RuleNotEvaluated {
        path: path.to_owned(),
        rule: text.to_owned(),
        problem,
    };
    let program = match programs.get(text) {
        Ok(program) => program,
        Err(error) => return Some(not_evaluated(format!("it does not compile: {error}"))),
    };
    if program.references().has_variable("oldSelf") {
        return None;
    }
    let mut context = programs.stdlib().new_inner_scope();
    context.add_variable_from_value("self", to_cel(value));
    match program.execute(&context) {
        Ok(CelValue::Bool(true)) => None,
        Ok(CelValue::Bool(false)) => Some(FieldError::Rule {
            path: path.to_owned(),
            value: (!matches!(node_type, "object" | "array")).then(|| go_value(value)),
            message: message(programs, rule, text, &context),
        }),
        Ok(other) => Some(not_evaluated(format!(
            "it gave {other:?} instead of a boolean"
        ))),
        Err(error) => Some(not_evaluated(format!("evaluating it failed: {error}"))),
    }
}

/// The rule's `messageExpression` evaluated, else its `message`, else the API server's default;
/// as on the API server, an expression that fails or gives an empty or multi-line text falls back
/// to the `message`.
fn message(programs: &Programs, rule: &Value, text: &str, context: &Context) -> String {
    let evaluated = rule
        .get("messageExpression")
        .and_then(Value::as_str)
        .and_then(|expression| programs.get(expression).ok())
        .and_then(|program| match program.execute(context) {
            Ok(CelValue::String(s)) => Some(s.trim().to_owned()),
            _ => None,
        })
        .filter(|s| !s.is_empty() && !s.contains('\n'));
    evaluated.unwrap_or_else(|| {
        rule.get("message")
            .and_then(Value::as_str)
            .map_or_else(|| format!("failed rule: {text}"), str::to_owned)
    })
}

/// A scalar value as the API server prints it in a field error: a string in Go's `%q` quoting,
/// a number or boolean as it is.
fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        other => other.to_string(),
    }
}

/// Go's `strconv.Quote` for the characters that occur in practice: `"` and `\` escaped, the C
/// escapes for control characters, `\xNN` for the other ASCII ones, `\uNNNN` for other control
/// characters; printable text as it is.
fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
        errors(
            &Programs::default(),
            &schema(rule),
            &json!({ "spec": spec }),
        )
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
            ["spec: Invalid value: the rule says no"]
        );
    }

    #[test]
    fn a_field_rule_shows_a_scalar_value_in_gos_quoting_and_its_message_expression() {
        let schema = json!({"type": "object", "properties": {"name": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')", "message": "lowercase",
                "messageExpression": "'lowercase letters only, not ' + self"}]
        }}});
        let found: Vec<String> = errors(
            &Programs::default(),
            &schema,
            &json!({"name": "A\"b\\c\td\u{1}é"}),
        )
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            found,
            [
                "name: Invalid value: \"A\\\"b\\\\c\\td\\x01é\": lowercase letters only, not A\"b\\c\td\u{1}é"
            ]
        );
    }

    #[test]
    fn a_message_expression_that_fails_falls_back_to_the_message() {
        let schema = json!({"type": "object", "properties": {"n": {
            "type": "integer",
            "x-kubernetes-validations": [{"rule": "self < 3", "message": "below 3",
                "messageExpression": "self.nothing"}]
        }}});
        let found: Vec<String> = errors(&Programs::default(), &schema, &json!({"n": 7}))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found, ["n: Invalid value: 7: below 3"]);
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
