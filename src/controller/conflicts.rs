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

use std::collections::{HashMap, HashSet};
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
/// events. A pass asks it for the few objects that may name its table instead of walking every
/// cached object, which made each pass cost as much as the cache is large (10,000 comparisons
/// and a 10,000-entry copy of the cache per pass in a fleet of 10,000).
#[derive(Default)]
pub struct TableIndex {
    state: Mutex<Index>,
}

#[derive(Default)]
struct Index {
    live: Tables,
    /// Being built by a relist (between its `Init` and `InitDone`), then put in `live`'s place.
    relist: Option<Tables>,
}

/// Kept small, as it holds an entry per cached object: a table is its key's hash (two tables
/// with the same hash only make a pass look at one more object, which the check then rules out),
/// and an object is its namespace and name alone.
#[derive(Default)]
struct Tables {
    by_table: HashMap<u64, HashSet<ObjectRef<BoxTable>>>,
    table_of: HashMap<ObjectRef<BoxTable>, u64>,
}

impl Tables {
    fn insert(&mut self, bt: &BoxTable) {
        let object = lean(bt);
        self.remove(&object);
        let key = table_key(&bt.spec);
        self.by_table.entry(key).or_default().insert(object.clone());
        self.table_of.insert(object, key);
    }

    fn remove(&mut self, object: &ObjectRef<BoxTable>) {
        let Some(key) = self.table_of.remove(object) else {
            return;
        };
        if let Some(objects) = self.by_table.get_mut(&key) {
            objects.remove(object);
            if objects.is_empty() {
                self.by_table.remove(&key);
            }
        }
    }
}

/// A hash of the schema and table as written, ASCII-lowercased: equal for any two specs
/// [`may_name_the_same_table`] lets through.
fn table_key(spec: &BoxTableSpec) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    for name in [spec.schema.as_str(), raw_table(spec)] {
        for byte in name.bytes() {
            hasher.write_u8(byte.to_ascii_lowercase());
        }
        hasher.write_u8(0);
    }
    hasher.finish()
}

/// `bt`'s namespace and name (what [`ObjectRef`] compares), without its uid and version.
fn lean(bt: &BoxTable) -> ObjectRef<BoxTable> {
    let object = ObjectRef::new(&bt.name_any());
    match bt.namespace() {
        Some(namespace) => object.within(&namespace),
        None => object,
    }
}

fn raw_table(spec: &BoxTableSpec) -> &str {
    spec.table
        .as_deref()
        .unwrap_or(plan::default_table(spec.box_kind))
}

impl TableIndex {
    fn state(&self) -> MutexGuard<'_, Index> {
        // Nothing panics while holding it; the maps in a poisoned state are still whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Follows one event of the controller's BoxTable watch (after its cache took it in).
    pub fn event(&self, event: &Event<BoxTable>) {
        let mut index = self.state();
        match event {
            Event::Apply(bt) => index.live.insert(bt),
            Event::Delete(bt) => index.live.remove(&lean(bt)),
            Event::Init => index.relist = Some(Tables::default()),
            Event::InitApply(bt) => {
                if let Some(relist) = index.relist.as_mut() {
                    relist.insert(bt);
                }
            }
            Event::InitDone => {
                if let Some(relist) = index.relist.take() {
                    index.live = relist;
                }
            }
        }
    }

    /// The cached objects, `bt` among them, whose schema and table as written may name the same
    /// table as `bt`'s.
    pub fn same_table(&self, bt: &BoxTable) -> Vec<ObjectRef<BoxTable>> {
        self.state()
            .live
            .by_table
            .get(&table_key(&bt.spec))
            .map(|objects| objects.iter().cloned().collect())
            .unwrap_or_default()
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
    fn the_table_index_follows_applies_renames_deletes_and_relists() {
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

        let b_moved = at_table("b", "sales", "inbox");
        index.event(&Event::Apply(b_moved.clone()));
        assert_eq!(same_table(&index, &a), ["a"], "b's old table forgets it");
        assert_eq!(same_table(&index, &c), ["b", "c"]);

        index.event(&Event::Delete(c.clone()));
        assert_eq!(same_table(&index, &b_moved), ["b"]);

        // A relist replaces everything once it is done: a deletion missed while the watch was
        // down (b) goes, and until then the index answers as before.
        index.event(&Event::Init);
        index.event(&Event::InitApply(a.clone()));
        assert_eq!(same_table(&index, &b_moved), ["b"]);
        index.event(&Event::InitDone);
        assert!(same_table(&index, &b_moved).is_empty());
        assert_eq!(same_table(&index, &a), ["a"]);
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
