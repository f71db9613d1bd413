//! The real binary end to end under faults: API errors, the API server restarted, shutdown.

mod api_restart;
mod end_to_end;
mod shutdown;
