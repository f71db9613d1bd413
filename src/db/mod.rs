//! Connections to PostgreSQL: connection strings (URL, libpq keywords, Npgsql), TLS, and the
//! dedicated session that holds the advisory lock, and the pool that keeps sessions between passes.

mod connect_error;
mod connstr;
pub mod pipeline;
pub mod pool;
mod session;
pub mod tls;

pub use connect_error::ConnectError;
pub use connstr::{ConnStrError, ConnectionSettings, Form, Password, TargetSession, TlsMode};
pub use pool::{PoolSettings, PooledSession, SessionKey, SessionPool};
pub use session::Session;
