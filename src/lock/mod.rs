//! Brighter's migration advisory lock: the pinned key derivation, acquire with backoff, release, and
//! holder lookup.
//!
//! A Brighter application that provisions its own tables at start-up derives exactly the same key, so
//! the application and the operator exclude each other on a shared database. The lock is
//! session-level and lives on one dedicated connection, never on a pool.

mod held;
mod holder;
mod identity;
mod poll;

pub use held::{BLOCKED, Blocked, HeldLock, blocked_on, held_now};
pub use holder::{Holder, find_holder};
pub use identity::{LOCK_KEY_PREFIX, LOCK_NAMESPACE, LockIdentity, derive_key};
pub use poll::{
    AcquireReport, BACKOFF_CAP, FIRST_DELAY, PollError, next_delay, poll_until_acquired,
    tries_within,
};

use std::future::Future;
use std::time::Duration;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_util::sync::CancellationToken;

use crate::db::{Read, Session};

pub use crate::db::advisory::{LockStatements, TRY_LOCK_SQL, UNLOCK_SQL};
/// Whether this very session holds the lock (granted, in the current database).
pub const HELD_BY_ME: Read = Read {
    sql: "SELECT EXISTS (SELECT 1 FROM pg_locks \
          WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() \
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
            AND classid = (($1::int8 >> 32) & 4294967295)::oid \
            AND objid = ($1::int8 & 4294967295)::oid AND objsubid = 1)",
    types: &[Type::INT8],
};

/// Why taking, checking or releasing the lock failed. Every message names the lockKey.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// A lock query failed on the server or the connection broke.
    #[error("advisory lock query for {lock_key} failed")]
    Query {
        /// The lockKey.
        lock_key: String,
        /// The database error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// `pg_try_advisory_lock` returned NULL instead of a boolean.
    #[error("pg_try_advisory_lock returned NULL for {lock_key}")]
    NullResult {
        /// The lockKey.
        lock_key: String,
    },
    /// The wait reached its timeout while another session held the lock.
    #[error("{}", timeout_message(lock_key, *timeout, holder.as_ref()))]
    Timeout {
        /// The lockKey.
        lock_key: String,
        /// The configured timeout.
        timeout: Duration,
        /// Who held the lock when the wait gave up, when it could be seen.
        holder: Option<Holder>,
        /// Attempts made.
        attempts: u32,
    },
    /// Shutdown cancelled the wait.
    #[error("wait for advisory lock {lock_key} was cancelled")]
    Cancelled {
        /// The lockKey.
        lock_key: String,
    },
    /// The session's statements reach a different backend than the one it connected to: a pooler
    /// in transaction or statement mode is in between. Found before the lock is taken.
    #[error(
        "connection pooler detected before taking advisory lock {lock_key}: the session connected to backend pid {connected_pid} but its next statement ran on pid {current_pid}; a session lock cannot live on a transaction-pooled connection: connect directly or through a session-mode pool"
    )]
    BackendChanged {
        /// The lockKey.
        lock_key: String,
        /// The backend pid read at connect.
        connected_pid: i32,
        /// The backend pid seen now.
        current_pid: i32,
    },
    /// The server did not know a lock statement this session prepared when it opened (SQLSTATE
    /// `26000`): the statement reached another backend than the one that prepared it, so a
    /// transaction- or statement-mode pooler is in between.
    #[error(
        "connection pooler detected at advisory lock {lock_key}: a statement this session prepared is unknown to the backend that received it; a session lock cannot live on a transaction-pooled connection: connect directly or through a session-mode pool"
    )]
    StatementsMissing {
        /// The lockKey.
        lock_key: String,
    },
    /// The session no longer holds the lock it took: the lock was lost.
    #[error(
        "advisory lock {lock_key} is no longer held by this session (a terminated backend or a connection pooler in transaction mode); the lock must live on one direct session"
    )]
    Lost {
        /// The lockKey.
        lock_key: String,
    },
}

fn timeout_message(lock_key: &str, timeout: Duration, holder: Option<&Holder>) -> String {
    let secs = timeout.as_secs_f64();
    match holder {
        Some(h) => {
            format!("timed out after {secs}s waiting for advisory lock {lock_key}; held by {h}")
        }
        None => format!("timed out after {secs}s waiting for advisory lock {lock_key}"),
    }
}

impl LockError {
    /// The lockKey this error is about.
    pub fn lock_key(&self) -> &str {
        match self {
            LockError::Query { lock_key, .. }
            | LockError::NullResult { lock_key }
            | LockError::Timeout { lock_key, .. }
            | LockError::Cancelled { lock_key }
            | LockError::Lost { lock_key }
            | LockError::StatementsMissing { lock_key }
            | LockError::BackendChanged { lock_key, .. } => lock_key,
        }
    }
}

