//! The operator's real image as Pods on the real node (`scripts/node.sh`): install, Helm, Jobs,
//! failover, scale and upgrade. Run by `scripts/test-node.sh`.

mod failover;
mod helm;
mod install;
mod jobs;
mod scale;
mod upgrade;
