#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use serde_json::Value;

use crate::common::*;

#[tokio::test]
async fn discovery_lists_core_groups_and_the_crd_with_status_subresource() {
    let h = server().await;
    let api = Api::new(&h);
    assert_eq!(api.get("/version").await.json()["gitVersion"], "v1.31.0");
    assert_eq!(api.get("/api").await.json()["versions"][0], "v1");
    let groups = api.get("/apis").await.json();
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for g in [
        "brighter.dev",
        "events.k8s.io",
        "coordination.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(names.contains(&g), "{g} missing from {names:?}");
    }
    let core = api.get("/api/v1").await.json();
    assert!(
        core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "secrets" && r["namespaced"] == true)
    );
    let list = api.get("/apis/brighter.dev/v1alpha1").await.json();
    let res = list["resources"].as_array().unwrap();
    let main = res.iter().find(|r| r["name"] == "boxtables").unwrap();
    assert_eq!(main["kind"], "BoxTable");
    assert_eq!(main["singularName"], "boxtable");
    assert_eq!(main["shortNames"][0], "bt");
    assert_eq!(main["categories"][0], "all");
    assert!(
        main["verbs"]
            .as_array()
            .unwrap()
            .contains(&Value::from("watch"))
    );
    assert!(res.iter().any(|r| r["name"] == "boxtables/status"));
    assert_eq!(api.get("/apis/nope.dev/v1").await.status, 404);
}

#[tokio::test]
async fn crds_created_through_the_api_are_served() {
    let h = LocalApiBuilderExt::plain().await;
    let api = Api::new(&h);
    assert_eq!(api.get("/apis/brighter.dev/v1alpha1").await.status, 404);
    let crd: Value = serde_saphyr::from_str(CRD).unwrap();
    let r = api
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(api.get("/apis/brighter.dev/v1alpha1").await.status, 200);
    let stored = api
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/boxtables.brighter.dev")
        .await
        .json();
    let established = stored["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established);
    assert_eq!(api.post(BT, &boxtable("a").build()).await.status, 201);
}

struct LocalApiBuilderExt;
impl LocalApiBuilderExt {
    async fn plain() -> boxtable_localapi::LocalApiHandle {
        boxtable_localapi::LocalApi::builder()
            .start()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn openapi_v3_serves_the_crd_schema_with_its_group_version_kind() {
    let h = server().await;
    let api = Api::new(&h);
    let index = api.get("/openapi/v3").await.json();
    let url = index["paths"]["apis/brighter.dev/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.starts_with("/openapi/v3/apis/brighter.dev/v1alpha1?hash="));
    let doc = api.get(&url).await.json();
    let schema = &doc["components"]["schemas"]["dev.brighter.v1alpha1.BoxTable"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"][0]["kind"],
        "BoxTable"
    );
    assert_eq!(
        schema["properties"]["spec"]["properties"]["table"]["maxLength"],
        63
    );
}
