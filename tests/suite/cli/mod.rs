//! The command line: `migrate`, `key`, manifests judged as the API server would, and output to a
//! reader that went away.

mod key;
mod migrate;
mod output;
mod strict_manifests;
