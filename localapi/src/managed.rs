//! `metadata.managedFields` bookkeeping and the server-side apply merge (an approximation, see README).
//!
//! Ownership is tracked per (manager, operation, subresource) as a set of leaf paths; lists are atomic.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A path of object keys from the root, e.g. `["spec", "table"]`.
pub type FieldPath = Vec<String>;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// "" or `status`.
    pub subresource: String,
    /// apiVersion the manager used.
    pub api_version: String,
    /// Last change time.
    pub time: String,
    /// Owned leaf paths.
    pub fields: BTreeSet<FieldPath>,
}

const SERVER_OWNED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// Which part of the object a request may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything (resource without a status subresource).
    All,
    /// Everything except `.status`.
    Main,
    /// Only `.status`.
    Status,
}

impl Scope {
    /// The `subresource` value of managedFields entries written in this scope.
    pub fn subresource(self) -> &'static str {
        if self == Scope::Status { "status" } else { "" }
    }

    fn admits(self, top: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Main => top != "status",
            Scope::Status => top == "status",
        }
    }
}

/// Leaf paths of an object within a scope (scalars, lists and empty objects are leaves).
pub fn leaves(obj: &Value, scope: Scope) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    if let Value::Object(m) = obj {
        for (k, v) in m {
            if k == "apiVersion" || k == "kind" || !scope.admits(k) {
                continue;
            }
            if k == "metadata" {
                if let Value::Object(meta) = v {
                    for (mk, mv) in meta
                        .iter()
                        .filter(|(mk, _)| !SERVER_OWNED_META.contains(&mk.as_str()))
                    {
                        walk(mv, vec![k.clone(), mk.clone()], &mut out);
                    }
                }
                continue;
            }
            walk(v, vec![k.clone()], &mut out);
        }
    }
    out
}

fn walk(v: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                let mut p = path.clone();
                p.push(k.clone());
                walk(c, p, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

/// The value at a path, if present.
pub fn at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.get(k))
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Leaf paths present in `new` whose value differs from `old` (what an Update manager takes ownership of).
pub fn changed(old: Option<&Value>, new: &Value, scope: Scope) -> BTreeSet<FieldPath> {
    leaves(new, scope)
        .into_iter()
        .filter(|p| old.and_then(|o| at(o, p)) != at(new, p))
        .collect()
}

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

fn entry_mut<'a>(
    entries: &'a mut Vec<Entry>,
    manager: &str,
    op: &str,
    sub: &str,
    api_version: &str,
    now: &str,
) -> &'a mut Entry {
    let pos = entries
        .iter()
        .position(|e| e.manager == manager && e.operation == op && e.subresource == sub);
    let idx = match pos {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: manager.into(),
                operation: op.into(),
                subresource: sub.into(),
                api_version: String::new(),
                time: String::new(),
                fields: BTreeSet::new(),
            });
            entries.len() - 1
        }
    };
    let e = &mut entries[idx];
    e.api_version = api_version.to_string();
    e.time = now.to_string();
    e
}

/// Records an Update-operation change: the manager takes the changed paths from everyone else.
pub fn record_update(
    entries: &mut Vec<Entry>,
    manager: &str,
    scope: Scope,
    api_version: &str,
    now: &str,
    changed: BTreeSet<FieldPath>,
) {
    if changed.is_empty() {
        return;
    }
    let sub = scope.subresource();
    for e in entries.iter_mut().filter(|e| e.subresource == sub) {
        e.fields.retain(|p| !changed.iter().any(|c| overlaps(p, c)));
    }
    entry_mut(entries, manager, "Update", sub, api_version, now)
        .fields
        .extend(changed);
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplyConflict {
    /// The other manager.
    pub manager: String,
    /// The contested path, rendered `.spec.table`.
    pub field: String,
}

/// Inputs of one server-side apply.
#[derive(Debug, Clone, Copy)]
pub struct ApplyRequest<'a> {
    /// The applied configuration.
    pub applied: &'a Value,
    /// Field manager.
    pub manager: &'a str,
    /// Main resource or status.
    pub scope: Scope,
    /// `?force=true`.
    pub force: bool,
    /// apiVersion of the request.
    pub api_version: &'a str,
    /// Timestamp for the entry.
    pub now: &'a str,
}

