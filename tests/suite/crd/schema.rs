//! The generated CRD refuses at `kubectl apply` time what the contract says it must: identifiers,
//! enums, durations, ranges and immutability; and it carries the defaults, printer columns and
//! status subresource the contract names.

use boxtable_operator::crd::{
    BoxTable, CRD_NAME, FINALIZER, GROUP, INBOX_LATEST_VERSION, KIND, PLURAL, VERSION,
};
use boxtable_operator::duration::{DURATION_PATTERN, GO_PARSEABLE_PATTERN, NOT_A_DURATION};
use boxtable_operator::ident::IDENT_PATTERN;
use kube::{CustomResourceExt, Resource};
use serde_json::{Value, json};

fn crd() -> Value {
    serde_json::to_value(BoxTable::crd()).unwrap()
}

fn version() -> Value {
    crd()["spec"]["versions"][0].clone()
}

fn root_schema() -> Value {
    version()["schema"]["openAPIV3Schema"].clone()
}

/// The schema at a dotted path below the root, through `properties`.
fn at(path: &str) -> Value {
    let mut node = root_schema();
    for part in path.split('.') {
        node = node["properties"][part].clone();
        assert!(!node.is_null(), "no property {part} in {path}");
    }
    node
}

fn rules(node: &Value) -> Vec<(String, String)> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .map(|r| {
                    (
                        r["rule"].as_str().unwrap().to_owned(),
                        r["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn names_match_the_constants() {
    let crd = crd();
    assert_eq!(crd["metadata"]["name"], CRD_NAME);
    assert_eq!(crd["spec"]["group"], GROUP);
    assert_eq!(crd["spec"]["names"]["kind"], KIND);
    assert_eq!(crd["spec"]["names"]["plural"], PLURAL);
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["bt"]));
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(version()["name"], VERSION);
    assert_eq!(BoxTable::api_version(&()), format!("{GROUP}/{VERSION}"));
    assert!(FINALIZER.starts_with(GROUP));
}

#[test]
fn the_status_subresource_is_enabled() {
    assert_eq!(version()["subresources"]["status"], json!({}));
}

#[test]
fn box_and_database_are_required() {
    assert_eq!(at("spec")["required"], json!(["box", "database"]));
    assert_eq!(at("spec.database.secretRef")["required"], json!(["name"]));
}

#[test]
fn table_and_schema_follow_the_identifier_rules() {
    for path in ["spec.table", "spec.schema"] {
        let node = at(path);
        assert_eq!(node["pattern"], IDENT_PATTERN, "{path}");
        assert_eq!(node["maxLength"], 63, "{path}");
        assert_eq!(node["minLength"], 1, "{path}");
    }
}

#[test]
fn enums_list_exactly_the_contract_values() {
    for (path, values) in [
        ("spec.box", json!(["Outbox", "Inbox"])),
        ("spec.payload", json!(["Text", "Binary", "Json", "Jsonb"])),
        ("spec.historyScope", json!(["Global", "PerSchema"])),
        ("spec.deletionPolicy", json!(["Retain", "Drop"])),
        (
            "status.lock.state",
            json!(["Waiting", "Acquired", "Released", "TimedOut", "Lost"]),
        ),
        (
            "status.lastRun.path",
            json!(["Fresh", "Bootstrap", "Normal", "UpToDate"]),
        ),
    ] {
        assert_eq!(at(path)["enum"], values, "{path}");
        assert_eq!(at(path)["type"], "string", "{path}");
    }
}

#[test]
fn defaults_are_the_contract_defaults() {
    for (path, default) in [
        ("spec.schema", json!("public")),
        ("spec.payload", json!("Text")),
        ("spec.historyScope", json!("Global")),
        ("spec.database.secretRef.keys.host", json!("host")),
        ("spec.database.secretRef.keys.port", json!("port")),
        ("spec.database.secretRef.keys.dbname", json!("dbname")),
        ("spec.database.secretRef.keys.user", json!("user")),
        ("spec.database.secretRef.keys.password", json!("password")),
        ("spec.lock.timeout", json!("30s")),
        ("spec.deletionPolicy", json!("Retain")),
        ("spec.suspend", json!(false)),
        ("status.observedGeneration", json!(-1)),
    ] {
        assert_eq!(at(path)["default"], default, "{path}");
    }
    assert!(
        at("spec.table").get("default").is_none(),
        "the table default depends on box"
    );
    assert!(
        at("spec.database.secretRef.key").get("default").is_none(),
        "key is read as connectionString only when keys is not set, so it is not defaulted"
    );
}

#[test]
fn durations_are_checked_by_two_rules_with_one_message_per_mistake() {
    for (path, max) in [
        ("spec.lock.timeout", "1h"),
        ("spec.ddl.lockTimeout", "24h"),
        ("spec.ddl.statementTimeout", "24h"),
    ] {
        let node = at(path);
        // No OpenAPI pattern: its refusal would quote the regular expression, beside the rule's.
        assert!(node["pattern"].is_null(), "{path}");
        let found = rules(&node);
        assert_eq!(found.len(), 2, "{path}: {found:?}");
        assert_eq!(found[0].0, format!("self.matches('{DURATION_PATTERN}')"));
        assert_eq!(found[0].1, NOT_A_DURATION);
        assert_eq!(
            found[1].0,
            format!(
                "!self.matches('{DURATION_PATTERN}') || (self.matches('{GO_PARSEABLE_PATTERN}') \
                 && duration(self) <= duration('{max}'))"
            )
        );
        assert_eq!(found[1].1, format!("must be at most {max}"));
    }
}

#[test]
fn the_duration_pattern_accepts_go_durations_and_nothing_else() {
    let re = regex::Regex::new(DURATION_PATTERN).unwrap();
    for ok in ["30s", "1m30s", "500ms", "0s", "1h", "2m"] {
        assert!(re.is_match(ok), "{ok}");
    }
    for bad in ["", "30", "1.5s", "-1s", "1d", "30 s", "s", "1s1m"] {
        assert!(!re.is_match(bad), "{bad:?}");
    }
}

#[test]
fn target_version_is_between_1_and_8() {
    let node = at("spec.targetVersion");
    assert_eq!(node["type"], "integer");
    assert_eq!(node["minimum"].as_f64(), Some(1.0));
    assert_eq!(node["maximum"].as_f64(), Some(8.0));
}

#[test]
fn box_schema_and_table_are_immutable() {
    for (path, message) in [
        ("spec.box", "box is immutable"),
        ("spec.schema", "schema is immutable"),
    ] {
        assert_eq!(
            rules(&at(path)),
            vec![("self == oldSelf".to_owned(), message.to_owned())],
            "{path}"
        );
    }
    // The table in use (written out, or defaulted to the box) never changes; writing the default
    // out later is no change. A field rule would not run when the optional table is added.
    assert!(rules(&at("spec.table")).is_empty());
    assert!(rules(&at("spec")).iter().any(|(rule, message)| {
        rule.contains("oldSelf.box.lowerAscii()") && message.starts_with("table is immutable")
    }));
}

#[test]
fn json_payloads_are_refused_on_an_outbox() {
    let spec_rules = rules(&at("spec"));
    let (rule, _) = spec_rules
        .iter()
        .find(|(_, m)| m == "Json and Jsonb payloads are for an Inbox only")
        .unwrap();
    assert!(rule.contains("self.box == 'Inbox'"), "{rule}");
    assert!(rule.contains("['Json', 'Jsonb']"), "{rule}");
}

#[test]
fn an_inbox_target_version_is_capped_at_its_latest() {
    let spec_rules = rules(&at("spec"));
    assert!(
        spec_rules
            .iter()
            .any(|(rule, _)| rule
                .ends_with(&format!("self.targetVersion <= {INBOX_LATEST_VERSION}"))),
        "{spec_rules:?}"
    );
}

/// The rules stay in a small CEL subset: `==`, `<=`, `||`, `&&`, `!`, `? :`, `has()`, `in` over a
/// list literal, `lowerAscii()`, `matches()`, and `duration()` (which the local test server does
/// not evaluate: the real API server does, in `tests/suite/install/manifests_on_the_server.rs`).
#[test]
fn cel_rules_use_only_the_simple_subset() {
    let ident = regex::Regex::new(r"[A-Za-z_][A-Za-z0-9_]*").unwrap();
    let literal = regex::Regex::new(r"'[^']*'").unwrap();
    let allowed = [
        "self",
        "oldSelf",
        "has",
        "in",
        "box",
        "table",
        "payload",
        "targetVersion",
        "secretRef",
        "key",
        "keys",
        "parameters",
        "Inbox",
        "Outbox",
        "Json",
        "Jsonb",
        "duration",
        "lowerAscii",
        "matches",
    ];
    let mut all = Vec::new();
    collect_rules(&root_schema(), &mut all);
    assert!(all.len() >= 6, "{all:?}");
    for rule in all {
        let code = literal.replace_all(&rule, "''");
        for word in ident.find_iter(&code) {
            assert!(
                allowed.contains(&word.as_str()),
                "{} in {rule}",
                word.as_str()
            );
        }
    }
}

fn collect_rules(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "x-kubernetes-validations" {
                    out.extend(rules(node).into_iter().map(|(r, _)| r));
                } else {
                    collect_rules(value, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_rules(v, out)),
        _ => {}
    }
}

#[test]
fn the_schema_is_structural() {
    fn check(path: &str, node: &Value) {
        let Some(map) = node.as_object() else { return };
        for forbidden in [
            "$ref",
            "anyOf",
            "oneOf",
            "allOf",
            "not",
            "definitions",
            "$defs",
        ] {
            assert!(!map.contains_key(forbidden), "{forbidden} at {path}");
        }
        assert!(map.contains_key("type"), "no type at {path}");
        if let Some(props) = map.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                check(&format!("{path}.{name}"), child);
            }
        }
        if let Some(items) = map.get("items") {
            check(&format!("{path}[]"), items);
        }
    }
    check("", &root_schema());
}

