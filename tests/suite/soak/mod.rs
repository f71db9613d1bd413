//! The invariant soak, with operator processes and on the real node.

pub(crate) mod node;
pub(crate) mod processes;
