//! Object metadata helpers: timestamps, names, generated names, accessors.

use serde_json::{Map, Value};

use crate::error::Cause;

/// Metadata only the server sets: dropped from a body on create, carried over from the stored
/// object on update, never owned by a field manager.
pub const SERVER_SET: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Current time as kube writes it (`2026-11-30T12:00:00Z`).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `metadata`, created if absent; `None` when the object itself is not a JSON object.
pub fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let map = obj.as_object_mut()?;
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
}

/// A string field of `metadata`.
pub fn meta_str<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.resourceVersion` parsed as a number.
pub fn rv_of(obj: &Value) -> u64 {
    meta_str(obj, "resourceVersion")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A name with kube's 5-character random suffix for `generateName`.
pub fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

const SUBDOMAIN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Checks `metadata.name` is a lowercase RFC 1123 subdomain, as kube does for most kinds.
pub fn validate_name(name: &str) -> Option<Cause> {
    let ok = name.len() <= 253 && regex::Regex::new(SUBDOMAIN).is_ok_and(|re| re.is_match(name));
    (!ok).then(|| {
        Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                 characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', \
                 regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        )
    })
}

/// Standard base64 (with padding), as Secret `data` values are stored.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Folds a Secret's write-only `stringData` into base64 `data` and defaults `type` to `Opaque`, like kube.
pub fn normalize_secret(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    if let Some(Value::Object(strings)) = m.remove("stringData") {
        let data = m.entry("data").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(d) = data {
            for (k, v) in strings {
                d.insert(
                    k,
                    Value::String(base64(v.as_str().unwrap_or_default().as_bytes())),
                );
            }
        }
    }
    m.entry("type")
        .or_insert_with(|| Value::String("Opaque".into()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_string_data_becomes_base64_data() {
        let mut s = serde_json::json!({"stringData": {"a": "postgres://u:p@h/db", "b": "xy"}});
        normalize_secret(&mut s);
        assert_eq!(s["data"]["a"], "cG9zdGdyZXM6Ly91OnBAaC9kYg==");
        assert_eq!(s["data"]["b"], "eHk=");
        assert_eq!(s["type"], "Opaque");
        assert!(s.get("stringData").is_none());
    }
}
