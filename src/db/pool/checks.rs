//! The checks the pool runs on a session: before lending a kept one, and before keeping one that
//! comes back.

use tokio_postgres::types::Type;

use crate::db::{Read, Session};

/// Run on a session taken from the idle list, before it is lent: names it for the pass (so a lock
/// holder is recognisable in `pg_stat_activity`) and reads the backend pid, which must be the one
/// the session connected to (another one means a pooler in between, or a replaced connection).
const CHECKOUT: Read = Read {
    sql: "SELECT set_config('application_name', $1, false), pg_backend_pid()",
    types: &[Type::TEXT],
};
/// Run before a session goes back to the idle list: no transaction block is open and the session
/// holds no advisory lock. Outside a block a statement is the first of its own transaction, so its
/// start is the transaction's start; inside one the transaction started earlier. Sent as a simple
/// query: in the extended protocol the statement's start is taken again at Execute, after the
/// implicit transaction began at Parse.
const CLEAN_SQL: &str = "SELECT statement_timestamp() = transaction_timestamp(), \
     NOT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory')";

/// Names the session for the pass and checks it reaches the backend it connected to; the reads
/// the session ran unnamed since it was last lent are prepared in the same round trip (see
/// `crate::db::prepared`).
pub(super) async fn check_out(
    session: &Session,
    application_name: &str,
) -> Result<(), &'static str> {
    if session.is_closed() {
        return Err("closed");
    }
    let name = crate::db::session::application_name_prefix(application_name);
    let (checked, ()) = futures::future::join(
        session.read_one(CHECKOUT, &[&name]),
        session.prepare_reads(),
    )
    .await;
    let row = checked.map_err(|_| "the check failed")?;
    let pid: i32 = row.try_get(1).map_err(|_| "the check failed")?;
    if pid != session.backend_pid() {
        return Err("another backend answered");
    }
    Ok(())
}

/// Whether the session is idle outside any transaction and holds no advisory lock.
pub(super) async fn is_clean(session: &Session) -> bool {
    if session.is_closed() {
        return false;
    }
    let Ok(messages) = session.client().simple_query(CLEAN_SQL).await else {
        return false;
    };
    messages.iter().any(|message| match message {
        tokio_postgres::SimpleQueryMessage::Row(row) => {
            row.get(0) == Some("t") && row.get(1) == Some("t")
        }
        _ => false,
    })
}
