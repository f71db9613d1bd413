//! Status as users and their tools read it: desired status as values, warnings, server-side apply,
//! Argo CD health and kstatus.

mod argocd_health;
pub(crate) mod readiness_clients;
mod server_side_apply;
mod values;
mod warnings;
