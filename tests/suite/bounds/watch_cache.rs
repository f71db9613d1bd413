//! The operator's watch caches on the real kube-apiserver: what the server keeps of an object
//! (its managedFields, a `kubectl apply` last-applied copy) never reaches the caches the
//! controller builds, while everything a pass reads does.

use std::time::Duration;

use boxtable_operator::controller::cache::{self, LAST_APPLIED};
use boxtable_operator::controller::secrets::SecretMetadata;
use boxtable_operator::crd::BoxTable;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::support::control_plane::control_plane;

/// Asserts that `cached` has neither managedFields nor the last-applied annotation, and keeps the
/// `shop.example/team` annotation and the labels of `stored`.
fn assert_kept_without_what_the_server_adds(cached: &impl Resource, stored: &impl Resource) {
    assert!(cached.managed_fields().is_empty(), "{:?}", cached.meta());
    assert!(!cached.annotations().contains_key(LAST_APPLIED));
    assert_eq!(
        cached
            .annotations()
            .get("shop.example/team")
            .map(String::as_str),
        Some("orders")
    );
    assert_eq!(cached.labels(), stored.labels());
}

/// Drives `events` in the background and waits until `store` has synced its first list (which
/// holds every object created before the watch started); fails after 60 s.
async fn synced<K, S, E>(store: &Store<K>, events: S) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    S: futures::Stream<Item = Result<K, E>> + Send + 'static,
    E: std::fmt::Debug + Send + 'static,
{
    let driving = tokio::spawn(async move {
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            if let Err(error) = event {
                panic!("watch failed: {error:?}");
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(60), store.wait_until_ready())
        .await
        .expect("the cache did not sync within 60 s")
        .expect("the store's writer was dropped");
    driving
}

fn annotated(
    kind: &str,
    api_version: &str,
    name: &str,
    rest: serde_json::Value,
) -> serde_json::Value {
    let mut object = json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "labels": {"app": "shop"},
            "annotations": {LAST_APPLIED: "{\"kind\":\"copy\"}", "shop.example/team": "orders"},
        },
    });
    object
        .as_object_mut()
        .unwrap()
        .extend(rest.as_object().unwrap().clone());
    object
}

#[tokio::test]
async fn the_caches_hold_no_managed_fields_and_no_last_applied_copy_but_keep_the_rest() {
    let plane = control_plane();
    let client = plane.admin_client().await;
    let ns = plane.create_namespace("cache");
    let boxtables: Api<BoxTable> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let apply = PatchParams::apply("shop-deployer");
    boxtables
        .patch(
            "orders",
            &apply,
            &Patch::Apply(annotated(
                "BoxTable",
                "brighter.dev/v1alpha1",
                "orders",
                json!({"spec": {"box": "Outbox", "table": "orders",
                                "database": {"secretRef": {"name": "shop-db"}}}}),
            )),
        )
        .await
        .unwrap();
    secrets
        .patch(
            "shop-db",
            &apply,
            &Patch::Apply(annotated(
                "Secret",
                "v1",
                "shop-db",
                json!({"stringData": {"connectionString": "postgres://u@h/d"}}),
            )),
        )
        .await
        .unwrap();
    // What the server keeps, so that the assertions below can fail.
    let stored = boxtables.get("orders").await.unwrap();
    assert!(!stored.managed_fields().is_empty());
    assert!(stored.annotations().contains_key(LAST_APPLIED));
    let stored_secret = secrets.get("shop-db").await.unwrap();
    assert!(!stored_secret.managed_fields().is_empty());
    assert!(stored_secret.annotations().contains_key(LAST_APPLIED));

    let (store, writer) = reflector::store();
    let events = cache::boxtables(Api::namespaced(client.clone(), &ns), writer, |_| {});
    let key = ObjectRef::<BoxTable>::new("orders").within(&ns);
    let driving = synced(&store, events).await;
    let cached = store.get(&key).expect("the BoxTable is in the cache");
    driving.abort();
    assert_kept_without_what_the_server_adds(&*cached, &stored);
    assert_eq!(cached.spec, stored.spec);
    assert_eq!(cached.uid(), stored.uid());
    assert_eq!(cached.resource_version(), stored.resource_version());

    let (secret_store, secret_writer) = reflector::store();
    let secret_events = cache::secret_metadata(
        Api::<SecretMetadata>::namespaced(client, &ns),
        watcher::Config::default(),
        secret_writer,
        |_| {},
    );
    let secret_key = ObjectRef::<SecretMetadata>::new("shop-db").within(&ns);
    let driving = synced(&secret_store, secret_events).await;
    let cached = secret_store
        .get(&secret_key)
        .expect("the Secret is in the cache");
    driving.abort();
    assert_kept_without_what_the_server_adds(&*cached, &stored_secret);
    assert_eq!(cached.resource_version(), stored_secret.resource_version());

    plane
        .kubectl_admin(&["delete", "namespace", &ns, "--wait=false"], None)
        .unwrap();
}
