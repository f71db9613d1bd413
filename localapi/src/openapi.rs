//! OpenAPI v3 documents (index and per group-version) carrying the CRD schemas, plus a minimal v2 document.

use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceDef};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn reverse_domain(group: &str) -> String {
    if group.is_empty() {
        return "io.k8s.api.core".into();
    }
    let mut parts: Vec<&str> = group.split('.').collect();
    parts.reverse();
    parts.join(".")
}

/// Component name of a kind, e.g. `dev.brighter.v1alpha1.BoxTable`.
pub fn component_name(d: &ResourceDef) -> String {
    format!("{}.{}.{}", reverse_domain(&d.group), d.version, d.kind)
}

fn gvk(d: &ResourceDef) -> Value {
    json!([{"group": d.group, "version": d.version, "kind": d.kind}])
}

fn object_meta() -> Value {
    let s = json!({"type": "string"});
    let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "type": "object",
        "properties": {
            "name": s, "generateName": s, "namespace": s, "uid": s, "resourceVersion": s,
            "generation": {"type": "integer", "format": "int64"}, "creationTimestamp": s, "deletionTimestamp": s,
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "labels": map, "annotations": map,
            "finalizers": {"type": "array", "items": s},
            "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "selfLink": s
        }
    })
}

fn kind_schema(d: &ResourceDef) -> Value {
    let mut schema = d
        .schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if let Some(m) = schema.as_object_mut() {
        let props = m.entry("properties").or_insert_with(|| json!({}));
        props["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."});
        props["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."});
        props["metadata"] = json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "description": "Standard object's metadata."});
        m.insert("x-kubernetes-group-version-kind".into(), gvk(d));
    }
    schema
}

fn op(d: &ResourceDef, action: &str, with_validation: bool) -> Value {
    let r = json!({"$ref": format!("#/components/schemas/{}", component_name(d))});
    let mut params = vec![json!({"name": "dryRun", "in": "query", "schema": {"type": "string"}})];
    if with_validation {
        params.push(json!({"name": "fieldManager", "in": "query", "schema": {"type": "string"}}));
        params
            .push(json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}));
    }
    json!({
        "operationId": format!("{action}{}", d.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": r}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": d.group, "version": d.version, "kind": d.kind}
    })
}

/// The per group-version document, if the group-version is served.
pub fn gv_document(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs = reg.in_group_version(group, version);
    if defs.is_empty() {
        return None;
    }
    let mut schemas = Map::new();
    schemas.insert(OBJECT_META.into(), object_meta());
    let mut paths = Map::new();
    for d in defs {
        schemas.insert(component_name(d), kind_schema(d));
        let base = format!("/{}", gv_path(group, version));
        let coll = if d.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", d.plural)
        } else {
            format!("{base}/{}", d.plural)
        };
        paths.insert(
            coll.clone(),
            json!({"get": op(d, "list", false), "post": op(d, "post", true)}),
        );
        paths.insert(format!("{coll}/{{name}}"), json!({
            "get": op(d, "get", false), "put": op(d, "put", true), "patch": op(d, "patch", true), "delete": op(d, "delete", false)
        }));
        if d.status_subresource {
            paths.insert(format!("{coll}/{{name}}/status"), json!({
                "get": op(d, "get", false), "put": op(d, "put", true), "patch": op(d, "patch", true)
            }));
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.31.0"},
        "paths": paths,
        "components": {"schemas": schemas}
    }))
}

/// A stable hash of a document, for `?hash=` in the index.
pub fn hash(doc: &Value) -> String {
    let s = doc.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// `/openapi/v3`: every served group-version with its URL.
pub fn index(reg: &Registry) -> Value {
    let mut gvs: Vec<(String, String)> = reg
        .all()
        .iter()
        .map(|d| (d.group.clone(), d.version.clone()))
        .collect();
    gvs.sort();
    gvs.dedup();
    let mut paths = Map::new();
    for (g, v) in gvs {
        if let Some(doc) = gv_document(reg, &g, &v) {
            let p = gv_path(&g, &v);
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", hash(&doc))}),
            );
        }
    }
    json!({"paths": paths})
}
