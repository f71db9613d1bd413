//! What one BoxTable costs in the controller's watch cache, in heap bytes and allocations.
//!
//! The cache holds every BoxTable in scope, so at 10,000 objects each byte here is 10 kB of the
//! operator's resident set. Each case parses the same JSON a thousand times, as the API server
//! sends a Ready BoxTable (field ownership included), through the watch's own path (read without
//! field ownership, pruned, kept behind an `Arc` as the store keeps it), and as the baseline
//! through a plain `BoxTable` parse that keeps everything. The heap is counted by `dhat`, exactly
//! (requested bytes; the allocator adds its own header and rounding to each allocation).
//!
//! `cargo bench --bench cache_footprint`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use boxtable_operator::controller::cache::{LAST_APPLIED, prune};
use boxtable_operator::controller::lean::LeanBoxTable;
use boxtable_operator::crd::BoxTable;
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const COPIES: usize = 1000;

/// A BoxTable as the API server returns it once the operator has migrated its table: the status
/// the operator writes for a fresh outbox, and the field ownership of its creator and of the
/// operator's status apply.
fn ready_boxtable() -> Value {
    let time = "2026-12-07T05:11:28Z";
    let condition = |type_: &str, status: &str, message: &str| {
        json!({"type": type_, "status": status, "observedGeneration": 1, "lastTransitionTime": time,
               "reason": "Migrated", "message": message})
    };
    let done = "s0870.t02 is at version 8 (created at version 8 in 32 ms)";
    json!({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "metadata": {
            "name": "s0870-t02", "namespace": "bench", "uid": "6f1c0d2e-8b1a-4c5e-9d7f-3a2b1c0d9e8f",
            "resourceVersion": "1234567", "generation": 1, "creationTimestamp": time,
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "brighter.dev/v1alpha1",
                 "time": time, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {".": {}, "f:box": {}, "f:database": {".": {}, "f:secretRef": {".": {}, "f:name": {}}},
                              "f:schema": {}, "f:table": {}}}},
                {"manager": "boxtable-operator", "operation": "Apply", "apiVersion": "brighter.dev/v1alpha1",
                 "time": time, "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:appliedVersion": {}, "f:observedGeneration": {}, "f:table": {}, "f:targetVersion": {},
                     "f:lastRun": {"f:durationMilliseconds": {}, "f:fromVersion": {}, "f:path": {}, "f:startTime": {}, "f:toVersion": {}},
                     "f:lock": {"f:attempts": {}, "f:key": {}, "f:keyHex": {}, "f:lastAcquiredTime": {}, "f:lastReleasedTime": {},
                                "f:lockKey": {}, "f:pgLocks": {"f:classid": {}, "f:objid": {}, "f:objsubid": {}}, "f:state": {},
                                "f:timeoutSeconds": {}, "f:waitedMilliseconds": {}},
                     "f:conditions": {
                         "k:{\"type\":\"Drifted\"}": {".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:observedGeneration": {}, "f:reason": {}, "f:status": {}, "f:type": {}},
                         "k:{\"type\":\"Ready\"}": {".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:observedGeneration": {}, "f:reason": {}, "f:status": {}, "f:type": {}},
                         "k:{\"type\":\"Reconciling\"}": {".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:observedGeneration": {}, "f:reason": {}, "f:status": {}, "f:type": {}},
                         "k:{\"type\":\"Stalled\"}": {".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:observedGeneration": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}}}}
            ]
        },
        "spec": {"box": "Outbox", "table": "t02", "schema": "s0870", "payload": "Text", "historyScope": "Global",
                 "database": {"secretRef": {"name": "db-0870"}}, "lock": {"timeout": "30s"},
                 "deletionPolicy": "Retain", "suspend": false},
        "status": {
            "observedGeneration": 1, "table": "s0870.t02", "appliedVersion": 8, "targetVersion": 8,
            "lock": {"lockKey": "BrighterMigration_s0870.t02", "key": "-5469556670739463647", "keyHex": "b4183b2fd9b4c221",
                     "pgLocks": {"classid": 3_021_486_895_u32, "objid": 3_652_502_049_u32, "objsubid": 1}, "state": "Released",
                     "attempts": 1, "waitedMilliseconds": 0, "timeoutSeconds": 30.0,
                     "lastAcquiredTime": time, "lastReleasedTime": time},
            "lastRun": {"path": "Fresh", "fromVersion": 0, "toVersion": 8, "startTime": time, "durationMilliseconds": 32},
            "conditions": [
                condition("Ready", "True", done),
                condition("Reconciling", "False", &format!("done: {done}")),
                condition("Stalled", "False", &format!("done: {done}")),
                condition("Drifted", "False", "s0870.t02 matches the shape of version 8"),
            ]
        }
    })
}

/// The same object applied with client-side `kubectl apply`: its spec again in the last-applied
/// annotation.
fn kubectl_applied_boxtable() -> Value {
    let mut object = ready_boxtable();
    let last_applied = json!({
        "apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable",
        "metadata": {"name": "s0870-t02", "namespace": "bench", "annotations": {}},
        "spec": object["spec"].clone(),
    });
    object["metadata"]["annotations"] = json!({LAST_APPLIED: last_applied.to_string()});
    object
}

/// The heap bytes and allocations one result of `parse` holds, from `text` parsed `COPIES` times
/// (the `Vec` that keeps the results is left out).
fn per_copy<T>(text: &str, parse: impl Fn(&str) -> T) -> (usize, usize) {
    let before = dhat::HeapStats::get();
    let kept: Vec<T> = (0..COPIES).map(|_| parse(text)).collect();
    let after = dhat::HeapStats::get();
    let slots = kept.capacity() * std::mem::size_of::<T>();
    drop(kept);
    (
        (after.curr_bytes - before.curr_bytes - slots) / COPIES,
        (after.curr_blocks - before.curr_blocks - 1) / COPIES,
    )
}

/// The watch's path: read without field ownership, pruned, behind an `Arc` as in the store.
fn cached(text: &str) -> Arc<BoxTable> {
    let lean: LeanBoxTable = serde_json::from_str(text).unwrap();
    let mut object = BoxTable::from(lean);
    prune(&mut object);
    Arc::new(object)
}

/// The baseline: kube's own type, everything kept, behind an `Arc`.
fn plain(text: &str) -> Arc<BoxTable> {
    Arc::new(serde_json::from_str(text).unwrap())
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    println!(
        "one cached BoxTable (heap bytes as requested; {COPIES} copies each; the struct itself is {} bytes of it)",
        std::mem::size_of::<BoxTable>()
    );
    println!(
        "{:<34} {:>14} {:>12} {:>16} {:>12} {:>8}",
        "object", "cached bytes", "allocations", "baseline bytes", "allocations", "ratio"
    );
    for (name, object) in [
        ("Ready, created by POST", ready_boxtable()),
        ("Ready, applied by kubectl", kubectl_applied_boxtable()),
    ] {
        let text = object.to_string();
        let (bytes, blocks) = per_copy(&text, cached);
        let (base_bytes, base_blocks) = per_copy(&text, plain);
        println!(
            "{name:<34} {bytes:>14} {blocks:>12} {base_bytes:>16} {base_blocks:>12} {:>7.2}x",
            bytes as f64 / base_bytes as f64
        );
    }
}
