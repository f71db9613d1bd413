#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use serde_json::json;

use crate::common::*;

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

#[tokio::test]
async fn tables_carry_printer_columns_with_priorities_and_evaluated_cells() {
    let h = server().await;
    let api = Api::new(&h);
    api.post(BT, &boxtable("orders").table("Orders").build())
        .await;
    let status = json!({"status": {"appliedVersion": 8, "lock": {"state": "Released", "key": "-54"},
        "conditions": [{"type": "Reconciling", "status": "False"}, {"type": "Ready", "status": "True"}]}});
    api.merge(&format!("{BT}/orders/status"), &status).await;
    let t = api
        .get_accept(&format!("{BT}?includeObject=Object"), TABLE)
        .await
        .json();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let cols: Vec<(&str, i64)> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        cols,
        vec![
            ("Name", 0),
            ("Box", 0),
            ("Table", 0),
            ("Version", 0),
            ("Lock", 0),
            ("Ready", 0),
            ("Key", 1),
            ("Age", 0)
        ]
    );
    let row = &t["rows"][0];
    assert_eq!(
        row["cells"].as_array().unwrap()[..7],
        [
            json!("orders"),
            json!("Outbox"),
            json!("Orders"),
            json!(8),
            json!("Released"),
            json!("True"),
            json!("-54")
        ]
    );
    assert!(row["cells"][7].as_str().unwrap().ends_with('s'));
    assert_eq!(row["object"]["kind"], "BoxTable");
    let single = api.get_accept(&format!("{BT}/orders"), TABLE).await.json();
    assert_eq!(single["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}
