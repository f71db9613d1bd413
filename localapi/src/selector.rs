//! Label and field selectors (`labelSelector=`, `fieldSelector=`).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed selector; fields are dotted paths (`metadata.name`), labels are keys of `metadata.labels`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    labels: Vec<Req>,
    fields: Vec<Req>,
}

fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

fn set(s: &str) -> Vec<String> {
    s.trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(|x| x.trim().to_string())
        .collect()
}

fn parse_reqs(s: &str) -> Result<Vec<Req>, String> {
    split_top(s)
        .into_iter()
        .map(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                Ok(Req::Ne(k.trim().into(), v.trim().into()))
            } else if let Some((k, v)) = term.split_once("==") {
                Ok(Req::Eq(k.trim().into(), v.trim().into()))
            } else if let Some((k, v)) = term.split_once('=') {
                Ok(Req::Eq(k.trim().into(), v.trim().into()))
            } else if let Some((k, v)) = term.split_once(" notin ") {
                Ok(Req::NotIn(k.trim().into(), set(v)))
            } else if let Some((k, v)) = term.split_once(" in ") {
                Ok(Req::In(k.trim().into(), set(v)))
            } else if let Some(k) = term.strip_prefix('!') {
                Ok(Req::NotExists(k.trim().into()))
            } else if term
                .chars()
                .all(|c| c.is_alphanumeric() || "-_./".contains(c))
            {
                Ok(Req::Exists(term))
            } else {
                Err(format!("unable to parse requirement: {term}"))
            }
        })
        .collect()
}

fn holds(req: &Req, get: &dyn Fn(&str) -> Option<String>) -> bool {
    match req {
        Req::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
        Req::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
        Req::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
        Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
        Req::Exists(k) => get(k).is_some(),
        Req::NotExists(k) => get(k).is_none(),
    }
}

fn field(obj: &Value, path: &str) -> Option<String> {
    let v = path.split('.').try_fold(obj, |cur, k| cur.get(k))?;
    Some(match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

impl Selector {
    /// Parses `labelSelector` and `fieldSelector` query values.
    ///
    /// # Errors
    /// A message naming the requirement that could not be parsed.
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, String> {
        Ok(Self {
            labels: labels.map(parse_reqs).transpose()?.unwrap_or_default(),
            fields: fields.map(parse_reqs).transpose()?.unwrap_or_default(),
        })
    }

    /// Whether an object satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get_label = |k: &str| {
            labels
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let get_field =
            |k: &str| field(obj, k).or_else(|| (k == "metadata.namespace").then(String::new));
        self.labels.iter().all(|r| holds(r, &get_label))
            && self.fields.iter().all(|r| holds(r, &get_field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_based_and_equality_requirements_combine() {
        let obj = json!({"metadata": {"name": "a", "labels": {"app": "shop", "tier": "db"}}});
        let sel = Selector::parse(
            Some("app=shop,tier in (db, cache),!gone"),
            Some("metadata.name=a"),
        )
        .unwrap();
        assert!(sel.matches(&obj));
        let sel = Selector::parse(Some("app notin (shop)"), None).unwrap();
        assert!(!sel.matches(&obj));
        let sel = Selector::parse(None, Some("metadata.name!=a")).unwrap();
        assert!(!sel.matches(&obj));
    }
}
