//! What this process's held locks mean to everyone else: how many advisory locks it holds right
//! now, and the sessions found blocked on a lock it holds just before releasing it.
//!
//! Brighter and the operator poll with `pg_try_advisory_lock`, so a polling waiter never shows in
//! `pg_locks` (it holds nothing between tries; its own side counts its wait). A session that waits
//! in a blocking `pg_advisory_lock` (a script, a DBA, another tool) does: an ungranted advisory
//! row on the same key, waiting since its statement started.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_postgres::types::Type;

use super::LockIdentity;
use crate::db::{Read, Session};

/// Locks held now by this process, across every session.
static HELD: AtomicU64 = AtomicU64::new(0);

/// Advisory locks this process holds at this moment (0 when idle; at most one per running pass).
pub fn held_now() -> u64 {
    HELD.load(Ordering::Relaxed)
}

/// Counts one held lock in [`held_now`] until it is dropped. Create it once the lock is taken and
/// drop it once it is released (or the session is gone, which frees it on the server).
#[derive(Debug)]
pub struct HeldLock(());

impl HeldLock {
    /// Counts a lock just taken.
    pub fn taken() -> Self {
        HELD.fetch_add(1, Ordering::Relaxed);
        HeldLock(())
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Other sessions blocked on `pg_advisory_lock` for a lock this session holds, waiting for it:
/// ungranted advisory rows on the same key in the same database; each waits since its statement
/// started (`query_start`, as `pg_locks.waitstart` only exists from PostgreSQL 14 on).
pub const BLOCKED: Read = Read {
    sql: "SELECT count(*)::int8, \
            coalesce(extract(epoch FROM max(now() - a.query_start)), 0)::float8 \
          FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
          WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1 \
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
            AND l.classid = (($1::int8 >> 32) & 4294967295)::oid \
            AND l.objid = ($1::int8 & 4294967295)::oid",
    types: &[Type::INT8],
};

/// The sessions found waiting on a held lock just before it was released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Blocked {
    /// Sessions waiting in `pg_advisory_lock` on the same key.
    pub sessions: u32,
    /// How long the longest of them had been waiting (zero when none).
    pub longest: Duration,
}

/// Reads who is blocked on `identity`'s lock (held by this session).
///
/// # Errors
/// The database error when the query fails.
pub async fn blocked_on(
    session: &Session,
    identity: &LockIdentity,
) -> Result<Blocked, tokio_postgres::Error> {
    let row = session.read_one(BLOCKED, &[&identity.key()]).await?;
    let sessions: i64 = row.try_get(0)?;
    let longest: f64 = row.try_get(1)?;
    Ok(Blocked {
        sessions: u32::try_from(sessions).unwrap_or(u32::MAX),
        longest: Duration::try_from_secs_f64(longest).unwrap_or_default(),
    })
}
