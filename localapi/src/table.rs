//! Server-side `meta.k8s.io/v1 Table` output built from printer columns.

use serde_json::{Value, json};

use crate::jsonpath;
use crate::registry::{PrinterColumn, ResourceDef};

/// How much of each object a table row carries (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The full object.
    Object,
}

impl IncludeObject {
    /// Parses the query value.
    pub fn parse(v: Option<&str>) -> Self {
        match v {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a server-side table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn age_column() -> PrinterColumn {
    PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".into(),
    }
}

fn columns(def: &ResourceDef) -> Vec<PrinterColumn> {
    if !def.printer_columns.is_empty() {
        return def.printer_columns.clone();
    }
    let mut cols = Vec::new();
    if def.plural == "secrets" {
        cols.push(PrinterColumn {
            name: "Type".into(),
            type_: "string".into(),
            format: String::new(),
            description: "The type of the secret".into(),
            priority: 0,
            json_path: ".type".into(),
        });
    }
    cols.push(age_column());
    cols
}

/// kube's `HumanDuration` rendering of an age.
pub fn human_duration(secs: i64) -> String {
    if secs < 0 {
        return "0s".into();
    }
    let (m, h) = (secs / 60, secs / 3600);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else {
        format!("{}y", h / 24 / 365)
    }
}

fn cell(col: &PrinterColumn, obj: &Value) -> Value {
    let Some(v) = jsonpath::first(obj, &col.json_path) else {
        return Value::Null;
    };
    if col.type_ == "date" {
        let Some(ts) = v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) else {
            return Value::Null;
        };
        return json!(human_duration(
            jiff::Timestamp::now().as_second() - ts.as_second()
        ));
    }
    match (&*col.type_, &v) {
        ("string", Value::String(_))
        | ("integer", Value::Number(_))
        | ("number", Value::Number(_))
        | ("boolean", Value::Bool(_)) => v,
        ("string", other) => json!(other.to_string()),
        _ => v,
    }
}

/// Builds a Table for the given objects.
pub fn table(def: &ResourceDef, objects: &[&Value], rv: &str, include: IncludeObject) -> Value {
    let cols = columns(def);
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}),
    ];
    defs.extend(cols.iter().map(|c| json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})));
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut cells = vec![obj.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
            cells.extend(cols.iter().map(|c| cell(c, obj)));
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))});
                }
                IncludeObject::Object => row["object"] = (*obj).clone(),
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
        "columnDefinitions": defs, "rows": rows})
}
