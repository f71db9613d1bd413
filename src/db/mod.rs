//! Connections to PostgreSQL: connection strings (URL, libpq keywords, Npgsql), TLS, and the
//! dedicated session that holds the advisory lock.

mod session;

pub use session::{ConnectError, Session};
