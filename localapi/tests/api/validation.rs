#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use serde_json::{Value, json};

use crate::common::*;

fn causes(v: &Value) -> Vec<(String, String, String)> {
    v["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["reason"].as_str().unwrap().into(),
                c["field"].as_str().unwrap().into(),
                c["message"].as_str().unwrap().into(),
            )
        })
        .collect()
}

#[tokio::test]
async fn schema_violations_are_422_with_one_cause_per_field() {
    let h = server().await;
    let api = Api::new(&h);
    let bad = boxtable("orders").table("1bad").build();
    let r = api.post(BT, &bad).await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(
        s["message"],
        "BoxTable.brighter.dev \"orders\" is invalid: spec.table: Invalid value: \"1bad\": spec.table in body should match '^[A-Za-z][A-Za-z0-9_]*$'"
    );
    assert_eq!(
        causes(&s),
        vec![(
            "FieldValueInvalid".into(),
            "spec.table".into(),
            "Invalid value: \"1bad\": spec.table in body should match '^[A-Za-z][A-Za-z0-9_]*$'"
                .into()
        )]
    );

    let many = json!({"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable", "metadata": {"name": "x"},
        "spec": {"table": "a".repeat(64), "targetVersion": 9, "tags": ["a", "b", "c"], "port": true}});
    let s = api.post(BT, &many).await.json();
    let got = causes(&s);
    let fields: Vec<&str> = got.iter().map(|c| c.1.as_str()).collect();
    for f in [
        "spec.box",
        "spec.table",
        "spec.targetVersion",
        "spec.tags",
        "spec.port",
    ] {
        assert!(fields.contains(&f), "{f} not in {got:?}");
    }
    assert!(got.contains(&(
        "FieldValueRequired".into(),
        "spec.box".into(),
        "Required value".into()
    )));
    assert!(got.contains(&(
        "FieldValueTooLong".into(),
        "spec.table".into(),
        "Too long: may not be longer than 63".into()
    )));
    assert!(got.contains(&(
        "FieldValueTooMany".into(),
        "spec.tags".into(),
        "Too many: 3: must have at most 2 items".into()
    )));

    let s = api
        .post(BT, &boxtable("x").spec("box", json!("Sideways")).build())
        .await
        .json();
    assert_eq!(
        causes(&s),
        vec![(
            "FieldValueNotSupported".into(),
            "spec.box".into(),
            "Unsupported value: \"Sideways\": supported values: \"Outbox\", \"Inbox\"".into()
        )]
    );
    assert_eq!(
        api.post(BT, &boxtable("Bad_Name").build()).await.status,
        422
    );
    assert_eq!(
        api.post(BT, &boxtable("ok").spec("port", json!("5432")).build())
            .await
            .status,
        201,
        "int-or-string accepts strings"
    );
}

#[tokio::test]
async fn defaults_fill_absent_fields_including_inside_present_objects_and_unknown_fields_are_pruned()
 {
    let h = server().await;
    let api = Api::new(&h);
    let body = boxtable("orders")
        .spec("lock", json!({}))
        .spec("mystery", json!(1))
        .spec("extra", json!({"free": {"form": 1}}))
        .spec("schema", Value::Null)
        .build();
    let r = api.post(BT, &body).await;
    assert_eq!(r.status, 201);
    assert!(
        r.header("warning")
            .is_some_and(|w| w.contains("unknown field \\\"spec.mystery\\\"")),
        "{:?}",
        r.headers
    );
    let obj = r.json();
    assert_eq!(
        obj["spec"]["schema"], "public",
        "null of a non-nullable field is replaced by the default"
    );
    assert_eq!(obj["spec"]["lock"]["timeout"], "30s");
    assert!(obj["spec"].get("mystery").is_none());
    assert_eq!(
        obj["spec"]["extra"]["free"]["form"], 1,
        "preserve-unknown-fields keeps data"
    );

    let strict = api
        .post(
            &format!("{BT}?fieldValidation=Strict"),
            &boxtable("b").spec("mystery", json!(1)).build(),
        )
        .await;
    assert_eq!(strict.status, 400);
    assert!(
        strict.json()["message"]
            .as_str()
            .unwrap()
            .contains("strict decoding error: unknown field \"spec.mystery\"")
    );
    let dry = api
        .post(&format!("{BT}?dryRun=All"), &boxtable("dry").build())
        .await;
    assert_eq!(dry.status, 201);
    assert_eq!(
        api.get(&format!("{BT}/dry")).await.status,
        404,
        "dry run stores nothing"
    );
}

#[tokio::test]
async fn cel_transition_rule_makes_box_immutable_but_allows_the_first_write() {
    let h = server().await;
    let api = Api::new(&h);
    assert_eq!(
        api.post(BT, &boxtable("orders").table("T").build())
            .await
            .status,
        201
    );
    let r = api
        .merge(&format!("{BT}/orders"), &json!({"spec": {"box": "Inbox"}}))
        .await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(
        causes(&s),
        vec![(
            "FieldValueInvalid".into(),
            "spec.box".into(),
            "Invalid value: \"string\": box is immutable".into()
        )]
    );
    let removed = api
        .merge(&format!("{BT}/orders"), &json!({"spec": {"table": null}}))
        .await;
    assert_eq!(removed.status, 422);
    assert!(
        removed.json()["message"]
            .as_str()
            .unwrap()
            .contains("table may not be removed")
    );
    assert_eq!(
        api.merge(
            &format!("{BT}/orders"),
            &json!({"spec": {"targetVersion": 3}})
        )
        .await
        .status,
        200
    );
}
