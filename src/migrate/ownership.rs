//! Which BoxTable owns a box table, recorded in the database itself: one line in the table's
//! comment, written in the transaction that creates or adopts the table.
//!
//! The record lives with the table, so every operator that can reach the database sees it, in any
//! namespace or cluster and through any Secret; and it dies with the table, so a table dropped and
//! created again by someone else is never taken for the old owner's. Brighter neither sets nor reads
//! table comments, and any comment a user wrote is kept: only the line starting with
//! [`RECORD_PREFIX`] belongs to the operator.
//!
//! ```text
//! brighter.dev/owner: cluster=prod boxtable=shop/orders-outbox uid=6f1c0d2e-... origin=created
//! ```
//!
//! # Identity
//! An owner is a BoxTable's identity, `cluster/namespace/name`: the cluster name the operator was
//! installed with (`--cluster-name`) and the object's namespace and name. The uid tells one
//! incarnation of that identity from the next: a BoxTable deleted and applied again, restored
//! from a backup, re-created by a GitOps tool or by a reinstall of the operator has a new uid but
//! the same identity, and takes its table back by itself ([`Claim::Reclaimed`]), keeping the
//! record's origin. A record written before cluster names were recorded counts as this cluster's.
//! Any other record is another owner's ([`Claim::Theirs`]); only the caller can tell whether that
//! owner still exists, and may let a run take over from one record uid it found gone or was
//! told to adopt from ([`Owner::takes_over`], [`Claim::TakenOver`]).

use tokio_postgres::Client;
use tokio_postgres::types::Type;

use super::RunError;
use crate::ident::QualifiedName;

/// The start of the comment line that records the owner. Never change it: records written by
/// earlier releases would no longer be recognised.
pub const RECORD_PREFIX: &str = "brighter.dev/owner:";

/// The comment of the relation whose oid is the SQL expression `$oid`, NULL without one: what
/// `obj_description(oid, 'pg_class')` returns, read in the statement itself. The function runs
/// the same query through the SQL-function executor, which sets it up again at every call
/// (0.29 against 0.10–0.15 ms per execution of the lock-free read on a warm session, PostgreSQL
/// 15), and the read runs at every periodic check of every table.
macro_rules! table_comment {
    ($oid:literal) => {
        concat!(
            "(SELECT d.description FROM pg_catalog.pg_description d WHERE d.objoid = ",
            $oid,
            " AND d.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objsubid = 0)"
        )
    };
}
pub(super) use table_comment;

/// The table's comment, looked up by namespace oid and name. No row: no table.
const COMMENT_SQL: &str = concat!(
    "SELECT ",
    table_comment!("c.oid"),
    " FROM pg_catalog.pg_class c \
     WHERE c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1) \
       AND c.relname = $2 AND c.relkind IN ('r', 'p')"
);

/// The lock a drop holds on the table while it checks ownership and counts rows: `ACCESS SHARE`
/// conflicts with `DROP TABLE` and `ALTER TABLE` (so the table checked is the table dropped), not
/// with an application's reads and writes.
pub fn lock_sql(table: &QualifiedName) -> String {
    format!("LOCK TABLE {} IN ACCESS SHARE MODE", table.quoted())
}

/// The BoxTable asking to migrate or drop a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The cluster name the operator runs with (`--cluster-name`).
    pub cluster: String,
    /// The BoxTable's namespace.
    pub namespace: String,
    /// The BoxTable's name.
    pub name: String,
    /// The BoxTable's `metadata.uid`: which incarnation of the identity this is.
    pub uid: String,
    /// The uid of a recorded owner this run may replace: one the caller found gone, or one the
    /// user asked to adopt from. `None`: only this identity's own records are taken back.
    pub takes_over: Option<String>,
}

impl Owner {
    /// `namespace/name`, as records and messages show it.
    pub fn boxtable(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The same owner, allowed to replace the record of `uid`.
    pub fn taking_over(mut self, uid: &str) -> Self {
        self.takes_over = Some(uid.to_owned());
        self
    }

    /// The record naming this owner with `origin`.
    fn record(&self, origin: Origin) -> OwnerRecord {
        OwnerRecord {
            cluster: Some(self.cluster.clone()),
            boxtable: self.boxtable(),
            uid: self.uid.clone(),
            origin,
        }
    }
}

/// How the owner came to own the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The operator created the table for this BoxTable.
    Created,
    /// The table existed (made by an application, by hand, or before ownership records) and this
    /// BoxTable took it over.
    Adopted,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Origin::Created => "created",
            Origin::Adopted => "adopted",
        }
    }
}

