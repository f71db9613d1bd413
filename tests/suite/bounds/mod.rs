//! What one tenant cannot do to others: fair workers between namespaces, memory that does not grow,
//! a restart whose resync of current objects is spread over the interval,
//! and caches that keep only what they need.

mod controller_memory;
mod fairness;
mod process_memory;
mod restart_resync;
mod watch_cache;
