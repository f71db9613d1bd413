//! What the operator tells its operators: health and metrics servers, logs, events, traces, alert
//! rules and dashboards.

mod alert_rules;
mod binary;
mod health_server;
mod metrics_server_limits;
mod monitoring;
mod tracing;
