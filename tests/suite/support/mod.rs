//! The fixtures the tests share (and [`black_hole`], a listener that never answers): a fresh PostgreSQL database per test ([`db`], re-exported here),
//! the migration runner's helpers ([`migrate`]), the real control plane ([`control_plane`]), a
//! fault-injecting proxy in front of it ([`fault_proxy`]), the controller under test
//! ([`controller`]), the operator binary end to end ([`e2e`]), private PostgreSQL clusters and
//! poolers for the reliability scenarios ([`reliability`]), a scripted PostgreSQL wire server
//! ([`wire`]), the monitoring files ([`monitoring`]), the programs the tests run and what they
//! printed ([`process`]), JSON documents compared field by field ([`json`]) and the real node the operator's image runs
//! on as Pods ([`node`]).

pub mod black_hole;
pub mod boxtable;
pub mod control_plane;
pub mod controller;
pub mod db;
pub mod e2e;
pub mod fault_proxy;
pub mod helm;
pub mod json;
pub mod migrate;
pub mod monitoring;
pub mod node;
pub mod node_install;
pub mod process;
pub mod reliability;
pub mod wait;
pub mod wire;

pub use db::{
    Sql, TestDb, advisory_locks, connect, connect_config, database_url, fresh_db,
    fresh_db_and_client, operator_sessions, prepared_statements, url_with_dbname,
};
