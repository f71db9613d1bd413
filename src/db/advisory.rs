//! PostgreSQL's session advisory lock statements, try-lock and unlock, prepared once per session
//! when it opens and reused by every run on it: each try and each release is then one
//! Bind/Execute/Sync round trip with no Parse, as `pgbench -M prepared` sends them. Which lock
//! (Brighter's key derivation), how long to try and who holds it are `crate::lock`'s business;
//! the session only carries the two statements.

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

/// Takes the lock without waiting; `NULL` is reported as `None`.
pub const TRY_LOCK_SQL: &str = "SELECT pg_try_advisory_lock($1::int8)";
/// Releases one level of the session lock; `false` means the session did not hold it.
pub const UNLOCK_SQL: &str = "SELECT pg_advisory_unlock($1::int8)";

/// [`TRY_LOCK_SQL`] and [`UNLOCK_SQL`] prepared on one session, the key bound as `int8`.
///
/// A prepared statement lives on the backend that parsed it, so these are only valid on the
/// session that prepared them. Behind a transaction-mode pooler a later execution can reach a
/// backend that never saw them; the server then answers SQLSTATE `26000`, which the lock's acquire
/// and release report as a pooler (`crate::lock::LockError::StatementsMissing`).
#[derive(Debug, Clone)]
pub struct LockStatements {
    try_lock: Statement,
    unlock: Statement,
}

impl LockStatements {
    /// Prepares both statements. The two requests are sent together and wait on one round trip
    /// between them; polled together with other requests on the same client (as
    /// [`super::Session`] does with its setup query), they share that round trip too.
    ///
    /// # Errors
    /// The driver error when either statement could not be prepared.
    pub async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        let (try_lock, unlock) = futures::future::join(
            client.prepare_typed(TRY_LOCK_SQL, &[Type::INT8]),
            client.prepare_typed(UNLOCK_SQL, &[Type::INT8]),
        )
        .await;
        Ok(Self {
            try_lock: try_lock?,
            unlock: unlock?,
        })
    }

    /// `SELECT pg_try_advisory_lock($1::int8)`, prepared.
    pub fn try_lock(&self) -> &Statement {
        &self.try_lock
    }

    /// `SELECT pg_advisory_unlock($1::int8)`, prepared.
    pub fn unlock(&self) -> &Statement {
        &self.unlock
    }
}
