//! Two BoxTables that manage the same database table, seen from the cache and the Secrets they
//! read, without connecting: the older one keeps it, the later one reports the conflict and does
//! not migrate.
//!
//! Two objects are taken to manage the same table when they resolve to the same lowercased
//! `schema.table` on the same database: the same host, port and database name, as their
//! connection strings say, whichever Secret, key or connection-string form each reads it from. An
//! unreadable connection string stands for its Secret key (two objects reading the same key
//! reach the same database). Objects that reach the same table in ways the connection strings do
//! not show (an alias of the host, another cluster) are caught in the database instead, by the
//! table's ownership record (see [`crate::migrate::ownership`]).

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{Mutex, MutexGuard};

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

use crate::crd::{BoxTable, BoxTableSpec};
use crate::db::Connection;
use crate::pass::plan;

/// The cached BoxTables by the table they name (schema and table as written, ASCII-lowercased:
/// see [`may_name_the_same_table`]), kept in step with the controller's cache by its watch
/// events and swept against it. A pass asks it for the few objects that may name its table
/// instead of walking every cached object, which made each pass cost as much as the cache is
/// large (10,000 comparisons and a 10,000-entry copy of the cache per pass in a fleet of 10,000).
///
/// Kept small, as it holds an entry per cached object: a table is its key's hash, an object its
/// `namespace/name`. Neither can make a pass miss a rival: an object is always filed under its
/// current table, and what the index answers is checked against the cache (a hash shared by two
/// tables, or an entry left under a table an object no longer names, only makes a pass look at
/// one more object). Entries left that way go at the next [`TableIndex::sweep`].
#[derive(Default)]
pub struct TableIndex {
    by_table: Mutex<HashMap<u64, Vec<Box<str>>>>,
}

/// A hash of the schema and table as written, ASCII-lowercased: equal for any two specs
/// [`may_name_the_same_table`] lets through (the key [`TableIndex::sweep`] compares).
pub fn table_key(spec: &BoxTableSpec) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    for name in [spec.schema.as_str(), raw_table(spec)] {
        for byte in name.bytes() {
            hasher.write_u8(byte.to_ascii_lowercase());
        }
        hasher.write_u8(0);
    }
    hasher.finish()
}

fn raw_table(spec: &BoxTableSpec) -> &str {
    spec.table
        .as_deref()
        .unwrap_or(plan::default_table(spec.box_kind))
}

/// `namespace/name` (neither can hold a `/`).
fn entry(bt: &BoxTable) -> Box<str> {
    format!("{}/{}", bt.namespace().unwrap_or_default(), bt.name_any()).into_boxed_str()
}

fn object(entry: &str) -> ObjectRef<BoxTable> {
    match entry.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() => ObjectRef::new(name).within(namespace),
        Some((_, name)) => ObjectRef::new(name),
        None => ObjectRef::new(entry),
    }
}

impl TableIndex {
    fn tables(&self) -> MutexGuard<'_, HashMap<u64, Vec<Box<str>>>> {
        // Nothing panics while holding it; the map in a poisoned state is still whole.
        self.by_table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Follows one event of the controller's BoxTable watch (after its cache took it in).
    pub fn event(&self, event: &Event<BoxTable>) {
        match event {
            Event::Apply(bt) | Event::InitApply(bt) => {
                let entry = entry(bt);
                let mut tables = self.tables();
                let objects = tables
                    .entry(table_key(&bt.spec))
                    .or_insert_with(|| Vec::with_capacity(1));
                if !objects.contains(&entry) {
                    objects.push(entry);
                }
            }
            Event::Delete(bt) => {
                let entry = entry(bt);
                let key = table_key(&bt.spec);
                let mut tables = self.tables();
                if let Some(objects) = tables.get_mut(&key) {
                    objects.retain(|o| *o != entry);
                    if objects.is_empty() {
                        tables.remove(&key);
                    }
                }
            }
            // A relist files every object again; what it did not list goes at the sweep that
            // follows it (see `memory`).
            Event::Init | Event::InitDone => {}
        }
    }

    /// The objects, `bt` among them, that may name the same table as `bt` (to be looked up in
    /// the cache and checked there).
    pub fn same_table(&self, bt: &BoxTable) -> Vec<ObjectRef<BoxTable>> {
        self.tables()
            .get(&table_key(&bt.spec))
            .map(|objects| objects.iter().map(|o| object(o)).collect())
            .unwrap_or_default()
    }

    /// Keeps only the entries of objects `cached` (the controller's cache) holds, under the
    /// table each names now.
    pub fn sweep(&self, cached: impl Fn(&ObjectRef<BoxTable>) -> Option<u64>) {
        self.tables().retain(|key, objects| {
            objects.retain(|o| cached(&object(o)) == Some(*key));
            objects.shrink_to_fit();
            !objects.is_empty()
        });
    }
}

