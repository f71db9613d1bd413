//! Two BoxTables that manage the same database table: the older one keeps it, the later one
//! reports the conflict and does not migrate.
//!
//! Two objects are taken to manage the same table when they are in the same namespace, read the
//! same Secret key, and resolve to the same lowercased `schema.table`. (Objects that reach the same
//! database through different Secrets cannot be told apart without connecting; the advisory lock
//! still keeps them from migrating at once.)

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

/// The ordering that decides who keeps a table: earlier creation first, then name.
fn seniority(bt: &BoxTable) -> (Option<jiff::Timestamp>, String) {
    (bt.creation_timestamp().map(|t| t.0), bt.name_any())
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