/// Merges an applied configuration into the live object, updating ownership and removing fields this
/// manager applied before but no longer applies (unless someone else owns them).
///
/// # Errors
/// The conflicts, when another manager owns a changed field and `force` is false.
pub fn apply(live: &Value, req: ApplyRequest<'_>) -> Result<Value, Vec<ApplyConflict>> {
    let mut entries = parse(live);
    let sub = req.scope.subresource();
    let applied_leaves = leaves(req.applied, req.scope);
    let mut conflicts = Vec::new();
    for p in &applied_leaves {
        if at(live, p) == at(req.applied, p) {
            continue;
        }
        for e in entries
            .iter()
            .filter(|e| e.subresource == sub && e.manager != req.manager)
        {
            if e.fields.iter().any(|f| overlaps(f, p)) {
                conflicts.push(ApplyConflict {
                    manager: e.manager.clone(),
                    field: format!(".{}", p.join(".")),
                });
            }
        }
    }
    if !conflicts.is_empty() && !req.force {
        return Err(conflicts);
    }
    for e in entries
        .iter_mut()
        .filter(|e| e.subresource == sub && e.manager != req.manager)
    {
        e.fields.retain(|f| {
            !applied_leaves
                .iter()
                .any(|p| overlaps(f, p) && at(live, p) != at(req.applied, p))
        });
    }
    let mut out = live.clone();
    let previous = entries
        .iter()
        .find(|e| e.manager == req.manager && e.operation == "Apply" && e.subresource == sub)
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for p in previous.difference(&applied_leaves) {
        let owned_elsewhere = entries.iter().any(|e| {
            e.subresource == sub
                && !(e.manager == req.manager && e.operation == "Apply")
                && e.fields.iter().any(|f| overlaps(f, p))
        });
        if !owned_elsewhere && !applied_leaves.iter().any(|a| a.starts_with(p)) {
            remove_path(&mut out, p);
        }
    }
    merge_applied(&mut out, req.applied);
    entry_mut(
        &mut entries,
        req.manager,
        "Apply",
        sub,
        req.api_version,
        req.now,
    )
    .fields = applied_leaves;
    store(&mut out, &entries);
    Ok(out)
}

fn remove_path(v: &mut Value, p: &[String]) {
    let Some((last, parent)) = p.split_last() else {
        return;
    };
    if let Some(Value::Object(m)) = parent.iter().try_fold(&mut *v, |c, k| c.get_mut(k)) {
        m.remove(last);
    }
    // Drop parents this removal left empty (they existed only to hold the removed field).
    let mut chain = parent.to_vec();
    while let Some(k) = chain.pop() {
        let Some(Value::Object(m)) = chain.iter().try_fold(&mut *v, |c, key| c.get_mut(key)) else {
            return;
        };
        if m.get(&k)
            .is_some_and(|c| c.as_object().is_some_and(Map::is_empty))
        {
            m.remove(&k);
        } else {
            return;
        }
    }
}

/// Merges an applied configuration: maps merge recursively, lists and scalars replace, `null` removes.
fn merge_applied(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                if v.is_null() {
                    t.remove(k);
                } else if let Some(slot) = t.get_mut(k).filter(|s| s.is_object() && v.is_object()) {
                    merge_applied(slot, v);
                } else {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(applied: &'a Value, manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            applied,
            manager,
            scope: Scope::Main,
            force,
            api_version: "v1",
            now: "t",
        }
    }

    #[test]
    fn apply_conflicts_with_another_manager_unless_forced() {
        let a = json!({"metadata": {"name": "x"}, "spec": {"table": "a"}});
        let live = apply(&json!({"metadata": {"name": "x"}}), req(&a, "one", false)).unwrap();
        let b = json!({"metadata": {"name": "x"}, "spec": {"table": "b"}});
        let err = apply(&live, req(&b, "two", false)).unwrap_err();
        assert_eq!(
            err,
            vec![ApplyConflict {
                manager: "one".into(),
                field: ".spec.table".into()
            }]
        );
        let forced = apply(&live, req(&b, "two", true)).unwrap();
        assert_eq!(forced["spec"]["table"], "b");
    }

    #[test]
    fn apply_removes_fields_the_manager_stopped_applying() {
        let a = json!({"metadata": {"name": "x"}, "spec": {"holder": {"pid": 1}, "keep": 1}});
        let live = apply(&json!({"metadata": {"name": "x"}}), req(&a, "one", false)).unwrap();
        let b = json!({"metadata": {"name": "x"}, "spec": {"keep": 2}});
        let out = apply(&live, req(&b, "one", false)).unwrap();
        assert_eq!(out["spec"], json!({"keep": 2}));
    }
}
