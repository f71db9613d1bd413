//! The `brighter.dev/cleanup` finalizer, carried only by `deletionPolicy: Drop` BoxTables: added
//! before the first pass changes anything (or when the policy becomes Drop), removed when the
//! policy becomes Retain or when a deletion is finished (the table dropped, provably gone, not
//! this BoxTable's). A Retain BoxTable has nothing to do on deletion, so it carries none, and
//! deleting it (or its namespace, or the CRD) never waits for the operator.
//!
//! kube's `finalizer` helper removes the finalizer whenever cleanup returns `Ok`, so a deletion
//! that must wait (a drop blocked for consent, a shutdown in the middle of a lock wait) would have
//! to be an error. Here cleanup says in so many words whether to release the object or keep it.
//! The patches are the same JSON patches the helper sends, guarded by a `test` operation so that a
//! concurrent change to the list fails instead of removing the wrong entry.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::crd::{BoxTable, DeletionPolicy, FINALIZER};

/// Whether `bt` needs the finalizer: its deletion has work to do (`deletionPolicy: Drop`).
pub fn needed(bt: &BoxTable) -> bool {
    bt.spec.deletion_policy == DeletionPolicy::Drop
}

/// Whether `bt` carries the finalizer.
pub fn has(bt: &BoxTable) -> bool {
    bt.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds the finalizer and returns the object as the server has it now.
///
/// # Errors
/// The API error of the patch.
pub async fn add(api: &Api<BoxTable>, bt: &BoxTable) -> Result<BoxTable, kube::Error> {
    let patch = if bt.meta().finalizers.is_none() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": bt.finalizers()},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ])
    };
    api.patch(&bt.name_any(), &PatchParams::default(), &json_patch(patch)?)
        .await
}

/// Removes the finalizer, letting the object go.
///
/// # Errors
/// The API error of the patch; an object already gone is success.
///
/// # Idempotency
/// An object without the finalizer, or already gone, is left as it is.
pub async fn remove(api: &Api<BoxTable>, bt: &BoxTable) -> Result<(), kube::Error> {
    let Some(index) = bt.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{index}");
    let patch = json!([
        {"op": "test", "path": path, "value": FINALIZER},
        {"op": "remove", "path": path},
    ]);
    match api
        .patch(&bt.name_any(), &PatchParams::default(), &json_patch(patch)?)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}

fn json_patch(value: serde_json::Value) -> Result<Patch<BoxTable>, kube::Error> {
    serde_json::from_value::<json_patch::Patch>(value)
        .map(Patch::Json)
        .map_err(kube::Error::SerdeError)
}
