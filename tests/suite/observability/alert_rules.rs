//! The alert rules and the Grafana dashboard in `deploy/monitoring/`, judged by the real
//! `promtool` (installed into the cache by `scripts/promtool.sh` on first use): the rules load,
//! every alert's unit tests pass, every alert is tested firing and not firing and has a runbook,
//! and every dashboard query parses.
//!
//! That the queries name only metrics a running operator exports is checked against a live
//! scrape in `tests/suite/observability/monitoring.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value as Json;

use crate::support::monitoring::{alerts, dashboard_queries, prometheus_rule, root};

/// The pinned promtool, fetched into the cache by the project's script the first time.
fn promtool() -> &'static Path {
    static PROMTOOL: OnceLock<PathBuf> = OnceLock::new();
    PROMTOOL.get_or_init(|| {
        let out = Command::new("bash")
            .arg(root().join("scripts/promtool.sh"))
            .output()
            .expect("running scripts/promtool.sh");
        assert!(
            out.status.success(),
            "scripts/promtool.sh could not provide promtool (it needs apt-get and dpkg, or go):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// Runs promtool in `dir`; fails the test with its output unless it succeeds.
fn run_promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {} failed:\n{text}",
        args.join(" ")
    );
    text
}

/// The PrometheusRule's `spec` (its `groups`) written as a Prometheus rule file in `dir`.
fn write_rule_file(dir: &Path) -> PathBuf {
    let rule = prometheus_rule();
    assert_eq!(rule["kind"], "PrometheusRule");
    let path = dir.join("rules.yaml");
    std::fs::write(&path, serde_saphyr::to_string(&rule["spec"]).unwrap()).unwrap();
    path
}

fn unit_tests() -> Json {
    let text =
        std::fs::read_to_string(root().join("tests/data/monitoring/alerts.test.yaml")).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

#[test]
fn the_alert_rules_load_in_promtool_and_pass_their_unit_tests() {
    let dir = tempfile::tempdir().unwrap();
    write_rule_file(dir.path());
    let checked = run_promtool(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", alerts().len())),
        "{checked}"
    );
    std::fs::copy(
        root().join("tests/data/monitoring/alerts.test.yaml"),
        dir.path().join("alerts.test.yaml"),
    )
    .unwrap();
    let tested = run_promtool(dir.path(), &["test", "rules", "alerts.test.yaml"]);
    println!("{tested}");
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_alert_is_unit_tested_firing_and_not_firing() {
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for test in unit_tests()["tests"].as_array().unwrap() {
        for case in test["alert_rule_test"].as_array().unwrap() {
            let name = case["alertname"].as_str().unwrap().to_owned();
            let expected = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected == 0 {
                quiet.insert(name);
            } else {
                firing.insert(name);
            }
        }
    }
    for alert in alerts().keys() {
        assert!(firing.contains(alert), "no unit test sees {alert} fire");
        assert!(
            quiet.contains(alert),
            "no unit test sees {alert} stay quiet"
        );
    }
    assert!(
        alerts().len() >= 6,
        "the six alerts of the runbook: {:?}",
        alerts().keys()
    );
}

#[test]
fn every_alert_has_a_runbook_section_in_the_readme() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let rule = prometheus_rule();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for alert in group["rules"].as_array().unwrap() {
            let name = alert["alert"].as_str().unwrap();
            assert!(
                readme.contains(&format!("#### {name}\n")),
                "README.md has no runbook heading `#### {name}`"
            );
            assert_eq!(
                alert["annotations"]["runbook"].as_str(),
                Some(format!("README.md#{}", name.to_ascii_lowercase()).as_str()),
                "{name}'s runbook annotation points at its README section"
            );
        }
    }
}

#[test]
fn every_dashboard_query_parses_in_promtool() {
    let queries = dashboard_queries();
    assert!(queries.len() >= 10, "{queries:?}");
    // promtool checks expressions as part of rule files: each query becomes a recording rule,
    // with Grafana's $__rate_interval replaced by a duration.
    let rules: Vec<Json> = queries
        .iter()
        .enumerate()
        .map(|(i, (_, expr))| {
            serde_json::json!({
                "record": format!("dashboard:query_{i}"),
                "expr": expr.replace("$__rate_interval", "5m"),
            })
        })
        .collect();
    let file = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("dashboard.yaml"),
        serde_saphyr::to_string(&file).unwrap(),
    )
    .unwrap();
    let checked = run_promtool(dir.path(), &["check", "rules", "dashboard.yaml"]);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{checked}"
    );
}

#[test]
fn the_dashboard_covers_states_lock_waits_and_outcomes_migrations_reconciles_and_the_leader() {
    let all: String = dashboard_queries()
        .into_iter()
        .map(|(_, q)| q)
        .collect::<Vec<_>>()
        .join("\n");
    for metric in [
        "boxtable_objects",
        "boxtable_lock_wait_seconds_bucket",
        "boxtable_lock_outcomes_total",
        "boxtable_migrations_applied_total",
        "boxtable_reconciles_total",
        "boxtable_failures_total",
        "boxtable_leader",
    ] {
        assert!(all.contains(metric), "no dashboard query reads {metric}");
    }
}
