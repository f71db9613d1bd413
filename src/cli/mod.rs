//! The commands of the `boxtable-operator` binary.

pub mod migrate;
