//! BoxTables as the controller reads them from the API server: every field but
//! `metadata.managedFields`, which is skipped while the JSON is parsed instead of being built and
//! then dropped.
//!
//! Server-side apply's field ownership is the largest part of a BoxTable on the wire once the
//! operator has written its status (the status field set names every condition and lock field),
//! and `k8s-openapi` parses it into a tree of JSON maps. No pass reads it, so the watch (its
//! initial list, a page of objects at a time, and every event), the re-read under the lock and
//! the answer to each status write use [`LeanBoxTable`], which keeps everything else and turns
//! into a [`BoxTable`] without copying.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::Deserialize;

use crate::crd::{BoxTable, BoxTableSpec, BoxTableStatus};

/// A BoxTable read without its field-ownership records (see the module's documentation).
#[derive(Deserialize, Clone, Debug)]
pub struct LeanBoxTable {
    #[serde(deserialize_with = "metadata_without_field_ownership")]
    metadata: ObjectMeta,
    spec: BoxTableSpec,
    #[serde(default)]
    status: Option<BoxTableStatus>,
}

impl From<LeanBoxTable> for BoxTable {
    fn from(lean: LeanBoxTable) -> Self {
        BoxTable {
            metadata: lean.metadata,
            spec: lean.spec,
            status: lean.status,
        }
    }
}

impl Resource for LeanBoxTable {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        BoxTable::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        BoxTable::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        BoxTable::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        BoxTable::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        BoxTable::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// `ObjectMeta` as the API server sends it, less `managedFields`: serde skips a field the struct
/// does not name without allocating anything for it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

fn metadata_without_field_ownership<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    let wire = WireMeta::deserialize(deserializer)?;
    // Every field named, none defaulted: a field a later `k8s-openapi` adds to `ObjectMeta`
    // fails the build here instead of being dropped unseen.
    Ok(ObjectMeta {
        annotations: wire.annotations,
        creation_timestamp: wire.creation_timestamp,
        deletion_grace_period_seconds: wire.deletion_grace_period_seconds,
        deletion_timestamp: wire.deletion_timestamp,
        finalizers: wire.finalizers,
        generate_name: wire.generate_name,
        generation: wire.generation,
        labels: wire.labels,
        managed_fields: None,
        name: wire.name,
        namespace: wire.namespace,
        owner_references: wire.owner_references,
        resource_version: wire.resource_version,
        self_link: wire.self_link,
        uid: wire.uid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BoxTable as the API server sends one after a status write: every metadata field set,
    /// two field managers, a status.
    fn full_object() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "brighter.dev/v1alpha1",
            "kind": "BoxTable",
            "metadata": {
                "annotations": {"brighter.dev/keep": "yes"},
                "creationTimestamp": "2026-12-04T10:00:00Z",
                "deletionGracePeriodSeconds": 0,
                "deletionTimestamp": "2026-12-04T11:00:00Z",
                "finalizers": ["brighter.dev/cleanup"],
                "generateName": "orders-",
                "generation": 3,
                "labels": {"app": "shop"},
                "managedFields": [
                    {"apiVersion": "brighter.dev/v1alpha1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:box": {}, "f:database": {"f:secretRef": {"f:name": {}}}}},
                     "manager": "kubectl", "operation": "Update", "time": "2026-12-04T10:00:00Z"},
                    {"apiVersion": "brighter.dev/v1alpha1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}}}},
                     "manager": "boxtable-operator", "operation": "Apply", "subresource": "status",
                     "time": "2026-12-04T10:00:01Z"}
                ],
                "name": "orders",
                "namespace": "shop",
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-1"}],
                "resourceVersion": "42",
                "selfLink": "/apis/brighter.dev/v1alpha1/namespaces/shop/boxtables/orders",
                "uid": "6b3c2f8e-0000-4000-8000-000000000001"
            },
            "spec": {"box": "Outbox", "database": {"secretRef": {"name": "shop-db"}}},
            "status": {"observedGeneration": 3, "table": "public.orders", "appliedVersion": 8,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Migrated",
                                       "message": "up to date", "lastTransitionTime": "2026-12-04T10:00:01Z",
                                       "observedGeneration": 3}]}
        })
    }

    #[test]
    fn a_lean_read_is_the_full_object_without_its_field_ownership() {
        let wire = full_object();
        let mut full: BoxTable = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(
            full.metadata.managed_fields.as_ref().map(Vec::len),
            Some(2),
            "the fixture carries field ownership"
        );
        let lean: LeanBoxTable = serde_json::from_value(wire).unwrap();
        let lean = BoxTable::from(lean);

        assert!(lean.metadata.managed_fields.is_none());
        full.metadata.managed_fields = None;
        assert_eq!(
            lean, full,
            "every other field is kept as the full read has it"
        );
    }

    #[test]
    fn an_object_without_status_or_optional_metadata_reads_too() {
        let wire = serde_json::json!({
            "apiVersion": "brighter.dev/v1alpha1",
            "kind": "BoxTable",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"box": "Inbox", "database": {"secretRef": {"name": "shop-db"}}}
        });
        let full: BoxTable = serde_json::from_value(wire.clone()).unwrap();
        let lean = BoxTable::from(serde_json::from_value::<LeanBoxTable>(wire).unwrap());
        assert_eq!(lean, full);
        assert_eq!(
            lean.metadata,
            ObjectMeta {
                name: Some("orders".to_owned()),
                namespace: Some("shop".to_owned()),
                ..ObjectMeta::default()
            }
        );
    }
}
