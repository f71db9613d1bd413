//! Connections to PostgreSQL: connection strings (URL, libpq keywords, Npgsql) and the
//! [`Connection`] they make with their TLS files, TLS, the dedicated session that holds the
//! advisory lock, and the pool that keeps sessions between passes.

pub mod advisory;
mod connect_error;
mod connection;
mod connstr;
pub mod pipeline;
pub mod pool;
mod prepared;
mod session;
pub mod tls;

pub use connect_error::ConnectError;
pub use connection::{Connection, TlsFiles};
pub use connstr::{
    At, ChannelBinding, ConnStrError, ConnectionSettings, Form, MAX_CONNECT_TIMEOUT, MAX_HOSTS,
    Password, RootCert, TargetSession, TlsMode, TlsVersion,
};
pub use pool::{PoolSettings, PooledSession, SessionKey, SessionPool};
pub use prepared::Read;
pub use session::Session;
