//! Resource types the server knows: built-in kinds and those defined by CRDs.

use serde_json::{Value, json};

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column header, e.g. `Ready`.
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean or date.
    pub type_: String,
    /// Optional format (e.g. `name`).
    pub format: String,
    /// Description shown by `kubectl explain`-like tools.
    pub description: String,
    /// 0 = always shown, 1+ = only with `-o wide`.
    pub priority: i64,
    /// Simple JSONPath evaluated against the object.
    pub json_path: String,
}

/// Everything the server needs to serve one group/version/resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDef {
    /// API group, "" for core.
    pub group: String,
    /// Version, e.g. `v1alpha1`.
    pub version: String,
    /// Plural, e.g. `boxtables`.
    pub plural: String,
    /// Singular, e.g. `boxtable`.
    pub singular: String,
    /// Kind, e.g. `BoxTable`.
    pub kind: String,
    /// Short names, e.g. `bt`.
    pub short_names: Vec<String>,
    /// Categories, e.g. `all`.
    pub categories: Vec<String>,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether `/status` is a separate subresource.
    pub status_subresource: bool,
    /// Printer columns (CRDs only).
    pub printer_columns: Vec<PrinterColumn>,
    /// The version's `openAPIV3Schema` (CRDs only).
    pub schema: Option<Value>,
    /// True for CRD-defined kinds (generation tracking, merge-patch only, resourceVersion required on PUT).
    pub custom: bool,
}

impl ResourceDef {
    /// `group/version` or `v1` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether a PUT must carry `metadata.resourceVersion` (kube refuses an unconditional update
    /// of custom resources, CRDs and Leases with 422; Secrets, ConfigMaps, Namespaces and Events
    /// allow it).
    pub fn requires_resource_version_on_update(&self) -> bool {
        self.custom
            || self.plural == "customresourcedefinitions"
            || (self.group == "coordination.k8s.io" && self.plural == "leases")
    }

    /// Key of the storage bucket: group and plural (versions share storage).
    pub fn storage_key(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }

    /// Verbs served for the main resource.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        short: &[&str],
    ) -> Self {
        Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            kind: kind.to_string(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: Vec::new(),
            namespaced,
            status_subresource: false,
            printer_columns: Vec::new(),
            schema: None,
            custom: false,
        }
    }
}

/// The built-in kinds: core Secrets, ConfigMaps, Namespaces, events.k8s.io Events, coordination Leases, CRDs.
pub fn builtins() -> Vec<ResourceDef> {
    let mut ns = ResourceDef::builtin("", "v1", "namespaces", "Namespace", false, &["ns"]);
    ns.status_subresource = true;
    vec![
        ns,
        ResourceDef::builtin("", "v1", "secrets", "Secret", true, &[]),
        ResourceDef::builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"]),
        ResourceDef::builtin("", "v1", "events", "Event", true, &["ev"]),
        ResourceDef::builtin("events.k8s.io", "v1", "events", "Event", true, &["ev"]),
        ResourceDef::builtin("coordination.k8s.io", "v1", "leases", "Lease", true, &[]),
        crd_def(),
    ]
}

/// The `apiextensions.k8s.io/v1 CustomResourceDefinition` resource itself.
pub fn crd_def() -> ResourceDef {
    let mut d = ResourceDef::builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
    );
    d.status_subresource = true;
    d
}

/// Reads the served versions of a CRD object into resource definitions.
///
/// # Errors
/// A message naming the missing field when the CRD is malformed.
pub fn from_crd(crd: &Value) -> Result<Vec<ResourceDef>, String> {
    let spec = crd.get("spec").ok_or("crd has no spec")?;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let strs = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let group = s(spec, "group").ok_or("crd spec.group is missing")?;
    let names = spec.get("names").ok_or("crd spec.names is missing")?;
    let plural = s(names, "plural").ok_or("crd spec.names.plural is missing")?;
    let kind = s(names, "kind").ok_or("crd spec.names.kind is missing")?;
    let singular = s(names, "singular").unwrap_or_else(|| kind.to_lowercase());
    let namespaced = s(spec, "scope").as_deref() != Some("Cluster");
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("crd spec.versions is missing")?;
    let mut out = Vec::new();
    for v in versions {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let version = s(v, "name").ok_or("crd version has no name")?;
        let printer_columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: s(c, "name").unwrap_or_default(),
                        type_: s(c, "type").unwrap_or_else(|| "string".into()),
                        format: s(c, "format").unwrap_or_default(),
                        description: s(c, "description").unwrap_or_default(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        json_path: s(c, "jsonPath").unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(ResourceDef {
            group: group.clone(),
            version,
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            short_names: strs(names.get("shortNames")),
            categories: strs(names.get("categories")),
            namespaced,
            status_subresource: v.pointer("/subresources/status").is_some(),
            printer_columns,
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
            custom: true,
        });
    }
    if out.is_empty() {
        return Err("crd serves no versions".into());
    }
    Ok(out)
}

/// The status a real apiserver writes on an accepted CRD.
pub fn crd_status(crd: &Value, now: &str) -> Value {
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    json!({
        "acceptedNames": names,
        "storedVersions": crd.pointer("/spec/versions").and_then(Value::as_array)
            .map(|vs| vs.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned()).collect::<Vec<_>>())
            .unwrap_or_default(),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
        ]
    })
}

/// The set of served resources.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    defs: Vec<ResourceDef>,
}

impl Registry {
    /// A registry holding the built-in kinds.
    pub fn new() -> Self {
        Self { defs: builtins() }
    }

    /// All definitions.
    pub fn all(&self) -> &[ResourceDef] {
        &self.defs
    }

    /// Replaces every version of a CRD's group/plural with the given definitions.
    pub fn install(&mut self, defs: Vec<ResourceDef>) {
        for d in &defs {
            self.defs
                .retain(|x| !(x.group == d.group && x.plural == d.plural));
        }
        self.defs.extend(defs);
    }

    /// Removes a CRD-defined group/plural.
    pub fn uninstall(&mut self, group: &str, plural: &str) {
        self.defs
            .retain(|x| !(x.custom && x.group == group && x.plural == plural));
    }

    /// Looks up a resource by group, version and plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
    }

    /// Sorted distinct API groups (excluding core) with their versions.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for d in self.defs.iter().filter(|d| !d.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, vs)) if !vs.contains(&d.version) => vs.push(d.version.clone()),
                Some(_) => {}
                None => out.push((d.group.clone(), vec![d.version.clone()])),
            }
        }
        out.sort();
        out
    }

    /// Definitions served under one group/version.
    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<&ResourceDef> {
        self.defs
            .iter()
            .filter(|d| d.group == group && d.version == version)
            .collect()
    }
}