/// Where a BoxTable's table lives, for conflict purposes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Database {
    /// The first host (lowercased), its port and the database name from the connection string.
    Server {
        /// Host name or address, lowercased.
        host: String,
        /// Port.
        port: u16,
        /// Database name (libpq's default: the user name).
        database: String,
    },
    /// A Secret that gives no connection: its Secret key stands for it.
    SecretKey {
        /// Namespace.
        namespace: String,
        /// Secret name.
        secret: String,
        /// Key.
        key: String,
    },
}

impl Database {
    /// The database `connection` (read for `bt`) points at; `None` when its Secret gives none.
    pub fn of(bt: &BoxTable, connection: Option<&Connection>) -> Self {
        let Some(settings) = connection.map(Connection::settings) else {
            return Self::secret_key(bt);
        };
        match settings.endpoints().into_iter().next() {
            Some((host, port)) => Database::Server {
                host: host.to_ascii_lowercase(),
                port,
                database: settings.dbname().unwrap_or(settings.user()).to_owned(),
            },
            None => Self::secret_key(bt),
        }
    }

    fn secret_key(bt: &BoxTable) -> Self {
        Database::SecretKey {
            namespace: bt.namespace().unwrap_or_default(),
            secret: bt.spec.database.secret_ref.name.clone(),
            key: bt.spec.database.secret_ref.key().to_owned(),
        }
    }
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

/// The older BoxTables (not being deleted) that resolve to the same `schema.table` as `bt`, the
/// most senior first: each keeps the table from `bt` if it is on the same [`Database`].
pub fn seniors<'a>(
    bt: &BoxTable,
    all: impl IntoIterator<Item = &'a BoxTable>,
) -> Vec<&'a BoxTable> {
    let Ok(mine) = plan::resolve_table(&bt.spec) else {
        return Vec::new();
    };
    let my_rank = seniority(bt);
    let mut older: Vec<&BoxTable> = all
        .into_iter()
        .filter(|other| {
            other.metadata.uid != bt.metadata.uid && other.metadata.deletion_timestamp.is_none()
        })
        .filter(|other| may_name_the_same_table(&bt.spec, &other.spec))
        .filter(|other| plan::resolve_table(&other.spec).is_ok_and(|t| t == mine))
        .filter(|other| seniority(other) < my_rank)
        .collect();
    older.sort_by_key(|other| seniority(other));
    older
}

/// Whether `a` and `b` can resolve to the same `schema.table`: their schema and table names as
/// written are equal but for ASCII case (resolution validates and ASCII-lowercases each). It
/// allocates nothing, so a pass over a cache of thousands of objects resolves only the few that
/// pass it, instead of validating and lowercasing every name in the cache twice.
fn may_name_the_same_table(a: &BoxTableSpec, b: &BoxTableSpec) -> bool {
    a.schema.eq_ignore_ascii_case(&b.schema) && raw_table(a).eq_ignore_ascii_case(raw_table(b))
}

