//! The lock identity: lockKey text, the SHA-256 bigint key, and how `pg_locks` shows it.
//!
//! NEVER CHANGE THIS DERIVATION. Brighter applications derive the same key from the same table; a
//! different key means the application and the operator can migrate one table at the same time.

use sha2::{Digest, Sha256};
use std::fmt;

use crate::ident::QualifiedName;

/// Brighter's lock namespace, written as a decimal prefix of the hashed text.
pub const LOCK_NAMESPACE: &str = "74726";

/// The prefix of every lockKey; its case is kept.
pub const LOCK_KEY_PREFIX: &str = "BrighterMigration_";

/// Derives the bigint key: the first 8 bytes of SHA-256 over UTF-8 `"74726:" + lockKey`, read
/// big-endian as a signed 64-bit integer.
pub fn derive_key(lock_key: &str) -> i64 {
    let mut hasher = Sha256::new();
    hasher.update(LOCK_NAMESPACE.as_bytes());
    hasher.update(b":");
    hasher.update(lock_key.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// A lockKey and its derived bigint key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockIdentity {
    lock_key: String,
    key: i64,
}

impl LockIdentity {
    /// The identity Brighter's runner derives for a box table: `BrighterMigration_<schema>.<table>`
    /// with both identifiers already lowercased by [`QualifiedName`].
    pub fn for_table(name: &QualifiedName) -> Self {
        Self::from_lock_key(&format!("{LOCK_KEY_PREFIX}{}.{}", name.schema, name.table))
    }

    /// The identity of an arbitrary lockKey, taken verbatim (case matters to the hash).
    pub fn from_lock_key(lock_key: &str) -> Self {
        Self {
            lock_key: lock_key.to_owned(),
            key: derive_key(lock_key),
        }
    }

    /// The lockKey text.
    pub fn lock_key(&self) -> &str {
        &self.lock_key
    }

    /// The bigint passed to `pg_try_advisory_lock`.
    pub fn key(&self) -> i64 {
        self.key
    }

    /// The key's 8 bytes as 16 lowercase hex digits.
    pub fn key_hex(&self) -> String {
        format!("{:016x}", self.key as u64)
    }

    /// `pg_locks.classid`: the high 32 bits of the key, unsigned.
    pub fn classid(&self) -> u32 {
        ((self.key as u64) >> 32) as u32
    }

    /// `pg_locks.objid`: the low 32 bits of the key, unsigned.
    pub fn objid(&self) -> u32 {
        (self.key as u64 & 0xffff_ffff) as u32
    }

    /// A ready-to-run query showing who holds this lock, for people mapping a lock back to a table.
    pub fn holder_query(&self) -> String {
        format!(
            "SELECT l.pid, a.application_name, a.client_addr, a.backend_start, a.state, l.granted\n  \
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid\n \
             WHERE l.locktype = 'advisory' AND l.classid = {} AND l.objid = {} AND l.objsubid = 1;\n\
             -- {} = key {}",
            self.classid(),
            self.objid(),
            self.lock_key,
            self.key
        )
    }
}

impl fmt::Display for LockIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (key {})", self.lock_key, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_outbox_key_matches_the_published_vector() {
        let id = LockIdentity::from_lock_key("BrighterMigration_public.outbox");
        assert_eq!(id.key(), -5469556670739463647);
        assert_eq!(id.key_hex(), "b4183b2fd9b4c221");
        assert_eq!((id.classid(), id.objid()), (3021486895, 3652502049));
    }

    #[test]
    fn table_identity_lowercases_but_keeps_the_prefix_case() {
        let name = QualifiedName::parse(Some("Public"), "Outbox").unwrap();
        assert_eq!(
            LockIdentity::for_table(&name).lock_key(),
            "BrighterMigration_public.outbox"
        );
    }

    #[test]
    fn holder_query_uses_unsigned_halves() {
        let q = LockIdentity::from_lock_key("BrighterMigration_public.outbox").holder_query();
        assert!(
            q.contains("classid = 3021486895 AND l.objid = 3652502049"),
            "{q}"
        );
    }
}
