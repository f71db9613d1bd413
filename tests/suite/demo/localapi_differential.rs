//! `localapi` against the real kube-apiserver: the same corpus of requests, the ones the operator
//! makes (BoxTables created, read, listed, watched, finalizers added and removed by JSON patch,
//! status written by server-side apply with conditions merged by type, Secrets read, watched and
//! guarded by a finalizer under a resourceVersion precondition, events created and patched, the
//! leader-election Lease created and updated with conflicts, the 404/409/410/422 cases, namespace
//! deletion), sent to both. Each reply is reduced to what the operator could depend on (status
//! code, `Status` reason, the fields it reads; uids, timestamps and resourceVersions left out or
//! turned into "changed or not"), and any difference fails the test unless it is one of the
//! accepted differences below, which `localapi/README.md` lists too. An accepted difference that
//! no longer shows fails the test as well, so the list stays true.
//!
//! `localapi` is kept only for `scripts/demo.sh`; this test is what keeps the demo honest.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support;

/// What the corpus waits for a watch event at most: generous, for busy machines.
const WATCH_WAIT: Duration = Duration::from_secs(30);
const BOXTABLES: &str = "/apis/brighter.dev/v1alpha1/namespaces/{ns}/boxtables";
const SECRETS: &str = "/api/v1/namespaces/{ns}/secrets";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/{ns}/events";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
/// What kube's `get_metadata`/`patch_metadata` ask for.
const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
/// What kube's `list_metadata` asks for.
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const OPERATOR: &str = "boxtable-operator";

/// Differences the operator does not depend on, each `(step, localapi's observation, the real
/// server's observation)`; why each is harmless is in `localapi/README.md`.
fn accepted() -> Vec<(&'static str, Value, Value)> {
    vec![
        // Metadata-only reads and writes: localapi answers the whole object, kube a
        // PartialObjectMetadata; kube's client reads the metadata out of either.
        (
            "secret get metadata",
            json!({"/apiVersion": "v1", "/data": {"connectionString": "cG9zdGdyZXM6Ly9kYi9zaG9w"},
                   "/kind": "Secret", "/metadata/finalizers": null, "code": 200}),
            json!({"/apiVersion": "meta.k8s.io/v1", "/data": null,
                   "/kind": "PartialObjectMetadata", "/metadata/finalizers": null, "code": 200}),
        ),
        (
            "secret finalizer patch",
            json!({"/kind": "Secret", "/metadata/finalizers": ["drop.brighter.dev/u1"], "code": 200}),
            json!({"/kind": "PartialObjectMetadata", "/metadata/finalizers": ["drop.brighter.dev/u1"],
                   "code": 200}),
        ),
        (
            "secret list metadata",
            json!({"/kind": "SecretList", "code": 200, "names": ["db"]}),
            json!({"/kind": "PartialObjectMetadataList", "code": 200, "names": ["db"]}),
        ),
        // CEL duration() is outside localapi's subset; the operator refuses such a spec itself
        // (InvalidSpec), so nothing reaches the database either way.
        (
            "boxtable create with lock.timeout over 1h",
            json!({"code": 201}),
            json!({"code": 422, "reason": "Invalid"}),
        ),
        // Server-side apply: localapi treats lists as atomic, kube merges `status.conditions` by
        // `type` (the CRD's list-type map). The operator compares only its own conditions
        // (tests/suite/status/server_side_apply.rs shows it on the real server).
        (
            "status apply by another manager",
            json!({"code": 409, "conditions": [], "reason": "Conflict"}),
            json!({"code": 200,
                   "conditions": ["Ready=False", "Reconciling=False", "example.com/Audited=True"]}),
        ),
        (
            "status apply after another manager's",
            json!({"code": 200, "conditions": ["Ready=True", "Reconciling=False"]}),
            json!({"code": 200,
                   "conditions": ["Ready=True", "Reconciling=False", "example.com/Audited=True"]}),
        ),
        // localapi keeps its whole history (up to its history limit), kube's watch cache only a
        // window; both answer 410 past what they keep (localapi after `compact()`), and the
        // operator's watcher relists on 410 (tests/suite/resilience/api_restart.rs on the real server).
        (
            "boxtable watch from a position too old",
            json!({"/object/code": null, "/object/reason": null, "/type": "ADDED", "code": 200}),
            json!({"/object/code": 410, "/object/reason": "Expired", "/type": "ERROR", "code": 200}),
        ),
        // Namespace deletion: localapi removes the namespace at once; kube keeps it Terminating
        // while the namespace controller deletes what it holds, and refuses new objects in it.
        // What the operator does then is tested on the real server only
        // (tests/suite/deletion/namespace.rs).
        (
            "namespace delete",
            json!({"/status/phase": "Active", "code": 200}),
            json!({"/status/phase": "Terminating", "code": 200}),
        ),
        (
            "namespace get after delete",
            json!({"/status/phase": null, "code": 404, "reason": "NotFound"}),
            json!({"/status/phase": "Terminating", "code": 200}),
        ),
        (
            "secret create in a deleted namespace",
            json!({"code": 404, "reason": "NotFound"}),
            json!({"code": 403, "reason": "Forbidden"}),
        ),
    ]
}

