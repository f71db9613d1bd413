//! What the operator keeps of the objects it watches.
//!
//! The watch caches hold every BoxTable in scope and the metadata of every Secret in scope, so
//! the operator's memory grows with the cluster. Two parts of an object are large and never read
//! here: `metadata.managedFields` (server-side apply's field ownership, which the API server
//! recomputes on every write; the status field set alone is larger than the rest of a BoxTable)
//! and the `kubectl.kubernetes.io/last-applied-configuration` annotation (a second copy of the
//! whole object as `kubectl apply` last sent it). Both are dropped before an object enters a
//! cache (a BoxTable's field ownership is not even parsed: see [`super::lean`]); a write never
//! sends them (status goes out by server-side apply of a fresh value).

use futures::{Stream, StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};

use super::lean::LeanBoxTable;
use super::secrets::SecretMetadata;
use crate::crd::BoxTable;

/// The annotation `kubectl apply` (client-side) keeps its last request in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no pass reads from a watched object before it is cached.
pub fn prune<K: ResourceExt>(object: &mut K) {
    // `None`, not an emptied list: a cleared `Vec` keeps its buffer (a few hundred bytes per
    // object, megabytes over a fleet).
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.remove(LAST_APPLIED);
        // A map emptied by that removal still holds its first node (544 bytes for string keys
        // and values), so every cached object applied with client-side `kubectl apply`, whose
        // only annotation this usually is, would keep one for nothing.
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// The controller's watch of BoxTables, as `Controller::new` builds it but with every object read
/// without its field ownership ([`LeanBoxTable`]) and pruned before it is stored in `writer`'s
/// store, and each event handed to `observe` once the store has taken it in (deletions among
/// them, which the controller itself never sees): the stream of objects applied to the store (the
/// controller's trigger; retried with the controller's own backoff).
pub fn boxtables(
    api: Api<LeanBoxTable>,
    writer: Writer<BoxTable>,
    mut observe: impl FnMut(&watcher::Event<BoxTable>) + Send + 'static,
) -> impl Stream<Item = Result<BoxTable, watcher::Error>> + Send + 'static {
    reflector::reflector(
        writer,
        watcher(api, watcher::Config::default().any_semantic())
            .map_ok(|event| full(event).modify(prune::<BoxTable>)),
    )
    .inspect(move |event| {
        if let Ok(event) = event {
            observe(event);
        }
    })
    .applied_objects()
}

/// A watch event of a [`LeanBoxTable`] as the same event of the [`BoxTable`] it is.
fn full(event: watcher::Event<LeanBoxTable>) -> watcher::Event<BoxTable> {
    use watcher::Event;
    match event {
        Event::Apply(bt) => Event::Apply(bt.into()),
        Event::Delete(bt) => Event::Delete(bt.into()),
        Event::Init => Event::Init,
        Event::InitApply(bt) => Event::InitApply(bt.into()),
        Event::InitDone => Event::InitDone,
    }
}

/// The metadata-only watch of Secrets (`config` may select by label), pruned before it is
/// stored in `writer`'s store, each event handed to `observe` once the store has taken it in: the
/// stream of Secrets that changed, with the default backoff.
pub fn secret_metadata(
    api: Api<SecretMetadata>,
    config: watcher::Config,
    writer: Writer<SecretMetadata>,
    mut observe: impl FnMut(&watcher::Event<SecretMetadata>) + Send + 'static,
) -> impl Stream<Item = Result<SecretMetadata, watcher::Error>> + Send + 'static {
    watcher(api, config)
        .default_backoff()
        .modify(prune::<SecretMetadata>)
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                observe(event);
            }
        })
        .touched_objects()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    use crate::crd::{BoxKind, BoxTable, BoxTableSpec};

    #[test]
    fn prune_drops_field_ownership_and_the_last_applied_copy_and_keeps_everything_else() {
        let mut bt = BoxTable::new("orders", BoxTableSpec::new(BoxKind::Outbox, "shop-db"));
        bt.metadata.namespace = Some("shop".to_owned());
        bt.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("boxtable-operator".to_owned()),
            ..ManagedFieldsEntry::default()
        }]);
        bt.annotations_mut().insert(
            LAST_APPLIED.to_owned(),
            "{\"kind\":\"BoxTable\"}".to_owned(),
        );
        bt.annotations_mut()
            .insert("brighter.dev/keep".to_owned(), "yes".to_owned());
        bt.labels_mut().insert("app".to_owned(), "shop".to_owned());
        let mut expected = bt.clone();
        expected.metadata.managed_fields = None;
        expected.annotations_mut().remove(LAST_APPLIED);

        prune(&mut bt);

        assert!(
            bt.metadata.managed_fields.is_none(),
            "the list goes with its buffer"
        );
        assert!(!bt.annotations().contains_key(LAST_APPLIED));
        assert_eq!(
            bt, expected,
            "names, labels, other annotations and the spec are kept"
        );
    }

    #[test]
    fn prune_leaves_no_empty_annotation_map_behind() {
        let mut bt = BoxTable::new("orders", BoxTableSpec::new(BoxKind::Outbox, "shop-db"));
        bt.annotations_mut().insert(
            LAST_APPLIED.to_owned(),
            "{\"kind\":\"BoxTable\"}".to_owned(),
        );

        prune(&mut bt);

        assert_eq!(
            bt.metadata.annotations, None,
            "an object whose only annotation was kubectl's copy keeps no map (and no node) for it"
        );

        let mut bare = BoxTable::new("orders", BoxTableSpec::new(BoxKind::Outbox, "shop-db"));
        prune(&mut bare);
        assert_eq!(bare.metadata.annotations, None, "nothing is added either");
    }
}
