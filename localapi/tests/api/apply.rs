#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn server_side_apply_creates_tracks_managers_and_reports_conflicts() {
    let h = server().await;
    let api = Api::new(&h);
    let path = format!("{BT}/orders");
    let no_manager = api.apply(&path, &boxtable("orders").build()).await;
    assert_eq!(no_manager.status, 422);
    let created = api
        .apply(
            &format!("{path}?fieldManager=gitops"),
            &boxtable("orders").table("A").build(),
        )
        .await;
    assert_eq!(created.status, 201);
    let mf = &created.json()["metadata"]["managedFields"][0];
    assert_eq!(
        (mf["manager"].as_str(), mf["operation"].as_str()),
        (Some("gitops"), Some("Apply"))
    );
    assert!(mf["fieldsV1"]["f:spec"]["f:table"].is_object());

    let other = api
        .apply(
            &format!("{path}?fieldManager=someone"),
            &boxtable("orders").table("B").build(),
        )
        .await;
    assert_eq!(other.status, 409);
    let msg = other.json()["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("conflict with \"gitops\"") && msg.contains(".spec.table"),
        "{msg}"
    );
    let forced = api
        .apply(
            &format!("{path}?fieldManager=someone&force=true"),
            &boxtable("orders").table("B").build(),
        )
        .await;
    assert_eq!(forced.status, 200);
    assert_eq!(forced.json()["spec"]["table"], "B");
}

#[tokio::test]
async fn status_apply_replaces_the_managers_fields_and_drops_what_it_no_longer_sets() {
    let h = server().await;
    let api = Api::new(&h);
    api.post(BT, &boxtable("orders").build()).await;
    let status_path = format!("{BT}/orders/status?fieldManager=boxtable-operator&force=true");
    let first = json!({"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable", "metadata": {"name": "orders"},
        "status": {"appliedVersion": 1, "lock": {"state": "Waiting", "holder": {"pid": 42}}}});
    let r = api.apply(&status_path, &first).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let obj = r.json();
    assert_eq!(obj["status"]["lock"]["holder"]["pid"], 42);
    assert_eq!(
        obj["status"]["observedGeneration"], -1,
        "status defaults apply"
    );
    let entry = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "boxtable-operator")
        .unwrap()
        .clone();
    assert_eq!(entry["subresource"], "status");
    let second = json!({"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable", "metadata": {"name": "orders"},
        "status": {"appliedVersion": 8, "lock": {"state": "Released"}}});
    let obj = api.apply(&status_path, &second).await.json();
    assert_eq!(obj["status"]["lock"], json!({"state": "Released"}));
    assert_eq!(obj["metadata"]["generation"], 1);
    let missing = api
        .apply(&format!("{BT}/ghost/status?fieldManager=x"), &second)
        .await;
    assert_eq!(missing.status, 404);
}
