//! Every integration test of the operator in one test binary: one module per area (named after
//! the file it lives in, so `lock::...`, `migrate_fresh::...`) and the fixtures they share under
//! [`support`]. One binary means one build and one link instead of one per file, one set of
//! fixtures that rustc checks for dead code as a whole, and tests from every area running side by
//! side. The few that change what all the others share (the soak's replicas electing a leader
//! through the shared Lease, the restart of the one API server, a rule taken out of the
//! cluster-wide CRD, the operator installed cluster-wide as Pods on the node) run after the rest,
//! one at a time; see `scripts/test.sh`.
// Fixture helpers outside #[test] functions fail loudly too; clippy.toml only covers #[test] bodies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod argocd_health;
mod cli_key;
mod cli_migrate;
mod cli_migrate_strict;
mod cli_output;
mod cli_plan;
mod controller;
mod controller_cache;
mod controller_deadline;
mod controller_deletion;
mod controller_drift;
mod controller_fairness;
mod controller_memory;
mod controller_pending;
mod controller_real_server;
mod controller_resync;
mod controller_secret_guard;
mod controller_secrets;
mod controller_sessions;
mod controller_warnings;
mod crd_golden;
mod crd_schema;
mod db_connect;
mod db_connstr;
mod db_pool;
mod db_tls_auth;
mod deploy_manifests;
mod e2e;
mod e2e_api_restart;
mod e2e_manifests;
mod e2e_memory;
mod e2e_metrics_server;
mod e2e_monitoring;
mod e2e_namespace_deletion;
mod e2e_namespaced_install;
mod e2e_shutdown;
mod e2e_telemetry;
mod e2e_tracing;
mod e2e_uninstall;
mod helm_chart;
mod image;
mod install_bundle;
mod jobs_examples;
mod leader;
mod leader_controller;
mod localapi_differential;
mod lock;
mod migrate_drift;
mod migrate_errors;
mod migrate_fresh;
mod migrate_lock_after_commit;
mod migrate_locking;
mod migrate_newer_history;
mod migrate_ownership;
mod migrate_scope_and_drop;
mod migrate_snapshot;
mod migrate_upgrade;
mod monitoring_rules;
mod node_failover;
mod node_helm;
mod node_install;
mod node_jobs;
mod node_scale;
mod node_upgrade;
mod readiness_clients;
mod release_workflow;
mod reliability_cluster;
mod reliability_fuzz;
mod reliability_inputs;
mod reliability_kill;
mod reliability_pooler;
mod reliability_secrets;
mod reliability_session;
mod secrets_in_debug;
mod soak;
mod soak_node;
mod status;
mod table_ownership;
mod telemetry;
