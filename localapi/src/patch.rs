//! Patch formats: JSON merge patch (RFC 7386) and JSON patch (RFC 6902, including `test`).

use serde_json::Value;

/// Applies an RFC 7386 merge patch in place: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Why a JSON patch could not be applied.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonPatchError {
    /// The patch document is malformed (400).
    Malformed(String),
    /// An operation could not be applied, e.g. a failed `test` or a missing path (422).
    Failed(String),
}

fn unescape(tok: &str) -> String {
    tok.replace("~1", "/").replace("~0", "~")
}

fn split(path: &str) -> Result<Vec<String>, JsonPatchError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    if !path.starts_with('/') {
        return Err(JsonPatchError::Malformed(format!(
            "invalid JSON pointer: {path}"
        )));
    }
    Ok(path[1..].split('/').map(unescape).collect())
}

fn resolve<'a>(
    doc: &'a mut Value,
    toks: &[String],
    path: &str,
) -> Result<&'a mut Value, JsonPatchError> {
    let mut cur = doc;
    for t in toks {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(move |i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| JsonPatchError::Failed(format!("path {path} does not exist")))?;
    }
    Ok(cur)
}

fn get(doc: &mut Value, path: &str) -> Result<Value, JsonPatchError> {
    let toks = split(path)?;
    resolve(doc, &toks, path).map(|v| v.clone())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, JsonPatchError> {
    let toks = split(path)?;
    let (last, parent) = toks
        .split_last()
        .ok_or_else(|| JsonPatchError::Failed("cannot remove the root".into()))?;
    let missing = || {
        JsonPatchError::Failed(format!(
            "unable to remove nonexistent key: {path}: missing value"
        ))
    };
    match resolve(doc, parent, path)? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(missing()),
        },
        _ => Err(missing()),
    }
}

fn add(doc: &mut Value, path: &str, value: Value, replace: bool) -> Result<(), JsonPatchError> {
    let toks = split(path)?;
    let Some((last, parent)) = toks.split_last() else {
        *doc = value;
        return Ok(());
    };
    match resolve(doc, parent, path)? {
        Value::Object(m) => {
            if replace && !m.contains_key(last) {
                return Err(JsonPatchError::Failed(format!(
                    "replace operation does not apply: doc is missing key: {path}"
                )));
            }
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| JsonPatchError::Failed(format!("invalid array index in {path}")))?
            };
            if replace {
                let slot = a
                    .get_mut(idx)
                    .ok_or_else(|| JsonPatchError::Failed(format!("index out of range: {path}")))?;
                *slot = value;
            } else if idx <= a.len() {
                a.insert(idx, value);
            } else {
                return Err(JsonPatchError::Failed(format!(
                    "index out of range: {path}"
                )));
            }
            Ok(())
        }
        _ => Err(JsonPatchError::Failed(format!(
            "path {path} does not exist"
        ))),
    }
}

/// Applies an RFC 6902 patch document to a copy of `doc`; the original is untouched on failure.
///
/// # Errors
/// `Malformed` for a bad document, `Failed` for an operation that does not apply (including `test`).
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, JsonPatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| JsonPatchError::Malformed("json patch must be an array".into()))?;
    let mut out = doc.clone();
    for op in ops {
        let name = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| JsonPatchError::Malformed("operation has no op".into()))?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| JsonPatchError::Malformed("operation has no path".into()))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| JsonPatchError::Malformed(format!("{name} operation has no value")))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| JsonPatchError::Malformed(format!("{name} operation has no from")))
        };
        match name {
            "add" => add(&mut out, path, value()?, false)?,
            "replace" => add(&mut out, path, value()?, true)?,
            "remove" => {
                remove(&mut out, path)?;
            }
            "move" => {
                let v = remove(&mut out, from()?)?;
                add(&mut out, path, v, false)?;
            }
            "copy" => {
                let v = get(&mut out, from()?)?;
                add(&mut out, path, v, false)?;
            }
            "test" => {
                let expected = value()?;
                // Like kube's patch library, a missing path tests equal to `null`
                // (kube-rs's finalizer helper relies on this when adding the first finalizer).
                let actual = get(&mut out, path).unwrap_or(Value::Null);
                if actual != expected {
                    return Err(JsonPatchError::Failed(format!(
                        "testing value {path} failed: test failed"
                    )));
                }
            }
            other => {
                return Err(JsonPatchError::Malformed(format!(
                    "unexpected operation {other:?}"
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_deletes_nulls_and_merges_objects() {
        let mut doc = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge_patch(&mut doc, &json!({"a": {"b": null, "e": 3}, "d": [2]}));
        assert_eq!(doc, json!({"a": {"c": 2, "e": 3}, "d": [2]}));
    }

    #[test]
    fn json_patch_test_failure_leaves_document_alone() {
        let doc = json!({"metadata": {"finalizers": ["x"]}});
        let p = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "y"}, {"op": "remove", "path": "/metadata/finalizers/0"}]);
        assert!(matches!(
            json_patch(&doc, &p),
            Err(JsonPatchError::Failed(_))
        ));
        let ok = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "x"}, {"op": "remove", "path": "/metadata/finalizers/0"}, {"op": "add", "path": "/metadata/finalizers/-", "value": "z"}]);
        assert_eq!(
            json_patch(&doc, &ok).unwrap(),
            json!({"metadata": {"finalizers": ["z"]}})
        );
    }
}
