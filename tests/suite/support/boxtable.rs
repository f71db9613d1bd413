//! The one BoxTable builder of the tests: `boxtable("orders").table("orders_outbox").drop_policy()`,
//! built as the typed object the controller tests create ([`BoxTableBuilder::build`]) or written
//! as the manifest a user applies ([`BoxTableBuilder::manifest`]).

use std::path::Path;

use boxtable_operator::crd::{
    BoxKind, BoxTable, BoxTableSpec, ConnectionKeys, ConnectionParameters, DeletionPolicy,
};
use serde_json::Value;

use crate::support::controller::{NAMESPACE, SECRET};

/// A BoxTable under construction: `boxtable("orders").outbox().schema("sales").target(5)`.
pub struct BoxTableBuilder {
    name: String,
    namespace: String,
    spec: BoxTableSpec,
    /// Spec lines written as they are (2-space indented), for what the typed spec cannot hold.
    raw_spec: String,
}

/// An outbox named `name` with every default, reading the test Secret.
pub fn boxtable(name: &str) -> BoxTableBuilder {
    BoxTableBuilder {
        name: name.to_owned(),
        namespace: NAMESPACE.to_owned(),
        spec: BoxTableSpec::new(BoxKind::Outbox, SECRET),
        raw_spec: String::new(),
    }
}

impl BoxTableBuilder {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn outbox(mut self) -> Self {
        self.spec.box_kind = BoxKind::Outbox;
        self
    }

    pub fn inbox(mut self) -> Self {
        self.spec.box_kind = BoxKind::Inbox;
        self
    }

    pub fn table(mut self, table: &str) -> Self {
        self.spec.table = Some(table.to_owned());
        self
    }

    pub fn schema(mut self, schema: &str) -> Self {
        schema.clone_into(&mut self.spec.schema);
        self
    }

    pub fn lock_timeout(mut self, timeout: &str) -> Self {
        timeout.clone_into(&mut self.spec.lock.timeout);
        self
    }

    pub fn target(mut self, version: u32) -> Self {
        self.spec.target_version = Some(version);
        self
    }

    /// `spec.ddl.lockTimeout`: how long a DDL statement waits for a table lock.
    pub fn ddl_lock_timeout(mut self, timeout: &str) -> Self {
        self.spec
            .ddl
            .get_or_insert_with(Default::default)
            .lock_timeout = Some(timeout.to_owned());
        self
    }

    pub fn drop_policy(mut self) -> Self {
        self.spec.deletion_policy = DeletionPolicy::Drop;
        self
    }

    pub fn suspended(mut self) -> Self {
        self.spec.suspend = true;
        self
    }

    pub fn secret(mut self, name: &str) -> Self {
        name.clone_into(&mut self.spec.database.secret_ref.name);
        self
    }

    /// Reads the connection from the Secret's separate `keys`, with `parameters`.
    pub fn separate_keys(mut self, keys: ConnectionKeys, parameters: ConnectionParameters) -> Self {
        self.spec.database.secret_ref.keys = Some(Box::new(keys));
        self.spec.database.parameters = Some(Box::new(parameters));
        self
    }

    /// `metadata.namespace` (by default the controller harness's [`NAMESPACE`]).
    pub fn namespace(mut self, namespace: &str) -> Self {
        namespace.clone_into(&mut self.namespace);
        self
    }

    /// Spec lines written as they are, 2-space indented (`"  tabel: orders\n"`): fields the
    /// typed spec cannot hold, such as a typo or a value of the wrong type. Only in
    /// [`Self::manifest`].
    pub fn raw_spec(mut self, lines: &str) -> Self {
        self.raw_spec.push_str(lines);
        self
    }

    /// The typed object, as the controller tests create it.
    pub fn build(self) -> BoxTable {
        assert!(
            self.raw_spec.is_empty(),
            "raw spec lines exist only in a manifest"
        );
        let mut bt = BoxTable::new(&self.name, self.spec);
        bt.metadata.namespace = Some(self.namespace);
        bt
    }

    /// Writes [`Self::manifest`] to the file `name` in `dir`; returns the file's path.
    pub fn write_manifest(self, dir: &Path, name: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, self.manifest()).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// The manifest a user would write: a YAML document (starting with `---`) that sets only
    /// what differs from the defaults, plus the raw spec lines.
    pub fn manifest(self) -> String {
        let defaults = serde_json::to_value(BoxTableSpec::new(
            self.spec.box_kind,
            &self.spec.database.secret_ref.name,
        ))
        .unwrap();
        let spec = serde_json::to_value(&self.spec).unwrap();
        let mut out = format!(
            "---\napiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: {}\n  \
             namespace: {}\nspec:\n",
            self.name, self.namespace
        );
        for (key, value) in spec.as_object().unwrap() {
            let always = key == "box" || key == "database";
            if always || defaults.get(key) != Some(value) {
                yaml_field(&mut out, 1, key, value);
            }
        }
        out.push_str(&self.raw_spec);
        out
    }
}

/// Writes `key: value` at `depth` (2 spaces each) in block style.
fn yaml_field(out: &mut String, depth: usize, key: &str, value: &Value) {
    let indent = "  ".repeat(depth);
    match value {
        Value::Object(map) => {
            out.push_str(&format!("{indent}{key}:\n"));
            for (k, v) in map {
                yaml_field(out, depth + 1, k, v);
            }
        }
        Value::String(s) if is_plain(s) => out.push_str(&format!("{indent}{key}: {s}\n")),
        other => out.push_str(&format!("{indent}{key}: {other}\n")),
    }
}

/// Whether `s` reads back as the same string without quotes.
fn is_plain(s: &str) -> bool {
    let word = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    let starts = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let special = ["true", "false", "null", "yes", "no", "on", "off", "y", "n"]
        .contains(&s.to_ascii_lowercase().as_str());
    word && starts && !special
}