/// An ownership record as read from a table's comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The cluster name of the owner's operator; `None` in records written before cluster names
    /// were recorded.
    pub cluster: Option<String>,
    /// The owning BoxTable's `namespace/name` when the record was written.
    pub boxtable: String,
    /// The owning BoxTable's uid.
    pub uid: String,
    /// Created or adopted.
    pub origin: Origin,
}

/// What a table's record says about a claimant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The claimant owns the table.
    Ours(Origin),
    /// The record names the claimant's identity under another uid: the BoxTable was re-created,
    /// restored or re-installed, and takes its table back with the record's origin.
    Reclaimed(OwnerRecord),
    /// The record names the owner the claimant may take over from ([`Owner::takes_over`]); the
    /// table becomes the claimant's as adopted.
    TakenOver(OwnerRecord),
    /// No record: nobody owns it yet.
    Unowned,
    /// Another BoxTable owns it.
    Theirs(OwnerRecord),
}

impl Claim {
    /// How the claimant owns the table once this claim is acted on; `None` when it does not.
    pub fn origin(&self) -> Option<Origin> {
        match self {
            Claim::Ours(origin) => Some(*origin),
            Claim::Reclaimed(record) => Some(record.origin),
            Claim::TakenOver(_) => Some(Origin::Adopted),
            Claim::Unowned | Claim::Theirs(_) => None,
        }
    }
}

impl OwnerRecord {
    /// The comment line for this record.
    pub fn line(&self) -> String {
        let cluster = self
            .cluster
            .as_deref()
            .map(|c| format!("cluster={c} "))
            .unwrap_or_default();
        format!(
            "{RECORD_PREFIX} {cluster}boxtable={} uid={} origin={}",
            self.boxtable,
            self.uid,
            self.origin.as_str()
        )
    }

    /// The owner's namespace, as recorded.
    pub fn namespace(&self) -> &str {
        self.boxtable.split_once('/').map_or("", |(ns, _)| ns)
    }

    /// The owner's name, as recorded.
    pub fn name(&self) -> &str {
        self.boxtable
            .split_once('/')
            .map_or(self.boxtable.as_str(), |(_, name)| name)
    }

    /// Whether the record was written by an operator of `cluster` (a record without a cluster
    /// name counts as every cluster's: it predates them).
    pub fn of_cluster(&self, cluster: &str) -> bool {
        self.cluster.as_deref().is_none_or(|c| c == cluster)
    }
}

/// The ownership record in `comment`, if it holds one.
pub fn parse(comment: &str) -> Option<OwnerRecord> {
    let line = comment
        .lines()
        .find_map(|l| l.trim().strip_prefix(RECORD_PREFIX))?;
    let (mut cluster, mut uid, mut boxtable, mut origin) = (None, None, None, None);
    for field in line.split_whitespace() {
        match field.split_once('=') {
            Some(("cluster", v)) if !v.is_empty() => cluster = Some(v.to_owned()),
            Some(("uid", v)) if !v.is_empty() => uid = Some(v.to_owned()),
            Some(("boxtable", v)) => boxtable = Some(v.to_owned()),
            Some(("origin", "created")) => origin = Some(Origin::Created),
            Some(("origin", "adopted")) => origin = Some(Origin::Adopted),
            _ => {}
        }
    }
    Some(OwnerRecord {
        cluster,
        uid: uid?,
        boxtable: boxtable.unwrap_or_default(),
        // A record whose origin cannot be read is treated as the more careful one.
        origin: origin.unwrap_or(Origin::Adopted),
    })
}

/// `existing` with its ownership line replaced by `record`'s; every other line is kept.
pub fn with_record(existing: Option<&str>, record: &OwnerRecord) -> String {
    let mut lines: Vec<String> = existing
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().starts_with(RECORD_PREFIX))
        .map(str::to_owned)
        .collect();
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines.push(record.line());
    lines.join("\n")
}

