//! Whether a BoxTable may take over a table whose ownership record names another owner (see
//! [`crate::migrate::ownership`]), decided from the API server when a run finds such a record.
//!
//! | recorded owner | takes over |
//! | --- | --- |
//! | this cluster, same namespace and name (a re-created, restored or re-installed object) | by itself, inside the run |
//! | this cluster, same namespace, gone | by itself |
//! | this cluster, another namespace, gone | with [`ADOPT_ANNOTATION`] naming the table |
//! | another cluster name | with [`ADOPT_ANNOTATION`] naming the table |
//! | this cluster, still exists (any namespace) | never: the live owner keeps it |
//!
//! "Gone" is asked of the API server (a quorum read, not the cache): no object of the recorded
//! namespace and name, or one with another uid. Every refusal says how to resolve it.

use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::crd::{ADOPT_ANNOTATION, BoxTable, RECONCILE_REQUESTED_ANNOTATION};
use crate::ident::QualifiedName;
use crate::migrate::ownership::OwnerRecord;
use crate::report::chain;

/// What a BoxTable may do about a table another owner's record names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Run again, replacing the record of this uid.
    TakeOver(String),
    /// Leave the table; the message says why and how to resolve it.
    Refuse(String),
}

/// Whether the recorded owner of `table` still exists, as the API server says.
#[derive(Debug)]
enum Liveness {
    Alive,
    Gone,
    Unknown(String),
}

/// The verdict for `bt` (in `namespace`, operator of cluster `cluster`) on `table`, whose record
/// names `record`.
pub(super) async fn judge(
    client: &Client,
    bt: &BoxTable,
    namespace: &str,
    cluster: &str,
    table: &QualifiedName,
    record: &OwnerRecord,
) -> Verdict {
    let liveness = if record.of_cluster(cluster) {
        liveness(client, record).await
    } else {
        Liveness::Unknown(format!(
            "it was recorded by the operator of cluster {}, and this one is cluster {cluster}",
            record.cluster.as_deref().unwrap_or_default()
        ))
    };
    decide(bt, namespace, table, record, &liveness)
}

/// The pure part of [`judge`].
fn decide(
    bt: &BoxTable,
    namespace: &str,
    table: &QualifiedName,
    record: &OwnerRecord,
    liveness: &Liveness,
) -> Verdict {
    let owner = describe(record);
    let adopt =
        bt.annotations().get(ADOPT_ANNOTATION).map(String::as_str) == Some(&table.to_string());
    let annotate = format!(
        "kubectl -n {namespace} annotate boxtable {} {ADOPT_ANNOTATION}={table}",
        bt.name_any()
    );
    match liveness {
        Liveness::Alive => Verdict::Refuse(format!(
            "{table} belongs to {owner}, which still exists; only one BoxTable manages a table: delete that BoxTable (with deletionPolicy Retain the table stays) or point one of the two at another table, then set annotation {RECONCILE_REQUESTED_ANNOTATION} here to take it over now"
        )),
        Liveness::Gone if record.namespace() == namespace || adopt => {
            Verdict::TakeOver(record.uid.clone())
        }
        Liveness::Gone => Verdict::Refuse(format!(
            "{table} belonged to {owner}, which no longer exists; it was in another namespace, so taking the table over needs consent: {annotate}"
        )),
        Liveness::Unknown(_) if adopt => Verdict::TakeOver(record.uid.clone()),
        Liveness::Unknown(why) => Verdict::Refuse(format!(
            "{table} belongs to {owner}, and whether that BoxTable still exists cannot be told ({why}); if no operator manages it there any more, take the table over: {annotate}"
        )),
    }
}

/// `BoxTable ns/name (uid …[, cluster …])`.
fn describe(record: &OwnerRecord) -> String {
    match &record.cluster {
        Some(cluster) => format!(
            "BoxTable {} (uid {}, cluster {cluster})",
            record.boxtable, record.uid
        ),
        None => format!("BoxTable {} (uid {})", record.boxtable, record.uid),
    }
}