/// One server under test: a client and the namespace the corpus runs in.
struct Server {
    client: kube::Client,
    namespace: String,
}

/// A reply: the status code and the body as JSON (`null` when it is not JSON).
#[derive(Debug, Clone)]
struct Reply {
    code: u16,
    body: Value,
}

impl Reply {
    /// The reply `response` makes, its body read whole (at most `limit` bytes).
    async fn read(response: axum::http::Response<kube::client::Body>, limit: usize) -> Reply {
        let code = response.status().as_u16();
        let bytes = axum::body::to_bytes(axum::body::Body::new(response.into_body()), limit)
            .await
            .unwrap();
        Reply {
            code,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    /// The code, the `Status` reason when the body is one, and the values at `pointers`.
    fn observe(&self, pointers: &[&str]) -> Value {
        let mut seen = serde_json::Map::new();
        seen.insert("code".into(), json!(self.code));
        if self.body["kind"] == "Status" {
            seen.insert("reason".into(), self.body["reason"].clone());
        }
        for pointer in pointers {
            seen.insert(
                (*pointer).to_owned(),
                self.body.pointer(pointer).cloned().unwrap_or(Value::Null),
            );
        }
        Value::Object(seen)
    }

    /// [`Self::observe`], plus the sorted names of the items of a list.
    fn observe_list(&self, pointers: &[&str]) -> Value {
        with(self.observe(pointers), json!({"names": names(self)}))
    }

    /// [`Self::observe`], plus whether the object is being deleted.
    fn observe_deleting(&self, pointers: &[&str]) -> Value {
        with(
            self.observe(pointers),
            json!({"deleting": self.body["metadata"]["deletionTimestamp"].is_string()}),
        )
    }

    /// [`Self::observe`], plus the BoxTable's condition types with their statuses.
    fn observe_conditions(&self, pointers: &[&str]) -> Value {
        with(
            self.observe(pointers),
            json!({"conditions": condition_types(self)}),
        )
    }

    /// The position a watch continues a list from (`0` when the list names none).
    fn list_position(&self) -> String {
        self.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .to_owned()
    }

    fn rv(&self) -> String {
        self.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

impl Server {
    fn path(&self, template: &str) -> String {
        template.replace("{ns}", &self.namespace)
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        accept: Option<&str>,
        body: Option<&Value>,
    ) -> axum::http::Request<kube::client::Body> {
        let mut request = axum::http::Request::builder()
            .method(method)
            .uri(self.path(path));
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        request = request.header("accept", accept.unwrap_or(JSON));
        let bytes = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        request.body(kube::client::Body::from(bytes)).unwrap()
    }

    /// Sends `request` and reads the whole reply.
    async fn send_request(&self, request: axum::http::Request<kube::client::Body>) -> Reply {
        let response = self.client.send(request).await.unwrap();
        Reply::read(response, 16 << 20).await
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        self.send_request(self.request(method, path, content_type, None, body))
            .await
    }

    /// A GET of `path` that accepts `accept`.
    async fn get_as(&self, path: &str, accept: &str) -> Reply {
        self.send_request(self.request("GET", path, None, Some(accept), None))
            .await
    }

    async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, None, None).await
    }

    async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send("POST", path, Some(JSON), Some(body)).await
    }

    async fn patch(&self, path: &str, content_type: &str, body: &Value) -> Reply {
        self.send("PATCH", path, Some(content_type), Some(body))
            .await
    }

    /// Server-side apply of `body` to `path` by `manager`.
    async fn apply(&self, path: &str, manager: &str, force: bool, body: &Value) -> Reply {
        let path = format!("{path}?fieldManager={manager}&force={force}");
        self.patch(&path, APPLY, body).await
    }

    /// Merge-patches `object` with `change` after `list` of `collection`, and returns the first
    /// event of a watch of `collection` from the list's position.
    async fn watch_change_after(
        &self,
        list: &Reply,
        collection: &str,
        object: &str,
        change: &Value,
    ) -> Reply {
        let from = list.list_position();
        self.patch(object, MERGE, change).await;
        self.watch_first(collection, &format!("resourceVersion={from}"))
            .await
    }

    /// A merge patch of `path` asking for metadata only, as kube's `patch_metadata` sends it.
    async fn patch_metadata(&self, path: &str, body: &Value) -> Reply {
        let request = self.request("PATCH", path, Some(MERGE), Some(METADATA), Some(body));
        self.send_request(request).await
    }

    /// Watches `path` (a collection, `watch=1` and `query` added) and returns the first event.
    async fn watch_first(&self, path: &str, query: &str) -> Reply {
        let path = format!("{path}?watch=1&{query}");
        let request = self.request("GET", &path, None, None, None);
        let response = self.client.send(request).await.unwrap();
        let code = response.status().as_u16();
        if code != 200 {
            return Reply::read(response, 1 << 20).await;
        }
        let mut stream = axum::body::Body::new(response.into_body()).into_data_stream();
        let mut buffer = Vec::new();
        let line = tokio::time::timeout(WATCH_WAIT, async {
            loop {
                if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    return buffer[..end].to_vec();
                }
                match stream.next().await {
                    Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                    _ => return std::mem::take(&mut buffer),
                }
            }
        })
        .await
        .expect("no watch event arrived");
        Reply {
            code,
            body: serde_json::from_slice(&line).unwrap_or(Value::Null),
        }
    }
}