/// The older BoxTable that already manages `bt`'s table on `database`, if any, as
/// `namespace/name`; `database_of` says where another BoxTable's table lives (`None` when it
/// cannot be told).
pub fn conflicting_owner<'a>(
    bt: &BoxTable,
    database: &Database,
    all: impl IntoIterator<Item = &'a BoxTable>,
    mut database_of: impl FnMut(&BoxTable) -> Option<Database>,
) -> Option<String> {
    seniors(bt, all)
        .into_iter()
        .find(|other| database_of(other).as_ref() == Some(database))
        .map(|other| {
            format!(
                "{}/{}",
                other.namespace().unwrap_or_default(),
                other.name_any()
            )
        })
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

    fn at_table(name: &str, schema: &str, table: &str) -> BoxTable {
        let mut bt = boxtable(name, 0, None);
        bt.spec.schema = schema.to_owned();
        bt.spec.table = Some(table.to_owned());
        bt
    }

    fn same_table(index: &TableIndex, bt: &BoxTable) -> Vec<String> {
        let mut names: Vec<String> = index.same_table(bt).into_iter().map(|o| o.name).collect();
        names.sort();
        names
    }

    #[test]
    fn the_table_index_files_each_object_under_its_table_and_the_sweep_drops_what_left() {
        let index = TableIndex::default();
        let a = at_table("a", "Sales", "Outbox");
        let b = at_table("b", "sales", "outbox");
        let c = at_table("c", "sales", "inbox");
        for bt in [&a, &b, &c] {
            index.event(&Event::Apply(bt.clone()));
        }
        assert_eq!(
            same_table(&index, &a),
            ["a", "b"],
            "names equal but for case"
        );
        assert_eq!(same_table(&index, &c), ["c"]);

        // b now names c's table: it is found there at once; its old entry only goes at a sweep.
        let b_moved = at_table("b", "sales", "inbox");
        index.event(&Event::Apply(b_moved.clone()));
        assert_eq!(same_table(&index, &c), ["b", "c"]);
        index.event(&Event::Delete(c.clone()));
        assert_eq!(same_table(&index, &b_moved), ["b"]);

        let cache = [a.clone(), b_moved.clone()];
        index.sweep(|object| {
            cache
                .iter()
                .find(|bt| ObjectRef::from_obj(*bt) == *object)
                .map(|bt| table_key(&bt.spec))
        });
        assert_eq!(same_table(&index, &a), ["a"], "b's old entry is gone");
        assert_eq!(same_table(&index, &b_moved), ["b"]);
        assert_eq!(
            index.same_table(&a)[0],
            ObjectRef::from_obj(&a),
            "an entry finds its object in the cache"
        );
    }

    fn shop() -> Database {
        Database::Server {
            host: "db".to_owned(),
            port: 5432,
            database: "shop".to_owned(),
        }
    }

    fn owner(bt: &BoxTable, all: &[BoxTable]) -> Option<String> {
        conflicting_owner(bt, &shop(), all, |_| Some(shop()))
    }

    #[test]
    fn the_earlier_boxtable_keeps_the_table() {
        let first = boxtable("orders", 10, None);
        let later = boxtable("a-copy", 11, None);
        let all = [first.clone(), later.clone()];
        assert_eq!(owner(&later, &all), Some("shop/orders".to_owned()));
        assert_eq!(owner(&first, &all), None);
    }

    #[test]
    fn one_that_already_migrated_the_table_keeps_it_against_a_same_second_rival() {
        let owner_bt = boxtable("orders", 10, Some(8));
        let rival = boxtable("a-copy", 10, None);
        let all = [owner_bt.clone(), rival.clone()];
        assert_eq!(owner(&rival, &all), Some("shop/orders".to_owned()));
        assert_eq!(owner(&owner_bt, &all), None);
    }

    #[test]
    fn connection_strings_of_every_form_name_the_same_database() {
        let bt = boxtable("orders", 10, None);
        let of = |s: &str| Database::of(&bt, Some(&Connection::parse(s).unwrap()));
        let forms = [
            "postgres://app:secret@DB:5432/shop?sslmode=require",
            "host=db dbname=shop user=other password=x",
            "Host=db;Port=5432;Database=shop;Username=app;Password=y",
        ];
        for form in forms {
            assert_eq!(of(form), shop(), "{form}");
        }
        assert_ne!(of("postgres://app@db:5433/shop"), shop());
        assert_ne!(of("postgres://app@db/billing"), shop());
        assert_eq!(
            of("host=db user=shop"),
            shop(),
            "libpq's default database is the user name"
        );
    }

    #[test]
    fn a_table_on_another_database_is_no_conflict() {
        let first = boxtable("orders", 10, None);
        let later = boxtable("a-copy", 11, None);
        let all = [first.clone(), later.clone()];
        let elsewhere = Database::Server {
            host: "db".to_owned(),
            port: 5432,
            database: "billing".to_owned(),
        };
        assert_eq!(
            conflicting_owner(&later, &shop(), &all, |_| Some(elsewhere.clone())),
            None
        );
        assert_eq!(conflicting_owner(&later, &shop(), &all, |_| None), None);
    }

    fn named(name: &str, created: i64, schema: &str, table: Option<&str>) -> BoxTable {
        let mut bt = boxtable(name, created, None);
        bt.spec.schema = schema.to_owned();
        bt.spec.table = table.map(str::to_owned);
        bt
    }

    #[test]
    fn names_written_in_another_case_are_the_same_table_and_other_names_are_not() {
        let first = named("orders", 10, "Sales", Some("Outbox"));
        let same = [
            named("upper", 11, "SALES", Some("OUTBOX")),
            named("default-table", 11, "sales", None),
        ];
        let mut inbox = named("inbox-default", 11, "sales", None);
        inbox.spec.box_kind = BoxKind::Inbox;
        let different = [
            named("other-schema", 11, "billing", Some("outbox")),
            named("other-table", 11, "sales", Some("outbox2")),
            inbox,
        ];
        for later in &same {
            let all = [first.clone(), later.clone()];
            assert_eq!(
                owner(later, &all),
                Some("shop/orders".to_owned()),
                "{}",
                later.name_any()
            );
        }
        for later in &different {
            let all = [first.clone(), later.clone()];
            assert_eq!(owner(later, &all), None, "{}", later.name_any());
        }
    }

    #[test]
    fn the_cheap_name_check_never_rules_out_a_pair_that_resolves_to_the_same_table() {
        let schemas = ["public", "PUBLIC", "Sales", "sales", "s1", "bad-name", ""];
        let tables = [
            None,
            Some("Outbox"),
            Some("outbox"),
            Some("OUTBOX2"),
            Some("Inbox"),
            Some("x y"),
        ];
        let mut specs = Vec::new();
        for kind in [BoxKind::Outbox, BoxKind::Inbox] {
            for schema in schemas {
                for table in tables {
                    let mut spec = BoxTableSpec::new(kind, "db");
                    spec.schema = schema.to_owned();
                    spec.table = table.map(str::to_owned);
                    specs.push(spec);
                }
            }
        }
        for a in &specs {
            for b in &specs {
                let resolve_equal = matches!(
                    (plan::resolve_table(a), plan::resolve_table(b)),
                    (Ok(x), Ok(y)) if x == y
                );
                if resolve_equal {
                    assert!(may_name_the_same_table(a, b), "{a:?} / {b:?}");
                }
            }
        }
    }
}
