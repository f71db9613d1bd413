//! Comparing two JSON documents field by field, for the tests that hold rendered manifests to
//! one another.

use serde_json::Value as Json;

/// How a value differs between a first and a second document.
pub enum Difference<'a> {
    /// A key only the first has.
    OnlyInFirst,
    /// A key only the second has.
    OnlyInSecond,
    /// A value the two hold differently: the first's, then the second's.
    Changed(&'a Json, &'a Json),
}

/// Every difference between `first` and `second` below `path`, with the path of each
/// (`.spec.template[0].name`). Objects compare key by key, arrays of one length item by item,
/// numbers by value (a schema's `minimum: 0` comes back as `0.0`).
pub fn differences<'a>(
    path: &str,
    first: &'a Json,
    second: &'a Json,
) -> Vec<(String, Difference<'a>)> {
    let mut out = Vec::new();
    collect(path, first, second, &mut out);
    out
}

fn collect<'a>(
    path: &str,
    first: &'a Json,
    second: &'a Json,
    out: &mut Vec<(String, Difference<'a>)>,
) {
    match (first, second) {
        (Json::Object(a), Json::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => collect(&here, value, other, out),
                    None => out.push((here, Difference::OnlyInFirst)),
                }
            }
            for key in b.keys().filter(|key| !a.contains_key(*key)) {
                out.push((format!("{path}.{key}"), Difference::OnlyInSecond));
            }
        }
        (Json::Array(a), Json::Array(b)) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                collect(&format!("{path}[{index}]"), x, y, out);
            }
        }
        (Json::Number(a), Json::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        (a, b) => out.push((path.to_owned(), Difference::Changed(a, b))),
    }
}
