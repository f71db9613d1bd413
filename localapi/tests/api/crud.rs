#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn create_get_list_and_update_with_a_stale_resource_version_conflicts() {
    let h = server().await;
    let api = Api::new(&h);
    let created = api
        .post(BT, &boxtable("orders").table("Orders").build())
        .await;
    assert_eq!(created.status, 201);
    let obj = created.json();
    assert_eq!(obj["metadata"]["generation"], 1);
    assert!(
        obj["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    let again = api.post(BT, &boxtable("orders").build()).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.json()["reason"], "AlreadyExists");

    let got = api.get(&format!("{BT}/orders")).await.json();
    assert_eq!(got["spec"]["table"], "Orders");
    let missing = api.get(&format!("{BT}/nope")).await;
    assert_eq!(missing.status, 404);
    let status = missing.json();
    assert_eq!(
        (
            status["kind"].as_str(),
            status["reason"].as_str(),
            status["code"].as_i64()
        ),
        (Some("Status"), Some("NotFound"), Some(404))
    );
    assert_eq!(
        status["message"],
        "boxtables.brighter.dev \"nope\" not found"
    );

    let mut stale = got.clone();
    stale["spec"]["table"] = json!("Second");
    assert_eq!(api.put(&format!("{BT}/orders"), &stale).await.status, 200);
    stale["spec"]["table"] = json!("Third");
    let conflict = api.put(&format!("{BT}/orders"), &stale).await;
    assert_eq!(conflict.status, 409);
    assert_eq!(conflict.json()["reason"], "Conflict");

    assert_eq!(
        api.post(BT, &boxtable("payments").label("app", "pay").build())
            .await
            .status,
        201
    );
    let all = api.get(BT).await.json();
    assert_eq!(all["kind"], "BoxTableList");
    assert_eq!(all["items"].as_array().unwrap().len(), 2);
    let by_label = api
        .get(&format!("{BT}?labelSelector=app%3Dpay"))
        .await
        .json();
    assert_eq!(by_label["items"][0]["metadata"]["name"], "payments");
    let by_field = api
        .get(&format!("{BT}?fieldSelector=metadata.name%3Dorders"))
        .await
        .json();
    assert_eq!(by_field["items"].as_array().unwrap().len(), 1);
    let page = api.get(&format!("{BT}?limit=1")).await.json();
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    let next = api
        .get(&format!(
            "{BT}?limit=1&continue={}",
            token.replace('|', "%7C")
        ))
        .await
        .json();
    assert_eq!(next["items"][0]["metadata"]["name"], "payments");
    assert!(next["metadata"].get("continue").is_none());
}

#[tokio::test]
async fn generation_moves_only_with_spec_changes_and_status_is_isolated() {
    let h = server().await;
    let api = Api::new(&h);
    let mut body = boxtable("orders").build();
    body["status"] = json!({"appliedVersion": 3});
    let created = api.post(BT, &body).await.json();
    assert!(
        created
            .get("status")
            .is_none_or(|s| s.get("appliedVersion").is_none()),
        "status ignored on create"
    );

    let labelled = api
        .merge(
            &format!("{BT}/orders"),
            &json!({"metadata": {"labels": {"a": "b"}}, "status": {"appliedVersion": 5}}),
        )
        .await
        .json();
    assert_eq!(
        labelled["metadata"]["generation"], 1,
        "metadata changes keep generation"
    );
    assert!(
        labelled["status"].get("appliedVersion").is_none(),
        "main resource ignores status"
    );

    let status = api
        .merge(
            &format!("{BT}/orders/status"),
            &json!({"status": {"appliedVersion": 8}, "spec": {"table": "Ignored"}}),
        )
        .await
        .json();
    assert_eq!(status["status"]["appliedVersion"], 8);
    assert_eq!(
        status["metadata"]["generation"], 1,
        "status writes keep generation"
    );
    assert!(
        status["spec"].get("table").is_none(),
        "status subresource ignores spec"
    );

    let spec = api
        .merge(
            &format!("{BT}/orders"),
            &json!({"spec": {"table": "Orders"}}),
        )
        .await
        .json();
    assert_eq!(spec["metadata"]["generation"], 2);
    assert_eq!(spec["status"]["appliedVersion"], 8);

    let rv_before = spec["metadata"]["resourceVersion"].clone();
    let noop = api
        .merge(
            &format!("{BT}/orders"),
            &json!({"spec": {"table": "Orders"}}),
        )
        .await
        .json();
    assert_eq!(
        noop["metadata"]["resourceVersion"], rv_before,
        "a no-op write keeps the resourceVersion"
    );
}

#[tokio::test]
async fn json_patch_with_failing_test_is_refused_and_changes_nothing() {
    let h = server().await;
    let api = Api::new(&h);
    api.post(
        BT,
        &boxtable("orders").finalizer("brighter.dev/cleanup").build(),
    )
    .await;
    let path = format!("{BT}/orders");
    let refused = api
        .json_patch(&path, &json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "other"}, {"op": "remove", "path": "/metadata/finalizers/0"}]))
        .await;
    assert_eq!(refused.status, 422);
    assert_eq!(refused.json()["kind"], "Status");
    assert_eq!(
        api.get(&path).await.json()["metadata"]["finalizers"][0],
        "brighter.dev/cleanup"
    );
    let ok = api
        .json_patch(&path, &json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "brighter.dev/cleanup"}, {"op": "add", "path": "/spec/table", "value": "T"}]))
        .await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.json()["spec"]["table"], "T");
    let smp = api
        .send(
            "PATCH",
            &path,
            "application/strategic-merge-patch+json",
            &json!({"spec": {}}),
        )
        .await;
    assert_eq!(
        smp.status, 415,
        "kube refuses strategic merge patch on custom resources"
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed_then_watchers_see_deleted() {
    let h = server().await;
    let api = Api::new(&h);
    let created = api
        .post(
            BT,
            &boxtable("orders").finalizer("brighter.dev/cleanup").build(),
        )
        .await
        .json();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = api
        .watch(&format!("{BT}?watch=1&resourceVersion={rv}"))
        .await;
    let path = format!("{BT}/orders");
    let deleting = api.delete(&path).await;
    assert_eq!(deleting.status, 200);
    let obj = deleting.json();
    assert!(obj["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(obj["metadata"]["generation"], 2);
    assert_eq!(
        api.get(&path).await.status,
        200,
        "still there while finalizers remain"
    );
    let modified = w.next_change().await.unwrap();
    assert_eq!(modified["type"], "MODIFIED");
    let adding = api
        .merge(
            &path,
            &json!({"metadata": {"finalizers": ["brighter.dev/cleanup", "other"]}}),
        )
        .await;
    assert_eq!(adding.status, 422, "no new finalizers while deleting");
    let removed = api
        .json_patch(
            &path,
            &json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
        )
        .await;
    assert_eq!(removed.status, 200);
    assert_eq!(w.next_change().await.unwrap()["type"], "DELETED");
    assert_eq!(api.get(&path).await.status, 404);
}

#[tokio::test]
async fn namespaces_must_exist_and_built_in_kinds_work() {
    let h = server().await;
    let api = Api::new(&h);
    let missing = api
        .post(
            "/apis/brighter.dev/v1alpha1/namespaces/shop/boxtables",
            &boxtable("a").build(),
        )
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        api.post("/api/v1/namespaces", &json!({"metadata": {"name": "shop"}}))
            .await
            .status,
        201
    );
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-db"}, "stringData": {"connectionString": "x"}});
    assert_eq!(
        api.post("/api/v1/namespaces/shop/secrets", &secret)
            .await
            .status,
        201
    );
    let stored = api
        .get("/api/v1/namespaces/shop/secrets/shop-db")
        .await
        .json();
    assert_eq!(stored["metadata"]["namespace"], "shop");
    assert_eq!(
        stored["data"]["connectionString"], "eA==",
        "stringData is folded into base64 data"
    );
    let lease = json!({"metadata": {"generateName": "leader-"}, "spec": {"holderIdentity": "a"}});
    let created = api
        .post(
            "/apis/coordination.k8s.io/v1/namespaces/shop/leases",
            &lease,
        )
        .await
        .json();
    assert!(
        created["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("leader-")
    );
    let event = json!({"metadata": {"name": "e1"}, "reason": "Migrated", "action": "Migrate", "reportingController": "x", "reportingInstance": "y", "eventTime": "2026-11-30T00:00:00.000000Z"});
    assert_eq!(
        api.post("/apis/events.k8s.io/v1/namespaces/shop/events", &event)
            .await
            .status,
        201
    );
}
