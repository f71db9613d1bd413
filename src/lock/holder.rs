//! Who holds an advisory lock: `pg_locks` joined with `pg_stat_activity`, masking the key's halves
//! so negative keys match.

use jiff::Timestamp;
use std::fmt;
use tokio_postgres::Client;

use super::LockIdentity;

/// The holder lookup. `classid`/`objid` are the key's unsigned halves: mask, never shift naively.
pub const HOLDER_SQL: &str = "SELECT a.pid, a.application_name, host(a.client_addr), \
       (extract(epoch FROM coalesce(a.xact_start, a.query_start, a.backend_start)) * 1000)::int8 \
     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
       AND l.classid = (($1::int8 >> 32) & 4294967295)::oid \
       AND l.objid = ($1::int8 & 4294967295)::oid \
     ORDER BY a.backend_start LIMIT 1";

/// The session holding a lock, as `pg_stat_activity` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Backend process id.
    pub pid: i32,
    /// The holder's `application_name` (empty when unset).
    pub application_name: String,
    /// The client address; `None` for a Unix-socket client.
    pub client_addr: Option<String>,
    /// Start of the holder's current transaction, else of its latest statement.
    pub since: Option<Timestamp>,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if !self.application_name.is_empty() {
            write!(f, " (application_name {:?})", self.application_name)?;
        }
        match &self.client_addr {
            Some(addr) => write!(f, " from {addr}")?,
            None => write!(f, " from a local socket")?,
        }
        if let Some(since) = self.since {
            write!(f, " since {since}")?;
        }
        Ok(())
    }
}

/// Finds the session that holds `identity`'s lock in the current database, if any.
///
/// # Errors
/// The database error when the lookup fails (for example, no permission to see `pg_stat_activity`
/// details still returns the pid).
pub async fn find_holder(
    client: &Client,
    identity: &LockIdentity,
) -> Result<Option<Holder>, tokio_postgres::Error> {
    let row = client.query_opt(HOLDER_SQL, &[&identity.key()]).await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let since_ms: Option<i64> = row.try_get(3)?;
    Ok(Some(Holder {
        pid: row.try_get(0)?,
        application_name: row.try_get::<_, Option<String>>(1)?.unwrap_or_default(),
        client_addr: row.try_get(2)?,
        since: since_ms.and_then(|ms| Timestamp::from_millisecond(ms).ok()),
    }))
}
