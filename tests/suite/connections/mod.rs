//! PostgreSQL sessions: connecting, connection strings, TLS and authentication, the pool, poolers
//! and server events.

mod connect;
mod connection_strings;
mod controller_sessions;
mod pool;
mod pooler;
mod prepared_reads;
mod server_events;
mod tls_auth;
