//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<g>`, `/apis/<g>/<v>`.

use serde_json::{Value, json};

use crate::registry::{Registry, ResourceDef};

/// The Kubernetes version this server reports (kubectl's dispatcher picks its client from it).
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "31", "gitVersion": "v1.31.0",
        "gitCommit": "9e18483918821121abdf9aa82bc14d66df5d68cd", "gitTreeState": "clean",
        "buildDate": "2024-08-13T07:28:49Z", "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn core_versions(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if the group exists.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    reg.groups().iter().find(|(g, _)| g == name).map(|(g, vs)| {
        let mut e = group_entry(g, vs);
        e["kind"] = json!("APIGroup");
        e["apiVersion"] = json!("v1");
        e
    })
}

fn resource_entries(d: &ResourceDef) -> Vec<Value> {
    let mut main = json!({
        "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced, "kind": d.kind,
        "verbs": d.verbs(),
    });
    if !d.short_names.is_empty() {
        main["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        main["categories"] = json!(d.categories);
    }
    let mut out = vec![main];
    if d.status_subresource {
        out.push(json!({"name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced,
            "kind": d.kind, "verbs": ["get", "patch", "update"]}));
    }
    out
}

/// `/api/v1` or `/apis/<g>/<v>`, if served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs = reg.in_group_version(group, version);
    if defs.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = defs.iter().flat_map(|d| resource_entries(d)).collect();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