async fn liveness(client: &Client, record: &OwnerRecord) -> Liveness {
    if record.namespace().is_empty() || record.name().is_empty() {
        return Liveness::Unknown(format!(
            "the record names no namespace/name: {}",
            record.boxtable
        ));
    }
    let api: Api<BoxTable> = Api::namespaced(client.clone(), record.namespace());
    match api.get_opt(record.name()).await {
        Ok(Some(live)) if live.uid().as_deref() == Some(record.uid.as_str()) => Liveness::Alive,
        Ok(_) => Liveness::Gone,
        Err(error) => Liveness::Unknown(format!(
            "reading BoxTable {} failed: {}",
            record.boxtable,
            chain(&error)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BoxKind, BoxTableSpec};
    use crate::migrate::ownership::Origin;

    fn table() -> QualifiedName {
        QualifiedName::parse(Some("public"), "outbox").unwrap()
    }

    fn claimant(adopt: Option<&str>) -> BoxTable {
        let mut bt = BoxTable::new("orders", BoxTableSpec::new(BoxKind::Outbox, "db"));
        bt.metadata.namespace = Some("shop".to_owned());
        if let Some(value) = adopt {
            bt.annotations_mut()
                .insert(ADOPT_ANNOTATION.to_owned(), value.to_owned());
        }
        bt
    }

    fn record(boxtable: &str) -> OwnerRecord {
        OwnerRecord {
            cluster: Some("prod".to_owned()),
            boxtable: boxtable.to_owned(),
            uid: "old".to_owned(),
            origin: Origin::Created,
        }
    }

    fn verdict(adopt: Option<&str>, owner: &str, liveness: Liveness) -> Verdict {
        decide(
            &claimant(adopt),
            "shop",
            &table(),
            &record(owner),
            &liveness,
        )
    }

    #[test]
    fn a_gone_owner_of_the_same_namespace_is_taken_over_without_asking() {
        assert_eq!(
            verdict(None, "shop/old-name", Liveness::Gone),
            Verdict::TakeOver("old".to_owned())
        );
    }

    #[test]
    fn a_gone_owner_of_another_namespace_needs_the_annotation_naming_the_table_exactly() {
        let Verdict::Refuse(message) = verdict(None, "billing/orders", Liveness::Gone) else {
            panic!("taken over without consent");
        };
        assert!(
            message.contains("annotate boxtable orders brighter.dev/adopt=public.outbox"),
            "{message}"
        );
        for wrong in ["public.Outbox", " public.outbox", "outbox"] {
            assert!(matches!(
                verdict(Some(wrong), "billing/orders", Liveness::Gone),
                Verdict::Refuse(_)
            ));
        }
        assert_eq!(
            verdict(Some("public.outbox"), "billing/orders", Liveness::Gone),
            Verdict::TakeOver("old".to_owned())
        );
    }

    #[test]
    fn a_live_owner_keeps_its_table_even_against_the_annotation() {
        for owner in ["shop/other", "billing/orders"] {
            let Verdict::Refuse(message) = verdict(Some("public.outbox"), owner, Liveness::Alive)
            else {
                panic!("a live owner's table was taken");
            };
            assert!(message.contains("still exists"), "{message}");
            assert!(message.contains("delete that BoxTable"), "{message}");
        }
    }

    #[test]
    fn an_owner_of_another_cluster_needs_the_annotation() {
        let unknown = || Liveness::Unknown("recorded by cluster staging".to_owned());
        let Verdict::Refuse(message) = verdict(None, "shop/orders", unknown()) else {
            panic!("taken over without consent");
        };
        assert!(message.contains("cluster prod"), "{message}");
        assert!(
            message.contains("brighter.dev/adopt=public.outbox"),
            "{message}"
        );
        assert_eq!(
            verdict(Some("public.outbox"), "shop/orders", unknown()),
            Verdict::TakeOver("old".to_owned())
        );
    }
}
