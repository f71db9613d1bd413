//! The monitoring files as the tests read them: the PrometheusRule in `deploy/monitoring/`, its
//! alerts, the dashboard's queries, and the metric names an expression reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value as Json;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The PrometheusRule as JSON.
pub fn prometheus_rule() -> Json {
    let text =
        std::fs::read_to_string(root().join("deploy/monitoring/prometheusrule.yaml")).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// Every alert in the PrometheusRule with its expression.
pub fn alerts() -> BTreeMap<String, String> {
    prometheus_rule()["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .filter_map(|r| {
            Some((
                r["alert"].as_str()?.to_owned(),
                r["expr"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Every PromQL expression of the dashboard, with the title of its panel.
pub fn dashboard_queries() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(root().join("deploy/monitoring/dashboards/boxtable-operator.json"))
            .unwrap();
    let dashboard: Json = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push((
                panel["title"].as_str().unwrap().to_owned(),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    queries
}

/// The metric names `expr` selects: identifiers directly followed by a label matcher `{`, a range
/// `[`, or standing alone as an argument, that are no PromQL function, keyword or label name.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    const NOT_METRICS: &[&str] = &[
        "sum",
        "max",
        "min",
        "avg",
        "count",
        "by",
        "without",
        "rate",
        "increase",
        "irate",
        "histogram_quantile",
        "absent",
        "and",
        "or",
        "unless",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
    ];
    // Label lists in by (...)/without (...) and matchers inside {...} are not metric names.
    let mut cleaned = String::new();
    let mut depth_braces = 0;
    for c in expr.chars() {
        match c {
            '{' => depth_braces += 1,
            '}' => depth_braces -= 1,
            _ if depth_braces > 0 => {}
            _ => cleaned.push(c),
        }
        if depth_braces > 0 && c == '{' {
            cleaned.push(' ');
        }
    }
    let cleaned = regex::Regex::new(r"\b(by|without|on|ignoring)\s*\([^)]*\)")
        .unwrap()
        .replace_all(&cleaned, " ");
    let cleaned = regex::Regex::new(r#""[^"]*""#)
        .unwrap()
        .replace_all(&cleaned, " ");
    let cleaned = regex::Regex::new(r"\[[^\]]*\]")
        .unwrap()
        .replace_all(&cleaned, " ");
    regex::Regex::new(r"[A-Za-z_:][A-Za-z0-9_:]*")
        .unwrap()
        .find_iter(&cleaned)
        .map(|m| m.as_str())
        .filter(|name| !NOT_METRICS.contains(name))
        .filter(|name| name.parse::<f64>().is_err() && !name.starts_with("__"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn metric_names_finds_selected_metrics_but_no_functions_labels_or_numbers() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le) (rate(boxtable_lock_wait_seconds_bucket{a="b"}[5m]))) > 20"#
        ),
        BTreeSet::from(["boxtable_lock_wait_seconds_bucket".to_owned()])
    );
    assert_eq!(
        metric_names(r#"absent(up{job="x"} == 1) and max(boxtable_leader) < 1"#),
        BTreeSet::from(["boxtable_leader".to_owned(), "up".to_owned()])
    );
}
