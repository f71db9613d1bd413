//! Connection Secrets: how the controller reads and follows them, and passwords never shown
//! anywhere.

mod never_in_debug;
mod never_in_migrate_output;
mod reads_and_rotation;
