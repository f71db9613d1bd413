//! Server-side apply: conflicts with other managers, the merge of the applied configuration, and
//! removal of fields the manager no longer applies.

use serde_json::{Map, Value};

use super::{Scope, at, entry_mut, leaves, overlaps, parse, store};

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
    use serde_json::json;

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
