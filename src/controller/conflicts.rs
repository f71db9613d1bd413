//! Two BoxTables in one namespace that manage the same database table, seen from the cache
//! without connecting: the older one keeps it, the later one reports the conflict and does not
//! migrate.
//!
//! Two objects are taken to manage the same table when they are in the same namespace, read the
//! same Secret key, and resolve to the same lowercased `schema.table`. Objects that reach the same
//! table any other way (another namespace, cluster or Secret) are caught in the database instead,
//! by the table's ownership record (see [`crate::migrate::ownership`]).

use kube::ResourceExt;

use crate::crd::BoxTable;
use crate::plan;

/// What identifies the managed table for conflict purposes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Claim {
    namespace: String,
    secret: String,
    key: String,
    table: String,
}

fn claim(bt: &BoxTable) -> Option<Claim> {
    let table = plan::resolve_table(&bt.spec).ok()?;
    Some(Claim {
        namespace: bt.namespace().unwrap_or_default(),
        secret: bt.spec.database.secret_ref.name.clone(),
        key: bt.spec.database.secret_ref.key.clone(),
        table: table.to_string(),
    })
}

/// The ordering that decides who keeps a table: one that has already brought it to a version
/// first, then earlier creation, then name. (Creation timestamps have whole seconds, so without
/// the first key an object created in the same second as the owner, with a name that sorts
/// earlier, would take the table over.)
fn seniority(bt: &BoxTable) -> (bool, Option<jiff::Timestamp>, String) {
    let unproven = bt.status.as_ref().and_then(|s| s.applied_version).is_none();
    (
        unproven,
        bt.creation_timestamp().map(|t| t.0),
        bt.name_any(),
    )
}

/// The name of an older BoxTable (not being deleted) that already manages `bt`'s table, if any.
pub fn conflicting_owner<'a>(
    bt: &BoxTable,
    all: impl IntoIterator<Item = &'a BoxTable>,
) -> Option<String> {
    let mine = claim(bt)?;
    let my_rank = seniority(bt);
    all.into_iter()
        .filter(|other| other.uid() != bt.uid() && other.metadata.deletion_timestamp.is_none())
        .filter(|other| claim(other).as_ref() == Some(&mine))
        .filter(|other| seniority(other) < my_rank)
        .min_by_key(|other| seniority(other))
        .map(|other| other.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BoxKind, BoxTableSpec, BoxTableStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn boxtable(name: &str, created: i64, applied: Option<u32>) -> BoxTable {
        let mut bt = BoxTable::new(name, BoxTableSpec::new(BoxKind::Outbox, "db"));
        bt.metadata.namespace = Some("shop".to_owned());
        bt.metadata.uid = Some(name.to_owned());
        bt.metadata.creation_timestamp = jiff::Timestamp::from_second(created).ok().map(Time);
        bt.status = applied.map(|v| BoxTableStatus {
            applied_version: Some(v),
            ..BoxTableStatus::default()
        });
        bt
    }

    #[test]
    fn the_earlier_boxtable_keeps_the_table() {
        let first = boxtable("orders", 10, None);
        let later = boxtable("a-copy", 11, None);
        let all = [first.clone(), later.clone()];
        assert_eq!(conflicting_owner(&later, &all), Some("orders".to_owned()));
        assert_eq!(conflicting_owner(&first, &all), None);
    }

    #[test]
    fn one_that_already_migrated_the_table_keeps_it_against_a_same_second_rival() {
        let owner = boxtable("orders", 10, Some(8));
        let rival = boxtable("a-copy", 10, None);
        let all = [owner.clone(), rival.clone()];
        assert_eq!(conflicting_owner(&rival, &all), Some("orders".to_owned()));
        assert_eq!(conflicting_owner(&owner, &all), None);
    }
}
