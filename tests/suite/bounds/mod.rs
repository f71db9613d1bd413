//! What one tenant cannot do to others: fair workers between namespaces, memory that does not grow,
//! and caches that keep only what they need.

mod controller_memory;
mod fairness;
mod process_memory;
mod watch_cache;