/// What the record in `comment` says about `owner` (see the module's "Identity").
pub fn judge(comment: Option<&str>, owner: &Owner) -> Claim {
    match comment.and_then(parse) {
        None => Claim::Unowned,
        Some(record) if record.uid == owner.uid => Claim::Ours(record.origin),
        Some(record)
            if record.of_cluster(&owner.cluster) && record.boxtable == owner.boxtable() =>
        {
            Claim::Reclaimed(record)
        }
        Some(record) if owner.takes_over.as_deref() == Some(record.uid.as_str()) => {
            Claim::TakenOver(record)
        }
        Some(record) => Claim::Theirs(record),
    }
}

/// The table's comment: `None` when the table does not exist, `Some(None)` without a comment.
///
/// # Errors
/// [`RunError`] classified from the database error.
pub async fn read_comment(
    client: &Client,
    table: &QualifiedName,
) -> Result<Option<Option<String>>, RunError> {
    let op = "reading the ownership record";
    let rows = client
        .query_typed(
            COMMENT_SQL,
            &[
                (&table.schema.as_str(), Type::TEXT),
                (&table.table.as_str(), Type::TEXT),
            ],
        )
        .await
        .map_err(RunError::query(op, table))?;
    match rows.first() {
        None => Ok(None),
        Some(row) => Ok(Some(row.try_get(0).map_err(RunError::query(op, table))?)),
    }
}

/// `COMMENT ON TABLE` writing `record` into the table's comment and keeping the rest of
/// `existing`. Pure: the statement can go out with others in one round trip.
fn record_sql(table: &QualifiedName, existing: Option<&str>, record: &OwnerRecord) -> String {
    format!(
        "COMMENT ON TABLE {} IS {}",
        table.quoted(),
        literal(&with_record(existing, record))
    )
}

/// The statement recording `owner` as the creator of a table made in this transaction: a table
/// this transaction created has no comment yet, so there is nothing to read or keep.
pub fn created_sql(table: &QualifiedName, owner: &Owner) -> String {
    record_sql(table, None, &owner.record(Origin::Created))
}

