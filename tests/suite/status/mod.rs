//! Status as users and their tools read it: desired status as values, warnings, server-side apply,
//! Argo CD health and kstatus, and no status written twice when the cache is behind.

mod argocd_health;
mod behind_the_cache;
pub(crate) mod readiness_clients;
mod server_side_apply;
mod values;
mod warnings;
