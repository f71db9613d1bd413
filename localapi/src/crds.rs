//! CustomResourceDefinitions: loading from YAML, registering served kinds, and CRD lifecycle hooks.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::managed::Scope;
use crate::meta;
use crate::registry::{self, ResourceDef};
use crate::store::{EventType, State};
use crate::write::{self, FieldValidation, Owner, WriteCtx};

/// Registers a stored CRD's versions and marks it Established (one MODIFIED event, like kube).
pub fn on_write(state: &mut State, crd: &Value) {
    match registry::from_crd(crd) {
        Ok(defs) => state.registry.install(defs),
        Err(e) => {
            tracing::warn!(error = e, "stored CRD could not be registered");
            return;
        }
    }
    let status = registry::crd_status(crd, &meta::now());
    let had = crd.pointer("/status/conditions").is_some();
    if had {
        return;
    }
    let mut obj = crd.clone();
    obj["status"] = status;
    let rv = state.next_rv();
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
    let name = meta::meta_str(crd, "name").unwrap_or_default().to_string();
    state.commit(
        &registry::crd_def().storage_key(),
        (String::new(), name),
        EventType::Modified,
        obj,
        Some(crd.clone()),
        rv,
    );
}

/// Unregisters a deleted CRD and drops its objects.
pub fn on_delete(state: &mut State, def: &ResourceDef, crd: &Value) {
    if def.plural != "customresourcedefinitions"
        || crd.pointer("/metadata/deletionTimestamp").is_some()
    {
        return;
    }
    if let (Some(group), Some(plural)) = (
        crd.pointer("/spec/group").and_then(Value::as_str),
        crd.pointer("/spec/names/plural").and_then(Value::as_str),
    ) {
        state.registry.uninstall(group, plural);
        state
            .objects
            .remove(&(group.to_string(), plural.to_string()));
    }
}

/// Creates every CRD found in a (multi-document) YAML string.
///
/// # Errors
/// A message for unparsable YAML, a document that is not a CRD, or a CRD the server refuses.
pub fn load_yaml(state: &mut State, yaml: &str) -> Result<usize, String> {
    let mut n = 0;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| format!("invalid CRD YAML: {e}"))?;
    for v in docs {
        if v.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
            return Err("document is not a CustomResourceDefinition".into());
        }
        registry::from_crd(&v)?;
        let def = registry::crd_def();
        let ctx = WriteCtx {
            def: &def,
            scope: Scope::Main,
            owner: Owner::Update("localapi".into()),
            dry_run: false,
            validation: FieldValidation::Ignore,
        };
        let w = write::create(state, &ctx, None, v).map_err(|e: ApiError| e.message)?;
        on_write(state, &w.object);
        n += 1;
    }
    Ok(n)
}