fn boxtable(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({
        "type": type_,
        "status": status,
        "reason": reason,
        "message": format!("{type_} is {status}"),
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    })
}

/// The status the operator applies (its conditions only).
fn operator_status(ready: &str) -> Value {
    json!({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "status": {
            "observedGeneration": 1,
            "conditions": [
                condition("Ready", ready, "Migrated"),
                condition("Reconciling", "False", "Migrated"),
            ],
        },
    })
}

/// The condition types in a BoxTable's status, in order, with their statuses.
fn condition_types(reply: &Reply) -> Value {
    let conditions = reply.body["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Value::Array(
        conditions
            .iter()
            .map(|c| {
                json!(format!(
                    "{}={}",
                    c["type"].as_str().unwrap_or(""),
                    c["status"].as_str().unwrap_or("")
                ))
            })
            .collect(),
    )
}

/// The sorted names of the items of a list reply.
fn names(reply: &Reply) -> Value {
    let mut names: Vec<String> = reply.body["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    json!(names)
}

/// Adds `extra` (computed observations) to an observation.
fn with(mut seen: Value, extra: Value) -> Value {
    if let (Some(seen), Some(extra)) = (seen.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            seen.insert(k.clone(), v.clone());
        }
    }
    seen
}

/// Runs the corpus against `s`; returns `(step, observation)` in order.
async fn corpus(s: &Server) -> Vec<(&'static str, Value)> {
    let mut seen: Vec<(&'static str, Value)> = Vec::new();
    let secret = format!("{SECRETS}/db");
    let orders = format!("{BOXTABLES}/orders");

    // Secrets: created with stringData, read, listed, watched, a missing one.
    let created = s
        .post(
            SECRETS,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                    "stringData": {"connectionString": "postgres://db/shop"}}),
        )
        .await;
    seen.push((
        "secret create",
        created.observe(&["/data", "/type", "/stringData"]),
    ));
    seen.push((
        "secret get",
        s.get(&secret).await.observe(&["/data", "/metadata/name"]),
    ));
    let missing = s.get(&format!("{SECRETS}/nope")).await;
    seen.push((
        "secret get missing",
        missing.observe(&["/details/name", "/details/kind"]),
    ));
    let list = s.get(SECRETS).await;
    seen.push(("secret list", list.observe_list(&["/kind"])));
    // A change made after the list is the first event of a watch from the list's position.
    let rotated = json!({"metadata": {"labels": {"rotated": "yes"}}});
    let watched = s
        .watch_change_after(&list, SECRETS, &secret, &rotated)
        .await;
    seen.push((
        "secret watch after a change",
        watched.observe(&[
            "/type",
            "/object/metadata/name",
            "/object/metadata/labels",
            "/object/data",
        ]),
    ));

    // The Secret guard: metadata-only read and a finalizer merge patch under a resourceVersion
    // precondition (a stale one is a conflict), then a deletion the finalizer holds.
    let meta = s.get_as(&secret, METADATA).await;
    seen.push((
        "secret get metadata",
        meta.observe(&["/kind", "/apiVersion", "/data", "/metadata/finalizers"]),
    ));
    let stale = meta.rv();
    let guarded = s
        .patch_metadata(
            &secret,
            &json!({"metadata": {"resourceVersion": stale, "finalizers": ["drop.brighter.dev/u1"]}}),
        )
        .await;
    seen.push((
        "secret finalizer patch",
        guarded.observe(&["/kind", "/metadata/finalizers"]),
    ));
    let conflict = s
        .patch_metadata(
            &secret,
            &json!({"metadata": {"resourceVersion": stale, "finalizers": []}}),
        )
        .await;
    seen.push((
        "secret finalizer patch with a stale resourceVersion",
        conflict.observe(&["/details/name"]),
    ));
    let listed = s.get_as(SECRETS, METADATA_LIST).await;
    seen.push(("secret list metadata", listed.observe_list(&["/kind"])));
    let deleted = s.send("DELETE", &secret, None, None).await;
    seen.push((
        "secret delete held by a finalizer",
        deleted.observe_deleting(&["/metadata/finalizers"]),
    ));
    let still = s.get(&secret).await;
    seen.push((
        "secret get while deleting",
        still.observe_deleting(&["/data"]),
    ));
    let added = s
        .patch(
            &secret,
            MERGE,
            &json!({"metadata": {"finalizers": ["drop.brighter.dev/u1", "drop.brighter.dev/u2"]}}),
        )
        .await;
    seen.push(("secret new finalizer while deleting", added.observe(&[])));
    let released = s
        .patch(&secret, MERGE, &json!({"metadata": {"finalizers": null}}))
        .await;
    seen.push(("secret last finalizer removed", released.observe(&[])));
    seen.push((
        "secret get after release",
        s.get(&secret).await.observe(&[]),
    ));

    // BoxTables: created (defaults applied), refused, read, listed.
    let spec = json!({"box": "Outbox", "database": {"secretRef": {"name": "db"}}, "deletionPolicy": "Drop"});
    let created = s.post(BOXTABLES, &boxtable("orders", spec.clone())).await;
    seen.push((
        "boxtable create",
        with(
            created.observe(&[
                "/spec",
                "/metadata/generation",
                "/metadata/finalizers",
                "/status",
            ]),
            json!({"uid": created.body["metadata"]["uid"].is_string()}),
        ),
    ));
    seen.push((
        "boxtable create again",
        s.post(BOXTABLES, &boxtable("orders", spec.clone()))
            .await
            .observe(&["/details/name", "/details/kind"]),
    ));
    let invalid = s
        .post(BOXTABLES, &boxtable("bad", json!({"box": "Outbox", "table": "1bad", "database": {"secretRef": {"name": "db"}}})))
        .await;
    let fields: Vec<Value> = invalid.body["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| c["field"].clone())
        .collect();
    seen.push((
        "boxtable create with an invalid table",
        with(invalid.observe(&[]), json!({"fields": fields})),
    ));
    let long = s
        .post(BOXTABLES, &boxtable("long", json!({"box": "Outbox", "table": "long_outbox", "lock": {"timeout": "2h"}, "database": {"secretRef": {"name": "db"}}})))
        .await;
    seen.push((
        "boxtable create with lock.timeout over 1h",
        long.observe(&[]),
    ));
    if long.code == 201 {
        s.send("DELETE", &format!("{BOXTABLES}/long"), None, None)
            .await;
    }
    seen.push((
        "boxtable get",
        s.get(&orders)
            .await
            .observe(&["/spec", "/metadata/generation"]),
    ));
    let list = s.get(BOXTABLES).await;
    seen.push((
        "boxtable list",
        list.observe_list(&["/kind", "/apiVersion"]),
    ));
    seen.push((
        "boxtable get missing",
        s.get(&format!("{BOXTABLES}/nope"))
            .await
            .observe(&["/details/name"]),
    ));

    // The cleanup finalizer, by JSON patch guarded by `test` (as the operator sends it).
    let add = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["brighter.dev/cleanup"]},
    ]);
    seen.push((
        "boxtable finalizer add",
        s.patch(&orders, JSON_PATCH, &add)
            .await
            .observe(&["/metadata/finalizers", "/metadata/generation"]),
    ));
    seen.push((
        "boxtable finalizer add again (test fails)",
        s.patch(&orders, JSON_PATCH, &add).await.observe(&[]),
    ));

    // Status by server-side apply: the operator's conditions, a no-op apply, another manager's
    // condition, and the operator applying again.
    let status = format!("{orders}/status");
    let before = s.get(&orders).await.rv();
    let applied = s
        .apply(&status, OPERATOR, true, &operator_status("False"))
        .await;
    seen.push((
        "status apply",
        with(
            applied.observe_conditions(&["/status/observedGeneration", "/metadata/generation"]),
            json!({"rv changed": applied.rv() != before}),
        ),
    ));
    let again = s
        .apply(&status, OPERATOR, true, &operator_status("False"))
        .await;
    seen.push((
        "status apply unchanged",
        with(
            again.observe(&[]),
            json!({"rv changed": again.rv() != applied.rv()}),
        ),
    ));
    let other = json!({
        "apiVersion": "brighter.dev/v1alpha1",
        "kind": "BoxTable",
        "status": {"conditions": [condition("example.com/Audited", "True", "Checked")]},
    });
    let audited = s.apply(&status, "auditor", false, &other).await;
    seen.push((
        "status apply by another manager",
        audited.observe_conditions(&[]),
    ));
    let ready = s
        .apply(&status, OPERATOR, true, &operator_status("True"))
        .await;
    seen.push((
        "status apply after another manager's",
        ready.observe_conditions(&[]),
    ));
    let merged = s
        .patch(
            &status,
            MERGE,
            &json!({"status": {"observedGeneration": 1}}),
        )
        .await;
    seen.push((
        "status merge patch",
        merged.observe(&["/metadata/generation"]),
    ));

    // Spec and status: the main resource ignores status, generation follows the spec only.
    let suspended = s
        .patch(
            &orders,
            MERGE,
            &json!({"spec": {"suspend": true}, "status": {"observedGeneration": 9}}),
        )
        .await;
    seen.push((
        "spec patch",
        suspended.observe(&["/metadata/generation", "/status/observedGeneration"]),
    ));
    let labelled = s
        .patch(
            &orders,
            MERGE,
            &json!({"metadata": {"labels": {"team": "shop"}}}),
        )
        .await;
    seen.push((
        "metadata patch",
        labelled.observe(&["/metadata/generation", "/metadata/labels"]),
    ));
    seen.push((
        "strategic merge patch of a custom resource",
        s.patch(
            &orders,
            STRATEGIC,
            &json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await
        .observe(&[]),
    ));

    // Watches: a change seen from a listed position; a position far too old.
    let list = s.get(BOXTABLES).await;
    let touched = json!({"metadata": {"annotations": {"touched": "yes"}}});
    let watched = s
        .watch_change_after(&list, BOXTABLES, &orders, &touched)
        .await;
    seen.push((
        "boxtable watch after a change",
        watched.observe(&[
            "/type",
            "/object/metadata/name",
            "/object/metadata/annotations",
        ]),
    ));
    let expired = s.watch_first(BOXTABLES, "resourceVersion=1").await;
    seen.push((
        "boxtable watch from a position too old",
        expired.observe(&["/type", "/object/code", "/object/reason"]),
    ));

    // Deletion: held by the finalizer, no new finalizer, released by the guarded JSON patch.
    let deleting = s.send("DELETE", &orders, None, None).await;
    seen.push((
        "boxtable delete",
        deleting.observe_deleting(&["/metadata/finalizers", "/metadata/generation"]),
    ));
    let more =
        json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/other"}]);
    seen.push((
        "boxtable new finalizer while deleting",
        s.patch(&orders, JSON_PATCH, &more).await.observe(&[]),
    ));
    let remove = json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "brighter.dev/cleanup"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]);
    seen.push((
        "boxtable finalizer remove",
        s.patch(&orders, JSON_PATCH, &remove).await.observe(&[]),
    ));
    seen.push((
        "boxtable get after release",
        s.get(&orders).await.observe(&[]),
    ));
    seen.push((
        "boxtable finalizer remove when gone",
        s.patch(&orders, JSON_PATCH, &remove).await.observe(&[]),
    ));

    // Events as kube's recorder writes them.
    let event = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "orders.1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": OPERATOR,
        "reportingInstance": "pod-a",
        "action": "Migrate",
        "reason": "Migrated",
        "note": "migrated to V8",
        "type": "Normal",
        "regarding": {"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable", "name": "orders", "namespace": s.namespace},
    });
    seen.push((
        "event create",
        s.post(EVENTS, &event)
            .await
            .observe(&["/reason", "/note", "/type", "/regarding/name"]),
    ));
    let series = json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}});
    seen.push((
        "event series patch",
        s.patch(&format!("{EVENTS}/orders.1"), MERGE, &series)
            .await
            .observe(&["/series/count", "/reason"]),
    ));

    // The leader-election Lease.
    let lease = format!("{LEASES}/{OPERATOR}");
    seen.push((
        "lease get missing",
        s.get(&lease)
            .await
            .observe(&["/details/name", "/details/kind"]),
    ));
    let spec = json!({"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "leaseTransitions": 0,
                      "acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:00:00.000000Z"});
    let record = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": OPERATOR}, "spec": spec});
    let created = s.post(LEASES, &record).await;
    seen.push((
        "lease create",
        created.observe(&["/spec/holderIdentity", "/spec/leaseDurationSeconds"]),
    ));
    seen.push((
        "lease create again",
        s.post(LEASES, &record).await.observe(&["/details/name"]),
    ));
    let mut renewed = created.body.clone();
    renewed["spec"]["renewTime"] = json!("2026-01-01T00:00:05.000000Z");
    let put = s.send("PUT", &lease, Some(JSON), Some(&renewed)).await;
    seen.push((
        "lease update",
        with(
            put.observe(&["/spec/renewTime"]),
            json!({"rv changed": put.rv() != created.rv()}),
        ),
    ));
    renewed["spec"]["holderIdentity"] = json!("pod-b");
    seen.push((
        "lease update with a stale resourceVersion",
        s.send("PUT", &lease, Some(JSON), Some(&renewed))
            .await
            .observe(&["/details/name"]),
    ));
    let mut unversioned = renewed.clone();
    unversioned["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    seen.push((
        "lease update without a resourceVersion",
        s.send("PUT", &lease, Some(JSON), Some(&unversioned))
            .await
            .observe(&["/spec/holderIdentity"]),
    ));

    // Deleting the namespace.
    let namespace = format!("/api/v1/namespaces/{}", s.namespace);
    let gone = s.send("DELETE", &namespace, None, None).await;
    seen.push(("namespace delete", gone.observe(&["/status/phase"])));
    seen.push((
        "namespace get after delete",
        s.get(&namespace).await.observe(&["/status/phase"]),
    ));
    let late = s
        .post(
            SECRETS,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late"}}),
        )
        .await;
    seen.push(("secret create in a deleted namespace", late.observe(&[])));
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localapi_answers_the_operators_requests_as_kube_apiserver_does() {
    let plane = support::control_plane::control_plane();
    let real = Server {
        client: plane.admin_client().await,
        namespace: plane.create_namespace("differential"),
    };
    let local_api = boxtable_localapi::LocalApi::builder()
        .crd_file(concat!(env!("CARGO_MANIFEST_DIR"), "/crds/boxtable.yaml"))
        .namespace(&real.namespace)
        .start()
        .await
        .unwrap();
    let local = Server {
        client: kube::Client::try_from(kube::Config::new(local_api.url().parse().unwrap()))
            .unwrap(),
        namespace: real.namespace.clone(),
    };

    let on_local = corpus(&local).await;
    let on_real = corpus(&real).await;
    assert_eq!(on_local.len(), on_real.len());

    let accepted = accepted();
    let mut unexpected = Vec::new();
    let mut shown = Vec::new();
    for ((step, local), (_, real)) in on_local.iter().zip(&on_real) {
        println!("{step}:\n  localapi: {local}\n  real:     {real}");
        if local == real {
            continue;
        }
        match accepted.iter().find(|(s, _, _)| s == step) {
            Some((_, l, r)) if l == local && r == real => shown.push(*step),
            _ => unexpected.push(format!("{step}:\n  localapi: {local}\n  real:     {real}")),
        }
    }
    let stale: Vec<&str> = accepted
        .iter()
        .map(|(s, _, _)| *s)
        .filter(|s| !shown.contains(s))
        .collect();
    assert!(
        unexpected.is_empty(),
        "localapi differs from kube-apiserver where the operator could depend on it (fix localapi, \
         or accept the difference here and in localapi/README.md):\n{}",
        unexpected.join("\n")
    );
    assert!(
        stale.is_empty(),
        "accepted differences that no longer show (remove them here and in localapi/README.md): {stale:?}"
    );
}
