//! The simple JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a['k']`, `.a[?(@.type=="Ready")].b`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
    Filter(String, String),
}

fn parse(path: &str) -> Option<Vec<Step>> {
    let p = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim();
    let cs: Vec<char> = p.chars().collect();
    let mut i = 0;
    let mut steps = Vec::new();
    while i < cs.len() {
        match cs[i] {
            '.' => {
                i += 1;
                let start = i;
                while i < cs.len() && cs[i] != '.' && cs[i] != '[' {
                    i += 1;
                }
                let key: String = cs[start..i].iter().collect();
                if !key.is_empty() {
                    steps.push(Step::Key(key));
                }
            }
            '[' => {
                let end = (i..cs.len()).find(|&j| cs[j] == ']' && !inside_quotes(&cs[i..j]))?;
                let inner: String = cs[i + 1..end].iter().collect();
                i = end + 1;
                let inner = inner.trim();
                if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                    let (k, v) = f.split_once("==")?;
                    steps.push(Step::Filter(
                        k.trim().to_string(),
                        v.trim().trim_matches(|c| c == '"' || c == '\'').to_string(),
                    ));
                } else if let Ok(n) = inner.parse::<usize>() {
                    steps.push(Step::Index(n));
                } else {
                    steps.push(Step::Key(
                        inner.trim_matches(|c| c == '"' || c == '\'').to_string(),
                    ));
                }
            }
            _ => return None,
        }
    }
    Some(steps)
}

fn inside_quotes(cs: &[char]) -> bool {
    cs.iter().filter(|c| **c == '"').count() % 2 == 1
}

/// The first value a path selects, if any.
pub fn first(obj: &Value, path: &str) -> Option<Value> {
    let steps = parse(path)?;
    let mut cur = vec![obj.clone()];
    for step in steps {
        let mut next = Vec::new();
        for v in cur {
            match &step {
                Step::Key(k) => next.extend(v.get(k).cloned()),
                Step::Index(n) => next.extend(v.get(*n).cloned()),
                Step::Filter(k, want) => {
                    if let Value::Array(items) = v {
                        next.extend(items.into_iter().filter(|it| {
                            it.get(k)
                                .map(|x| {
                                    x.as_str()
                                        .map(str::to_string)
                                        .unwrap_or_else(|| x.to_string())
                                })
                                .as_deref()
                                == Some(want)
                        }));
                    }
                }
            }
        }
        cur = next;
    }
    cur.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filter_selects_the_ready_condition() {
        let obj = json!({"status": {"conditions": [{"type": "Reconciling", "status": "False"}, {"type": "Ready", "status": "True"}], "lock": {"state": "Released"}}});
        assert_eq!(
            first(&obj, r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("True"))
        );
        assert_eq!(first(&obj, ".status.lock.state"), Some(json!("Released")));
        assert_eq!(
            first(&obj, ".status.conditions[0].type"),
            Some(json!("Reconciling"))
        );
        assert_eq!(first(&obj, ".spec.box"), None);
    }
}
