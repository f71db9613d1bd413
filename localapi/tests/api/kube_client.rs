#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config, CustomResource, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::common::*;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "brighter.dev",
    version = "v1alpha1",
    kind = "BoxTable",
    namespaced,
    status = "BoxTableStatus"
)]
pub struct BoxTableSpec {
    #[serde(rename = "box")]
    pub box_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct BoxTableStatus {
    #[serde(
        rename = "appliedVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub applied_version: Option<i64>,
}

const FINALIZER: &str = "brighter.dev/cleanup";

async fn client(h: &boxtable_localapi::LocalApiHandle) -> Client {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    h.write_kubeconfig(&path).unwrap();
    let kc = Kubeconfig::read_from(&path).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn bt(name: &str) -> BoxTable {
    BoxTable::new(
        name,
        BoxTableSpec {
            box_: "Outbox".into(),
            table: Some("Orders".into()),
        },
    )
}

async fn run_finalizer(api: &Api<BoxTable>, obj: BoxTable) -> Action {
    finalizer(api, FINALIZER, std::sync::Arc::new(obj), |ev| async move {
        match ev {
            Finalizer::Apply(_) | Finalizer::Cleanup(_) => {
                Ok::<_, std::io::Error>(Action::await_change())
            }
        }
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn kube_rs_watcher_finalizers_status_apply_events_and_leases_work() {
    let h = server().await;
    let client = client(&h).await;
    let api: Api<BoxTable> = Api::namespaced(client.clone(), "default");

    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        // Errors (a dropped connection, 410 Gone) are yielded and then retried by the watcher.
        while let Some(item) = stream.next().await {
            let Ok(obj) = item else { continue };
            let _ = tx.send(format!(
                "{}:{}",
                obj.metadata.name.clone().unwrap_or_default(),
                obj.metadata.resource_version.clone().unwrap_or_default()
            ));
        }
    });

    let created = api.create(&PostParams::default(), &bt("a")).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    next_named(&mut seen, "a:").await;

    run_finalizer(&api, api.get("a").await.unwrap()).await;
    assert_eq!(
        api.get("a").await.unwrap().metadata.finalizers,
        Some(vec![FINALIZER.to_string()])
    );

    let status = json!({"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable", "status": {"appliedVersion": 8}});
    let patched = api
        .patch_status(
            "a",
            &PatchParams::apply("boxtable-operator").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().applied_version, Some(8));
    assert_eq!(patched.metadata.generation, Some(1));

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "boxtable-operator".into(),
            instance: Some("test".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Migrated".into(),
        note: Some("public.outbox is at version 8".into()),
        action: "Migrate".into(),
        secondary: None,
    };
    let objref = api.get("a").await.unwrap().object_ref(&());
    recorder.publish(&ev, &objref).await.unwrap();
    recorder.publish(&ev, &objref).await.unwrap();
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].series.as_ref().map(|s| s.count), Some(2));

    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease: Lease = serde_json::from_value(
        json!({"metadata": {"name": "boxtable-operator"}, "spec": {"holderIdentity": "pod-a"}}),
    )
    .unwrap();
    let lease = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut stale = lease.clone();
    let mut fresh = lease.clone();
    fresh.spec.as_mut().unwrap().holder_identity = Some("pod-b".into());
    leases
        .replace("boxtable-operator", &PostParams::default(), &fresh)
        .await
        .unwrap();
    stale.spec.as_mut().unwrap().holder_identity = Some("pod-c".into());
    let err = leases
        .replace("boxtable-operator", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );
    // Like kube, a Lease update must say which version it replaces.
    let mut unversioned = fresh.clone();
    unversioned.metadata.resource_version = None;
    let err = leases
        .replace("boxtable-operator", &PostParams::default(), &unversioned)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );

    // The watcher survives dropped connections and a compacted history (410 -> relist).
    // The reconnect fails once, "b" is written and the history compacted meanwhile, so the re-watch gets
    // 410 Gone and the watcher must re-list to see "b".
    let lists_before = h
        .stats()
        .by_verb
        .get("list boxtables")
        .copied()
        .unwrap_or(0);
    h.inject(
        boxtable_localapi::Fault::status(503)
            .times(1)
            .method("GET")
            .path_prefix(BT),
    );
    h.drop_watches();
    api.create(&PostParams::default(), &bt("b")).await.unwrap();
    h.compact();
    next_named(&mut seen, "b:").await;
    assert!(
        h.stats()
            .by_verb
            .get("list boxtables")
            .copied()
            .unwrap_or(0)
            > lists_before,
        "watcher re-listed after 410"
    );

    api.delete("a", &Default::default()).await.unwrap();
    let deleting = api.get("a").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    run_finalizer(&api, deleting).await;
    eventually(60, "a to be gone", || async {
        api.get_opt("a").await.unwrap().is_none()
    })
    .await;
    task.abort();
}

async fn next_named(seen: &mut tokio::sync::mpsc::UnboundedReceiver<String>, prefix: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = tokio::time::timeout_at(deadline, seen.recv())
            .await
            .unwrap_or_else(|_| panic!("watcher never delivered {prefix}"))
            .unwrap();
        if got.starts_with(prefix) {
            return;
        }
    }
}
