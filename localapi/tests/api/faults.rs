#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use boxtable_localapi::Fault;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn injected_faults_hit_matching_requests_the_given_number_of_times() {
    let h = server().await;
    let api = Api::new(&h);
    api.post(BT, &boxtable("orders").build()).await;
    h.inject(
        Fault::status(503)
            .times(2)
            .method("PATCH")
            .path_prefix("/apis/brighter.dev"),
    );
    let path = format!("{BT}/orders");
    assert_eq!(api.get(&path).await.status, 200, "other methods pass");
    for _ in 0..2 {
        let r = api.merge(&path, &json!({"spec": {"table": "T"}})).await;
        assert_eq!(r.status, 503);
        assert_eq!(r.json()["reason"], "ServiceUnavailable");
    }
    assert_eq!(
        api.merge(&path, &json!({"spec": {"table": "T"}}))
            .await
            .status,
        200
    );

    let r = api
        .send(
            "POST",
            "/__localapi/faults",
            "application/json",
            &json!({"status": 500, "count": 1, "pathPrefix": "/api/v1"}),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(
        api.get("/api/v1/namespaces/default/secrets").await.status,
        500
    );
    assert_eq!(
        api.get("/api/v1/namespaces/default/secrets").await.status,
        200
    );
}

#[tokio::test]
async fn stats_count_requests_by_path_and_verb() {
    let h = server().await;
    let api = Api::new(&h);
    h.reset_stats();
    api.post(BT, &boxtable("orders").build()).await;
    api.merge(
        &format!("{BT}/orders/status"),
        &json!({"status": {"appliedVersion": 1}}),
    )
    .await;
    api.get(&format!("{BT}/orders")).await;
    let stats = api.get("/__localapi/stats").await.json();
    assert_eq!(stats["total"], 3);
    assert_eq!(stats["byVerb"]["patch boxtables/status"], 1);
    assert_eq!(h.stats().count(Some("GET"), BT), 1);
    assert_eq!(h.request_count(), 3);
}

#[tokio::test]
async fn dropping_watches_ends_open_streams() {
    let h = server().await;
    let api = Api::new(&h);
    let mut w = api.watch(&format!("{BT}?watch=1")).await;
    let r = api
        .send(
            "POST",
            "/__localapi/drop-watches",
            "application/json",
            &json!({}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(w.next_change().await.is_none());
}