#[test]
fn conditions_merge_by_type() {
    let node = at("status.conditions");
    assert_eq!(node["x-kubernetes-list-type"], "map");
    assert_eq!(node["x-kubernetes-list-map-keys"], json!(["type"]));
}

#[test]
fn printer_columns_match_the_contract() {
    let columns: Vec<(String, String, i64)> = version()["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_uppercase(),
                c["jsonPath"].as_str().unwrap().to_owned(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let ready = r#"[?(@.type=="Ready")]"#;
    let want = [
        ("BOX", ".spec.box".to_owned(), 0),
        ("TABLE", ".status.table".to_owned(), 0),
        ("VERSION", ".status.appliedVersion".to_owned(), 0),
        ("LOCK", ".status.lock.state".to_owned(), 0),
        ("READY", format!(".status.conditions{ready}.status"), 0),
        ("REASON", format!(".status.conditions{ready}.reason"), 0),
        (
            "DRIFTED",
            r#".status.conditions[?(@.type=="Drifted")].status"#.to_owned(),
            1,
        ),
        ("AGE", ".metadata.creationTimestamp".to_owned(), 0),
        ("KEY", ".status.lock.key".to_owned(), 1),
        ("MESSAGE", format!(".status.conditions{ready}.message"), 1),
    ]
    .map(|(n, p, prio)| (n.to_owned(), p, prio));
    assert_eq!(columns, want);
}

#[test]
fn status_key_is_a_string() {
    assert_eq!(at("status.lock.key")["type"], "string");
}

/// Every `description` in `node` and below, with the path to it.
fn descriptions(node: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match node {
        Value::Object(map) => {
            for (key, value) in map {
                let here = format!("{path}.{key}");
                match (key.as_str(), value) {
                    ("description", Value::String(text)) => out.push((here, text.clone())),
                    _ => descriptions(value, &here, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                descriptions(item, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_description_keeps_each_paragraph_on_one_line_for_kubectl_explain_to_wrap() {
    let mut found = Vec::new();
    descriptions(&crd(), "", &mut found);
    assert!(found.len() > 40, "{found:?}");
    let ragged: Vec<&(String, String)> = found
        .iter()
        .filter(|(_, text)| text.split("\n\n").any(|paragraph| paragraph.contains('\n')))
        .collect();
    assert!(
        ragged.is_empty(),
        "descriptions with a line break inside a paragraph: {ragged:#?}"
    );
    assert!(
        found.iter().all(|(_, text)| text == text.trim()),
        "{found:#?}"
    );
}
