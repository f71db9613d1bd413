//! The fixed reads a session keeps prepared once it serves more than one pass.
//!
//! A read sent as an unnamed statement is parsed, analysed and planned by the server at every
//! execution; on a session that lives for thousands of passes (the controller's pool), most of a
//! periodic check's server time is that planning. A session therefore runs each fixed read
//! ([`Read`]) unnamed the first time and notes it; when the pool lends the session again, the reads
//! it noted are prepared in the round trip of the lending check, and from then on each runs by name
//! (Bind/Execute only; the server plans it for its first executions, then keeps a generic plan when
//! that is no dearer). A session lent once, as for a one-table `migrate`, prepares nothing.
//!
//! Only reads whose text is a constant are kept, so a session holds at most one prepared statement
//! per [`Read`] in the program, whatever the fleet. A read that cannot be prepared (a table it
//! names does not exist yet) stays unnamed until a later lending prepares it. A prepared read that
//! the server no longer accepts as it was (SQLSTATE `26000`, or `0A000` when a table it reads
//! changed its columns' types) is forgotten, so the next execution is unnamed again; the error
//! itself is returned, as an unnamed read's would be.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};

/// The longest a read's preparation waits for a lock on a table it names: 50 ms.
const SET_PREPARE_LOCK_TIMEOUT: &str = "SET lock_timeout = '50ms'";
/// Back to the session's own value (the connection string's, the role's or the server's).
const RESET_LOCK_TIMEOUT: &str = "RESET lock_timeout";

/// A read whose text never changes, with the types of its parameters.
#[derive(Debug, Clone, Copy)]
pub struct Read {
    /// The statement's text.
    pub sql: &'static str,
    /// Its parameters' types, in order.
    pub types: &'static [Type],
}

/// The reads a session prepared, and the ones it ran unnamed since (to prepare at its next
/// lending). Both are bounded by the number of [`Read`] constants in the program.
#[derive(Default)]
pub(super) struct Prepared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    ready: HashMap<&'static str, Statement>,
    wanted: Vec<Read>,
}

impl Prepared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave the maps half-changed in a way that
        // matters: at worst a read runs unnamed once more.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `read` with `params` on `client`: by name when prepared, otherwise unnamed, noting it
    /// for [`Prepared::prepare_wanted`].
    ///
    /// # Errors
    /// The driver's error for the execution.
    pub(super) async fn query(
        &self,
        client: &Client,
        read: Read,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        match self.statement(read) {
            Some(statement) => self.forget_if_invalid(read, client.query(&statement, params).await),
            None => client.query_typed(read.sql, &typed(read, params)).await,
        }
    }

    /// As [`Prepared::query`], for a read that returns exactly one row.
    ///
    /// # Errors
    /// The driver's error for the execution, or for a row count other than one.
    pub(super) async fn query_one(
        &self,
        client: &Client,
        read: Read,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        match self.statement(read) {
            Some(statement) => {
                self.forget_if_invalid(read, client.query_one(&statement, params).await)
            }
            None => client.query_typed_one(read.sql, &typed(read, params)).await,
        }
    }

    /// The prepared statement of `read`; `None` (and `read` noted) when it is not prepared yet.
    fn statement(&self, read: Read) -> Option<Statement> {
        let mut state = self.state();
        let statement = state.ready.get(read.sql).cloned();
        if statement.is_none() && !state.wanted.iter().any(|w| w.sql == read.sql) {
            state.wanted.push(read);
        }
        statement
    }

    fn forget_if_invalid<T>(
        &self,
        read: Read,
        result: Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        if let Err(error) = &result
            && no_longer_valid(error)
        {
            tracing::debug!(error = %crate::report::chain(error), "a prepared read is no longer valid; it runs unnamed from now on");
            self.state().ready.remove(read.sql);
        }
        result
    }

    /// Prepares every read run unnamed since the last call. The requests are sent together, so
    /// polled with another request on the same client they share its round trip. A read that fails
    /// to prepare is left unnamed (and noted again at its next execution).
    ///
    /// Preparing a read locks the tables it names as reading them would, so a prepare could queue
    /// behind a transaction that holds one of them (an `ALTER` of `public`'s history): the prepares
    /// run under a lock timeout of 50 ms ([`SET_PREPARE_LOCK_TIMEOUT`]), set for them and reset
    /// after them in the same round trip, so lending a session never waits on a table lock for
    /// longer than that per read; a read that timed out stays unnamed, and its next execution
    /// queues where a pass can be cancelled.
    pub(super) async fn prepare_wanted(&self, client: &Client) {
        let wanted = std::mem::take(&mut self.state().wanted);
        if wanted.is_empty() {
            return;
        }
        let (set, prepared, reset) = futures::join!(
            client.batch_execute(SET_PREPARE_LOCK_TIMEOUT),
            futures::future::join_all(
                wanted
                    .iter()
                    .map(|read| client.prepare_typed(read.sql, read.types)),
            ),
            client.batch_execute(RESET_LOCK_TIMEOUT),
        );
        if let Err(error) = set.and(reset) {
            tracing::debug!(error = %crate::report::chain(&error), "setting the lock timeout for preparing reads failed");
        }
        let mut state = self.state();
        for (read, statement) in wanted.into_iter().zip(prepared) {
            match statement {
                Ok(statement) => {
                    state.ready.insert(read.sql, statement);
                }
                Err(error) => {
                    tracing::debug!(error = %crate::report::chain(&error), "a read could not be prepared; it stays unnamed");
                }
            }
        }
    }

    /// How many reads are prepared.
    pub(super) fn len(&self) -> usize {
        self.state().ready.len()
    }
}

/// `params` paired with `read`'s types, for an unnamed execution.
fn typed<'a>(read: Read, params: &[&'a (dyn ToSql + Sync)]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .copied()
        .zip(read.types.iter().cloned())
        .collect()
}

/// Whether the server refused a prepared statement as it was prepared: unknown on this backend
/// (`26000`), or its result's type changed under it (`0A000`, "cached plan must not change result
/// type").
fn no_longer_valid(error: &tokio_postgres::Error) -> bool {
    error.code().is_some_and(|code| {
        *code == SqlState::INVALID_SQL_STATEMENT_NAME || *code == SqlState::FEATURE_NOT_SUPPORTED
    })
}
