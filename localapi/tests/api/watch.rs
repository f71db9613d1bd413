#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::time::{Duration, Instant};

use boxtable_localapi::LocalApi;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn watch_from_zero_starts_with_synthetic_added_events_then_streams_changes() {
    let h = server().await;
    let api = Api::new(&h);
    api.post(BT, &boxtable("a").build()).await;
    let mut w = api
        .watch(&format!("{BT}?watch=true&resourceVersion=0"))
        .await;
    let first = w.next_change().await.unwrap();
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("a"))
    );
    api.merge(&format!("{BT}/a"), &json!({"spec": {"table": "X"}}))
        .await;
    let m = w.next_change().await.unwrap();
    assert_eq!(m["type"], "MODIFIED");
    assert_eq!(m["object"]["spec"]["table"], "X");
    api.delete(&format!("{BT}/a")).await;
    assert_eq!(w.next_change().await.unwrap()["type"], "DELETED");
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_later_events_sends_bookmarks_and_ends_at_timeout() {
    let h = server().await;
    let api = Api::new(&h);
    let rv = api.post(BT, &boxtable("a").build()).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    api.post(BT, &boxtable("b").label("team", "x").build())
        .await;
    api.post(BT, &boxtable("c").build()).await;
    let started = Instant::now();
    let mut w = api.watch(&format!("{BT}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1&labelSelector=team%3Dx")).await;
    let ev = w.next().await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("b")),
        "only the later, matching object"
    );
    let bookmark = w.next().await.unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "BoxTable");
    assert!(
        bookmark["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= rv.parse::<u64>().unwrap()
    );
    while w.next().await.is_some() {}
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(30),
        "closed after {elapsed:?}"
    );
}

#[tokio::test]
async fn an_expired_resource_version_gets_a_410_gone_error_event() {
    let h = LocalApi::builder()
        .crd_yaml(CRD)
        .history_limit(2)
        .start()
        .await
        .unwrap();
    let api = Api::new(&h);
    let rv = api.post(BT, &boxtable("a").build()).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    for n in ["b", "c", "d"] {
        api.post(BT, &boxtable(n).build()).await;
    }
    let mut w = api
        .watch(&format!("{BT}?watch=1&resourceVersion={rv}"))
        .await;
    let ev = w.next().await.unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert!(w.next().await.is_none(), "stream ends after the error");

    let page = api.get(&format!("{BT}?limit=1")).await.json();
    let token = page["metadata"]["continue"]
        .as_str()
        .unwrap()
        .replace('|', "%7C");
    api.post(BT, &boxtable("e").build()).await;
    h.compact();
    assert_eq!(
        api.get(&format!("{BT}?limit=1&continue={token}"))
            .await
            .status,
        410
    );
}

#[tokio::test]
async fn label_changes_move_objects_in_and_out_of_a_selector_watch() {
    let h = server().await;
    let api = Api::new(&h);
    api.post(BT, &boxtable("a").build()).await;
    let mut w = api
        .watch(&format!("{BT}?watch=1&labelSelector=sel%3Dyes"))
        .await;
    api.merge(
        &format!("{BT}/a"),
        &json!({"metadata": {"labels": {"sel": "yes"}}}),
    )
    .await;
    assert_eq!(w.next_change().await.unwrap()["type"], "ADDED");
    api.merge(
        &format!("{BT}/a"),
        &json!({"metadata": {"labels": {"sel": "no"}}}),
    )
    .await;
    assert_eq!(w.next_change().await.unwrap()["type"], "DELETED");
}

#[tokio::test]
async fn many_concurrent_watchers_all_see_every_event() {
    let h = server().await;
    let api = Api::new(&h);
    let mut watchers = Vec::new();
    for _ in 0..20 {
        watchers.push(api.watch(&format!("{BT}?watch=1")).await);
    }
    let writes: Vec<_> = (0..10)
        .map(|i| {
            let addr = api.addr;
            tokio::spawn(async move {
                Api { addr }
                    .post(BT, &boxtable(&format!("o{i}")).build())
                    .await
                    .status
            })
        })
        .collect();
    for w in writes {
        assert_eq!(w.await.unwrap(), 201);
    }
    for w in &mut watchers {
        let mut names = Vec::new();
        for _ in 0..10 {
            names.push(
                w.next_change().await.unwrap()["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 10);
    }
}
