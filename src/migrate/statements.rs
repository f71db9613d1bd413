//! The statements a migration transaction runs, as values (pure): the runner executes exactly
//! this list and `migrate --dry-run` prints it, so what a plan shows is what a run sends.

use super::Decision;
use super::Plan;
use super::catalog::step_statements;
use super::history::{self, HistoryTable};
use super::shape::fresh_statements;

/// A bound parameter of a statement (`$1`, `$2`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// An `int4`.
    Int(i32),
    /// A `text` / `varchar`.
    Text(String),
}

impl std::fmt::Display for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Param::Int(i) => write!(f, "{i}"),
            Param::Text(s) => write!(f, "'{}'", s.replace('\'', "''")),
        }
    }
}

/// What a statement is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purpose {
    /// Creating the history table if it is missing.
    HistoryTable,
    /// Copying this table's history rows from `public` into its own schema (PerSchema).
    SeedHistory,
    /// DDL of version `version`.
    Ddl {
        /// The version the statement belongs to.
        version: u32,
        /// That version's description.
        description: String,
    },
    /// The history row recording `version`.
    HistoryRow {
        /// The version recorded.
        version: u32,
    },
}

/// One statement: its exact SQL text, its parameters, and what it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The SQL text, byte for byte as sent to the server.
    pub sql: String,
    /// The values bound to `$1`, `$2`, ... (none for DDL).
    pub params: Vec<Param>,
    /// What it does.
    pub purpose: Purpose,
}

impl Statement {
    fn ddl(sql: String, version: u32, description: &str) -> Self {
        Self {
            sql,
            params: Vec::new(),
            purpose: Purpose::Ddl {
                version,
                description: description.to_owned(),
            },
        }
    }

    fn history_row(history: &HistoryTable, plan: &Plan, version: u32, description: &str) -> Self {
        Self {
            sql: history.insert_sql(),
            params: vec![
                Param::Int(i32::try_from(version).unwrap_or(i32::MAX)),
                Param::Text(plan.table().schema.as_str().to_owned()),
                Param::Text(plan.table().table.as_str().to_owned()),
                Param::Text(description.to_owned()),
            ],
            purpose: Purpose::HistoryRow { version },
        }
    }
}

/// What the transaction runs before it decides: create the history table if missing, and for a
/// per-schema history with a `public` history table, seed it from `public`.
pub fn setup(plan: &Plan, public_history_exists: bool) -> Vec<Statement> {
    let history = plan.history().clone();
    let mut out = vec![Statement {
        sql: history.create_sql(),
        params: Vec::new(),
        purpose: Purpose::HistoryTable,
    }];
    if history != HistoryTable::Public && public_history_exists {
        out.push(Statement {
            sql: history.seed_sql(&HistoryTable::Public),
            params: vec![
                Param::Text(plan.table().schema.as_str().to_owned()),
                Param::Text(plan.table().table.as_str().to_owned()),
            ],
            purpose: Purpose::SeedHistory,
        });
    }
    out
}

/// What the transaction runs for `decision`, in order: the DDL of each step and its history row
/// (a fresh table: the latest shape and one row; a bootstrap: the detected version's row first).
pub fn steps(plan: &Plan, decision: Decision) -> Vec<Statement> {
    let table = plan.table();
    let history = plan.history().clone();
    let mut out = Vec::new();
    let (after, target) = match decision {
        Decision::Fresh { to } => {
            let description = history::fresh_description(to);
            for sql in fresh_statements(plan.kind(), plan.payload(), table, to) {
                out.push(Statement::ddl(sql, to, &description));
            }
            out.push(Statement::history_row(&history, plan, to, &description));
            return out;
        }
        Decision::Bootstrap { detected, to } => {
            let description = history::bootstrap_description(detected);
            out.push(Statement::history_row(
                &history,
                plan,
                detected,
                &description,
            ));
            (detected, to)
        }
        Decision::Normal { from, to } => (from, to),
        Decision::UpToDate { .. } => return out,
    };
    for version in plan.kind().versions() {
        if version.number <= after || version.number > target {
            continue;
        }
        for sql in step_statements(version, table) {
            out.push(Statement::ddl(sql, version.number, version.description));
        }
        out.push(Statement::history_row(
            &history,
            plan,
            version.number,
            version.description,
        ));
    }
    out
}

