//! The `metadata.managedFields` wire format: reading entries and their `fieldsV1` trees, and
//! writing them back.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::{Entry, FieldPath};

/// Reads `metadata.managedFields`.
pub fn parse(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .map(|e| {
            let s = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let mut fields = BTreeSet::new();
            if let Some(f) = e.get("fieldsV1") {
                parse_fields(f, Vec::new(), &mut fields);
            }
            Entry {
                manager: s("manager"),
                operation: s("operation"),
                subresource: s("subresource"),
                api_version: s("apiVersion"),
                time: s("time"),
                fields,
            }
        })
        .collect()
}

fn parse_fields(v: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Value::Object(m) = v else { return };
    let children: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| k.starts_with("f:")).collect();
    if (children.is_empty() || m.contains_key(".")) && !path.is_empty() {
        out.insert(path.clone());
    }
    for (k, c) in children {
        let mut p = path.clone();
        p.push(k[2..].to_string());
        parse_fields(c, p, out);
    }
}

fn fields_v1(fields: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for p in fields {
        let mut cur = &mut root;
        for k in p {
            let next = cur.entry(format!("f:{k}")).or_insert_with(|| json!({}));
            let Value::Object(m) = next else { break };
            cur = m;
        }
    }
    Value::Object(root)
}

/// Writes entries back as `metadata.managedFields` (entries owning nothing are dropped, like kube).
pub fn store(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({"manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&e.fields)});
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}
