//! The statuses this process wrote that its watch cache has not seen yet.
//!
//! A pass writes a status only when the one it computes differs from the object's, and the
//! object comes from the watch cache, which learns of a status write only when that write's watch
//! event arrives. A pass that starts in between (a trigger that waited for the previous pass to
//! end, a resync while the watch is reconnecting) would compare with the status from before the
//! write, and write it again with its Event. So each write is kept here with the
//! resourceVersion of the object its pass started from, and a pass that starts from that same
//! version compares with what was written instead. The entry goes as soon as the cache holds any
//! other version of the object (normally within milliseconds, on the write's own watch event).

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::crd::{BoxTable, BoxTableStatus};

/// The last status written for each object whose cache entry is older than that write.
#[derive(Default)]
pub(crate) struct OwnWrites(Mutex<HashMap<String, Written>>);

/// A status written by a pass that started from the object at `from` (its resourceVersion).
struct Written {
    from: String,
    status: BoxTableStatus,
}

impl OwnWrites {
    /// Records that a pass that started from `bt` (as the cache held it) wrote `status`.
    pub(crate) fn wrote(&self, bt: &BoxTable, status: &BoxTableStatus) {
        let (Some(uid), Some(from)) = (bt.uid(), bt.resource_version()) else {
            return;
        };
        if let Ok(mut writes) = self.0.lock() {
            writes.insert(
                uid,
                Written {
                    from,
                    status: status.clone(),
                },
            );
        }
    }

    /// The status a pass that starts from `bt` should compare with: the one this process wrote
    /// last while the cache still holds the version that write started from, else `bt`'s own.
    pub(crate) fn status_of(&self, bt: &BoxTable) -> Option<BoxTableStatus> {
        let behind = bt.metadata.uid.as_deref().and_then(|uid| {
            let mut writes = self.0.lock().ok()?;
            let written = writes.get(uid)?;
            if bt.metadata.resource_version.as_deref() == Some(written.from.as_str()) {
                return Some(written.status.clone());
            }
            writes.remove(uid);
            None
        });
        behind.or_else(|| bt.status.clone())
    }

    /// The cache took in `bt`: its entry goes once the cache holds another version than the
    /// one its write started from.
    pub(crate) fn seen(&self, bt: &BoxTable) {
        // Every watch event comes here: no allocation, and nothing to look up while no write is
        // waiting to be seen (nearly always).
        let Some(uid) = bt.metadata.uid.as_deref() else {
            return;
        };
        if let Ok(mut writes) = self.0.lock()
            && !writes.is_empty()
            && writes
                .get(uid)
                .is_some_and(|w| bt.metadata.resource_version.as_deref() != Some(w.from.as_str()))
        {
            writes.remove(uid);
        }
    }

    /// Forgets `uid` (the object went).
    pub(crate) fn forget(&self, uid: &str) {
        if let Ok(mut writes) = self.0.lock() {
            writes.remove(uid);
        }
    }

    /// Keeps only the entries of objects the cache still holds at the version their write
    /// started from (`cached(uid)` is that version, `None` once the object is gone).
    pub(crate) fn retain(&self, cached: impl Fn(&str) -> Option<String>) {
        if let Ok(mut writes) = self.0.lock() {
            writes.retain(|uid, w| cached(uid).as_deref() == Some(w.from.as_str()));
        }
    }

    /// How many writes the cache has not seen yet.
    pub(crate) fn entries(&self) -> usize {
        self.0.lock().map_or(0, |w| w.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BoxKind, BoxTableSpec};

    fn at(version: &str, applied: Option<u32>) -> BoxTable {
        let mut bt = BoxTable::new("orders", BoxTableSpec::new(BoxKind::Outbox, "db"));
        bt.metadata.uid = Some("u-1".to_owned());
        bt.metadata.resource_version = Some(version.to_owned());
        bt.status = applied.map(|v| BoxTableStatus {
            applied_version: Some(v),
            ..BoxTableStatus::default()
        });
        bt
    }

    #[test]
    fn a_pass_from_the_version_a_write_started_from_compares_with_that_write() {
        let writes = OwnWrites::default();
        let cached = at("10", Some(7));
        let written = BoxTableStatus {
            applied_version: Some(8),
            ..BoxTableStatus::default()
        };
        writes.wrote(&cached, &written);

        assert_eq!(writes.status_of(&cached), Some(written.clone()));
        assert_eq!(writes.entries(), 1, "kept while the cache is behind");
        // The write's own watch event: the cache moved on, and so does the comparison.
        let fresh = at("11", Some(8));
        writes.seen(&fresh);
        assert_eq!(writes.entries(), 0);
        assert_eq!(writes.status_of(&fresh), fresh.status);
    }

    #[test]
    fn a_pass_from_any_other_version_compares_with_the_cache_and_drops_the_entry() {
        let writes = OwnWrites::default();
        writes.wrote(&at("10", Some(7)), &BoxTableStatus::default());
        let changed_by_someone_else = at("12", Some(6));

        assert_eq!(
            writes.status_of(&changed_by_someone_else),
            changed_by_someone_else.status
        );
        assert_eq!(writes.entries(), 0);
    }

    #[test]
    fn entries_go_with_their_object_or_once_the_cache_moved_on() {
        let writes = OwnWrites::default();
        writes.wrote(&at("10", None), &BoxTableStatus::default());
        writes.seen(&at("10", None));
        assert_eq!(writes.entries(), 1, "the same version is no news");
        writes.retain(|_| Some("10".to_owned()));
        assert_eq!(writes.entries(), 1);
        writes.retain(|_| None);
        assert_eq!(writes.entries(), 0, "gone from the cache");
        writes.wrote(&at("10", None), &BoxTableStatus::default());
        writes.forget("u-1");
        assert_eq!(writes.entries(), 0);
    }
}