/// `text` as a string literal (`COMMENT ON` takes no parameters). An escape string with every
/// backslash and quote doubled reads the same whatever `standard_conforming_strings` says, and
/// the driver's sessions speak UTF-8, where no byte of a multi-byte character is a quote or a
/// backslash.
fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 3);
    out.push_str("E'");
    for c in text.chars() {
        if matches!(c, '\'' | '\\') {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// Writes `record` into the table's comment, keeping the rest of `existing`. Runs inside the
/// caller's transaction, so the record commits (or rolls back) with the DDL that made it true.
///
/// # Errors
/// [`RunError`] classified from the database error.
///
/// # Idempotency
/// Writing the same record again leaves the same comment.
pub async fn write(
    client: &Client,
    table: &QualifiedName,
    existing: Option<&str>,
    record: &OwnerRecord,
) -> Result<(), RunError> {
    client
        .batch_execute(&record_sql(table, existing, record))
        .await
        .map_err(RunError::query("writing the ownership record", table))
}

/// Makes sure `owner` may change `table`, recording it as the owner when the table has no owner
/// yet (with `origin`), or when the owner takes the table back or over (see [`judge`]). Runs
/// inside the locked transaction, after the table exists, so the record commits with the DDL (or
/// the adoption) it describes.
///
/// # Errors
/// [`RunError::NotOwner`] when another BoxTable owns the table; database errors, classified.
///
/// # Idempotency
/// A table already owned by `owner` is left as it is.
pub async fn ensure_owner(
    client: &Client,
    table: &QualifiedName,
    owner: &Owner,
    origin: Origin,
) -> Result<(), RunError> {
    let comment = read_comment(client, table).await?.flatten();
    let claim = judge(comment.as_deref(), owner);
    let origin = match claim {
        Claim::Ours(_) => return Ok(()),
        Claim::Theirs(record) => {
            return Err(RunError::NotOwner {
                table: table.to_string(),
                record,
            });
        }
        Claim::Unowned => origin,
        Claim::Reclaimed(_) | Claim::TakenOver(_) => claim.origin().unwrap_or(Origin::Adopted),
    };
    write(client, table, comment.as_deref(), &owner.record(origin)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(uid: &str, origin: Origin) -> OwnerRecord {
        OwnerRecord {
            cluster: Some("prod".to_owned()),
            boxtable: "shop/orders".to_owned(),
            uid: uid.to_owned(),
            origin,
        }
    }

    fn owner(uid: &str) -> Owner {
        Owner {
            cluster: "prod".to_owned(),
            namespace: "shop".to_owned(),
            name: "orders".to_owned(),
            uid: uid.to_owned(),
            takes_over: None,
        }
    }

    #[test]
    fn a_literal_doubles_every_quote_and_backslash_inside_an_escape_string() {
        assert_eq!(literal("plain"), "E'plain'");
        assert_eq!(literal(r"it's a \n"), r"E'it''s a \\n'");
        assert_eq!(literal("é\nx"), "E'é\nx'");
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let written = record("6f1c", Origin::Created);
        assert_eq!(parse(&written.line()), Some(written));
        let legacy = OwnerRecord {
            cluster: None,
            ..record("6f1c", Origin::Adopted)
        };
        assert_eq!(parse(&legacy.line()), Some(legacy));
    }

    #[test]
    fn a_user_comment_is_kept_around_the_record() {
        let comment = with_record(
            Some("orders of the shop\nsee wiki"),
            &record("a", Origin::Adopted),
        );
        assert!(
            comment.starts_with("orders of the shop\nsee wiki\n"),
            "{comment}"
        );
        let replaced = with_record(Some(&comment), &record("a", Origin::Created));
        assert_eq!(replaced.matches(RECORD_PREFIX).count(), 1, "{replaced}");
        assert!(
            replaced.starts_with("orders of the shop\nsee wiki\n"),
            "{replaced}"
        );
        assert_eq!(parse(&replaced).map(|r| r.origin), Some(Origin::Created));
    }

    #[test]
    fn only_the_recorded_uid_owns_the_table() {
        let comment = record("a", Origin::Created).line();
        assert_eq!(
            judge(Some(&comment), &owner("a")),
            Claim::Ours(Origin::Created)
        );
        let mut other = owner("b");
        other.name = "orders-copy".to_owned();
        assert!(matches!(judge(Some(&comment), &other), Claim::Theirs(r) if r.uid == "a"));
        assert_eq!(judge(Some("just a note"), &owner("a")), Claim::Unowned);
        assert_eq!(judge(None, &owner("a")), Claim::Unowned);
    }

    #[test]
    fn the_same_identity_under_a_new_uid_takes_its_table_back_with_its_origin() {
        let comment = record("old", Origin::Created).line();
        let claim = judge(Some(&comment), &owner("new"));
        assert!(
            matches!(&claim, Claim::Reclaimed(r) if r.uid == "old"),
            "{claim:?}"
        );
        assert_eq!(claim.origin(), Some(Origin::Created));
        let legacy = "brighter.dev/owner: uid=old boxtable=shop/orders origin=created";
        assert!(matches!(
            judge(Some(legacy), &owner("new")),
            Claim::Reclaimed(_)
        ));
    }

    #[test]
    fn another_cluster_namespace_or_name_is_someone_else() {
        let comment = record("old", Origin::Created).line();
        let mut elsewhere = owner("new");
        elsewhere.cluster = "staging".to_owned();
        let mut other_namespace = owner("new");
        other_namespace.namespace = "billing".to_owned();
        let mut other_name = owner("new");
        other_name.name = "orders-v2".to_owned();
        for claimant in [elsewhere, other_namespace, other_name] {
            assert!(
                matches!(judge(Some(&comment), &claimant), Claim::Theirs(_)),
                "{claimant:?}"
            );
        }
    }

    #[test]
    fn a_takeover_replaces_only_the_record_it_names_and_as_adopted() {
        let comment = record("gone", Origin::Created).line();
        let mut successor = owner("new");
        successor.name = "orders-v2".to_owned();
        let claim = judge(Some(&comment), &successor.clone().taking_over("gone"));
        assert!(matches!(claim, Claim::TakenOver(_)), "{claim:?}");
        assert_eq!(claim.origin(), Some(Origin::Adopted));
        assert!(matches!(
            judge(Some(&comment), &successor.taking_over("another")),
            Claim::Theirs(_)
        ));
    }

    #[test]
    fn a_record_without_a_readable_origin_counts_as_adopted() {
        let parsed = parse("brighter.dev/owner: uid=a boxtable=shop/x origin=").unwrap();
        assert_eq!(parsed.origin, Origin::Adopted);
        assert_eq!(parse("brighter.dev/owner: boxtable=shop/x"), None);
    }
}