/// The history rows a run for `decision` writes, in order: each version and its description (the
/// versions a suspended BoxTable shows as pending).
pub fn history_rows(plan: &Plan, decision: Decision) -> Vec<(u32, String)> {
    steps(plan, decision)
        .into_iter()
        .filter_map(|s| match (s.purpose, s.params.get(3)) {
            (Purpose::HistoryRow { version }, Some(Param::Text(description))) => {
                Some((version, description.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Everything the transaction would run for `decision`: [`setup`] then [`steps`]; nothing when
/// the table is up to date (a Global run then opens no transaction at all).
pub fn transaction(plan: &Plan, decision: Decision, public_history_exists: bool) -> Vec<Statement> {
    if matches!(decision, Decision::UpToDate { .. }) {
        return Vec::new();
    }
    let mut out = setup(plan, public_history_exists);
    out.extend(steps(plan, decision));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ident::QualifiedName;
    use crate::migrate::{BoxKind, HistoryScope};

    fn plan(scope: HistoryScope) -> Plan {
        Plan::new(
            BoxKind::Outbox,
            QualifiedName::parse(Some("sales"), "outbox").unwrap(),
        )
        .with_lock_timeout(std::time::Duration::from_secs(1))
        .with_history_scope(scope)
    }

    fn purposes(statements: &[Statement]) -> Vec<String> {
        statements
            .iter()
            .map(|s| format!("{:?}", s.purpose))
            .collect()
    }

    #[test]
    fn the_history_rows_of_a_bootstrap_start_with_the_detected_version() {
        let rows = history_rows(
            &plan(HistoryScope::Global),
            Decision::Bootstrap { detected: 6, to: 8 },
        );
        assert_eq!(
            rows,
            [
                (6, "bootstrap: detected at V6".to_owned()),
                (7, "Add dataref, specversion columns".to_owned()),
                (8, "Add causationid column and replay index".to_owned()),
            ]
        );
        let fresh = history_rows(&plan(HistoryScope::Global), Decision::Fresh { to: 8 });
        assert_eq!(fresh, [(8, "fresh install at V8".to_owned())]);
        assert!(history_rows(&plan(HistoryScope::Global), Decision::UpToDate { at: 8 }).is_empty());
    }

    #[test]
    fn a_fresh_table_is_created_then_recorded_once() {
        let list = transaction(&plan(HistoryScope::Global), Decision::Fresh { to: 8 }, true);
        assert_eq!(list.first().unwrap().purpose, Purpose::HistoryTable);
        let last = list.last().unwrap();
        assert_eq!(last.purpose, Purpose::HistoryRow { version: 8 });
        assert_eq!(
            last.params,
            [
                Param::Int(8),
                Param::Text("sales".into()),
                Param::Text("outbox".into()),
                Param::Text("fresh install at V8".into())
            ]
        );
        assert_eq!(
            list.iter()
                .filter(|s| matches!(s.purpose, Purpose::HistoryRow { .. }))
                .count(),
            1
        );
    }

    #[test]
    fn a_bootstrap_stamps_the_detected_version_before_the_later_steps() {
        let list = steps(
            &plan(HistoryScope::Global),
            Decision::Bootstrap { detected: 6, to: 8 },
        );
        let rows: Vec<String> = purposes(&list)
            .into_iter()
            .filter(|p| p.starts_with("HistoryRow"))
            .collect();
        assert_eq!(
            rows,
            [
                "HistoryRow { version: 6 }",
                "HistoryRow { version: 7 }",
                "HistoryRow { version: 8 }"
            ]
        );
        assert_eq!(
            list[0].params[3],
            Param::Text("bootstrap: detected at V6".into())
        );
    }

    #[test]
    fn a_per_schema_history_is_seeded_only_when_public_has_one() {
        let with = transaction(
            &plan(HistoryScope::PerSchema),
            Decision::Normal { from: 7, to: 8 },
            true,
        );
        assert_eq!(with[1].purpose, Purpose::SeedHistory);
        let without = transaction(
            &plan(HistoryScope::PerSchema),
            Decision::Normal { from: 7, to: 8 },
            false,
        );
        assert!(!without.iter().any(|s| s.purpose == Purpose::SeedHistory));
    }

    #[test]
    fn an_up_to_date_table_runs_nothing() {
        assert!(
            transaction(
                &plan(HistoryScope::Global),
                Decision::UpToDate { at: 8 },
                true
            )
            .is_empty()
        );
    }

    #[test]
    fn text_parameters_are_shown_as_sql_literals() {
        assert_eq!(Param::Text("it's".into()).to_string(), "'it''s'");
        assert_eq!(Param::Int(3).to_string(), "3");
    }
}
