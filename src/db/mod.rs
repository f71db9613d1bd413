//! Connections to PostgreSQL: connection strings (URL, libpq keywords, Npgsql), TLS, and the
//! dedicated session that holds the advisory lock.

mod connstr;
mod session;
pub mod tls;

pub use connstr::{ConnStrError, ConnectionSettings, Form, Password, TargetSession, TlsMode};
pub use session::{ConnectError, Session};