/// Takes the session lock on `session`, polling with backoff until `timeout` (0 = one attempt).
///
/// The first time the lock is found held, the holder is looked up and passed to `on_contended` (so
/// callers can publish "waiting for pid N" before the wait ends). The wait runs in autocommit: no
/// transaction is open between polls, so the waiter holds no snapshot. Sessions opened by
/// [`crate::db::Session`] have `idle_session_timeout` off, so a role setting cannot end the wait.
///
/// # Errors
/// [`LockError::Timeout`] (naming the lockKey, the timeout and the holder), [`LockError::NullResult`],
/// [`LockError::Query`], [`LockError::StatementsMissing`] or [`LockError::Cancelled`].
///
/// # Cancel safety
/// Cancelling `cancel` ends the wait between polls at once. Dropping the future mid-query may leave
/// the lock taken by this session; callers that drop it must close the session.
pub async fn acquire(
    session: &Session,
    identity: &LockIdentity,
    timeout: Duration,
    cancel: &CancellationToken,
    on_contended: impl FnOnce(Option<Holder>) + Send,
) -> Result<AcquireReport, LockError> {
    match acquire_while_needed(session, identity, timeout, cancel, on_contended, || async {
        true
    })
    .await?
    {
        Wait::Acquired(report) => Ok(report),
        // `still_needed` above never says no.
        Wait::NotNeeded { attempts } => Err(LockError::Timeout {
            lock_key: identity.lock_key().to_owned(),
            timeout,
            holder: None,
            attempts,
        }),
    }
}

/// How a wait for the lock ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The lock is held by this session.
    Acquired(AcquireReport),
    /// While waiting, `still_needed` said the work was already done; the lock was not taken.
    NotNeeded {
        /// Tries made.
        attempts: u32,
    },
}

/// As [`acquire`], but after each failed try `still_needed` is asked whether the lock is still
/// worth waiting for; when it answers `false` (for example, the holder has just brought the table
/// up to date), the wait ends at once with [`Wait::NotNeeded`] instead of queueing for a lock that
/// would only confirm there is nothing to do.
///
/// # Errors
/// As [`acquire`].
///
/// # Cancel safety
/// As [`acquire`].
pub async fn acquire_while_needed<F, Fut>(
    session: &Session,
    identity: &LockIdentity,
    timeout: Duration,
    cancel: &CancellationToken,
    on_contended: impl FnOnce(Option<Holder>) + Send,
    mut still_needed: F,
) -> Result<Wait, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let lock_key = identity.lock_key();
    let key = identity.key();
    let client = session.client();
    let try_lock = session.lock_statements().try_lock();
    let notify = std::sync::Mutex::new(Some(on_contended));
    let result = poll_until_acquired(
        timeout,
        cancel,
        || async move {
            let row = client.query_one(try_lock, &[&key]).await?;
            row.try_get::<_, Option<bool>>(0)
        },
        |_attempt| {
            let first = notify.lock().ok().and_then(|mut slot| slot.take());
            let needed = still_needed();
            async move {
                if let Some(first) = first {
                    first(find_holder(client, identity).await.ok().flatten());
                }
                needed.await
            }
        },
    )
    .await;
    match result {
        Ok(report) => Ok(Wait::Acquired(report)),
        Err(PollError::NotNeeded { attempts }) => Ok(Wait::NotNeeded { attempts }),
        Err(PollError::Try(source)) => Err(query_error(lock_key, source)),
        Err(PollError::Null) => Err(LockError::NullResult {
            lock_key: lock_key.to_owned(),
        }),
        Err(PollError::Cancelled) => Err(LockError::Cancelled {
            lock_key: lock_key.to_owned(),
        }),
        Err(PollError::TimedOut { attempts }) => Err(LockError::Timeout {
            lock_key: lock_key.to_owned(),
            timeout,
            holder: find_holder(client, identity).await.ok().flatten(),
            attempts,
        }),
    }
}

/// Releases the lock once. `false` from the server means this session did not hold it.
///
/// # Errors
/// [`LockError::Lost`] when the session no longer held the lock; [`LockError::StatementsMissing`]
/// when a pooler sent the unlock to another backend; [`LockError::Query`] when the query failed.
pub async fn release(session: &Session, identity: &LockIdentity) -> Result<(), LockError> {
    let unlock = session.lock_statements().unlock();
    let row: Row = session
        .client()
        .query_one(unlock, &[&identity.key()])
        .await
        .map_err(|source| query_error(identity.lock_key(), source))?;
    match row.try_get::<_, Option<bool>>(0) {
        Ok(Some(true)) => Ok(()),
        Ok(_) => Err(LockError::Lost {
            lock_key: identity.lock_key().to_owned(),
        }),
        Err(source) => Err(LockError::Query {
            lock_key: identity.lock_key().to_owned(),
            source,
        }),
    }
}

/// A failed try-lock or unlock: SQLSTATE `26000` (the prepared statement is unknown to the
/// backend) means a pooler moved the session; anything else is a failed query.
fn query_error(lock_key: &str, source: tokio_postgres::Error) -> LockError {
    if source.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) {
        tracing::debug!(lock_key, error = %source, "a prepared lock statement is unknown to the backend");
        return LockError::StatementsMissing {
            lock_key: lock_key.to_owned(),
        };
    }
    LockError::Query {
        lock_key: lock_key.to_owned(),
        source,
    }
}

/// Checks that this session still holds the lock (for example before `COMMIT`, to catch a pooler
/// that swapped the backend).
///
/// # Errors
/// [`LockError::Lost`] when it does not; [`LockError::Query`] when the check failed.
pub async fn ensure_still_held(
    session: &Session,
    identity: &LockIdentity,
) -> Result<(), LockError> {
    let row = session
        .read_one(HELD_BY_ME, &[&identity.key()])
        .await
        .map_err(|source| LockError::Query {
            lock_key: identity.lock_key().to_owned(),
            source,
        })?;
    let held: bool = row.try_get(0).map_err(|source| LockError::Query {
        lock_key: identity.lock_key().to_owned(),
        source,
    })?;
    if held {
        Ok(())
    } else {
        Err(LockError::Lost {
            lock_key: identity.lock_key().to_owned(),
        })
    }
}
