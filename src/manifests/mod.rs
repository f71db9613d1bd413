//! Reading BoxTable manifests (and the Secrets beside them) from files and directories of
//! multi-document YAML or JSON, judged as the API server would judge them on `kubectl apply`.
//!
//! Every file is read and every problem kept, naming the file, the document and the field; one
//! broken file or document never hides the others. A BoxTable document goes through the same
//! steps as on an API server, all driven by the CRD generated from [`crate::crd`]:
//! - `strict`: unknown fields refused (strict field validation), nulls pruned, defaults applied;
//! - `openapi`: the OpenAPI schema (types, patterns, lengths, enums, ranges, required fields);
//! - `cel`: the `x-kubernetes-validations` rules.

mod cel;
mod openapi;
mod strict;

use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

use crate::crd::{BoxTable, GROUP, KIND, VERSION};

pub use openapi::SchemaCompileError;

/// Where a document came from: its file and its place in that file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// 1-based number of the document among the file's non-empty documents (0: the whole file).
    pub index: usize,
    /// The line the document (or its error) starts on, when known.
    pub line: Option<u64>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.index > 0 {
            write!(f, ": document {}", self.index)?;
        }
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// One thing wrong with one field, worded as the API server words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldError {
    /// A field the schema does not know.
    Unknown {
        /// The field, like `spec.tabel`.
        path: String,
    },
    /// A required field is missing.
    Required {
        /// The field.
        path: String,
    },
    /// A value the schema refuses.
    Invalid {
        /// The field.
        path: String,
        /// What the schema says about it.
        detail: String,
        /// Whether the API server would then leave the CEL rules unevaluated.
        blocks_rules: bool,
    },
    /// A CEL rule that does not hold.
    Rule {
        /// The field the rule is attached to.
        path: String,
        /// The value as the API server shows it (Go's `%q` for a string), or `None` for an object
        /// or a list, which it does not show.
        value: Option<String>,
        /// The rule's message (its `messageExpression`'s result, else its `message`).
        message: String,
    },
    /// Schema violations kept the CEL rules from being evaluated, as on the API server.
    RulesNotChecked,
    /// A CEL rule that could not be evaluated (refused rather than skipped).
    RuleNotEvaluated {
        /// The field the rule is attached to.
        path: String,
        /// The rule.
        rule: String,
        /// Why.
        problem: String,
    },
    /// The object does not decode into its type.
    Decode {
        /// What the decoder said.
        detail: String,
    },
}

impl FieldError {
    /// The field the error is about (empty for the whole object).
    pub fn path(&self) -> &str {
        match self {
            FieldError::Unknown { path }
            | FieldError::Required { path }
            | FieldError::Invalid { path, .. }
            | FieldError::Rule { path, .. }
            | FieldError::RuleNotEvaluated { path, .. } => path,
            FieldError::Decode { .. } | FieldError::RulesNotChecked => "",
        }
    }

    /// Whether the API server, finding this schema violation, leaves the CEL rules unevaluated
    /// (a missing required field, a value outside an enum, too long, too many, the wrong type);
    /// other violations (a pattern, a range) let the rules run and their errors add up.
    pub fn blocks_rules(&self) -> bool {
        match self {
            FieldError::Required { .. } => true,
            FieldError::Invalid { blocks_rules, .. } => *blocks_rules,
            _ => false,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldError::Unknown { path } => {
                write!(f, "strict decoding error: unknown field \"{path}\"")
            }
            FieldError::Required { path } => write!(f, "{path}: Required value"),
            FieldError::Invalid { path, detail, .. } => {
                write!(f, "{path}: Invalid value: {detail}")
            }
            FieldError::Rule {
                path,
                value,
                message,
            } => {
                let path = if path.is_empty() { "<root>" } else { path };
                match value {
                    Some(value) => write!(f, "{path}: Invalid value: {value}: {message}"),
                    None => write!(f, "{path}: Invalid value: {message}"),
                }
            }
            FieldError::RulesNotChecked => f.write_str(RULES_NOT_CHECKED),
            FieldError::RuleNotEvaluated {
                path,
                rule,
                problem,
            } => write!(
                f,
                "{path}: validation rule {rule:?} could not be evaluated ({problem}); refusing the object rather than skipping the rule"
            ),
            FieldError::Decode { detail } => write!(f, "{detail}"),
        }
    }
}

/// kube-apiserver's error when schema violations keep it from evaluating the CEL rules.
const RULES_NOT_CHECKED: &str = "<nil>: Invalid value: null: some validation rules were not \
    checked because the object was invalid; correct the existing errors to complete validation";

/// A document, or a whole file, that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where.
    pub source: Source,
    /// `BoxTable shop/orders` when the document got that far.
    pub object: Option<String>,
    /// What is wrong, one entry per field.
    pub errors: Vec<String>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        if let Some(object) = &self.object {
            write!(f, " ({object})")?;
        }
        write!(f, ": {}", self.errors.join("; "))
    }
}

/// A BoxTable read from a file.
#[derive(Debug, Clone)]
pub struct Document {
    /// Where it came from.
    pub source: Source,
    /// The object, decoded, defaulted and valid against the CRD.
    pub boxtable: BoxTable,
}

/// What the given files hold.
#[derive(Default)]
pub struct Manifests {
    /// Valid BoxTables in file order.
    pub boxtables: Vec<Document>,
    /// Secrets found beside them (for connection strings).
    pub secrets: Vec<Secret>,
    /// Documents of other kinds that were skipped, as `file: apiVersion/kind name`.
    pub skipped: Vec<String>,
    /// Everything that could not be read or is invalid, in file order.
    pub problems: Vec<Problem>,
}

/// The CRD's `openAPIV3Schema` as checked in at `crds/boxtable.yaml`, turned into JSON by
/// `build.rs`. The judge reads it from here rather than generating the CRD from [`crate::crd`] in
/// every `migrate` process: generating it (schemars and the structural-schema rewrite), or even
/// parsing its YAML, was the largest single cost of `migrate`'s start-up. The unit test
/// `the_embedded_schema_is_the_generated_one` (and the suite's `crd::golden`) hold the two equal.
const SCHEMA_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/boxtable-schema.json"));

/// The top-level fields of `metadata` (Kubernetes' `ObjectMeta`), which the CRD's schema leaves to
/// the API server. The unit test `the_metadata_fields_are_object_metas` holds this list equal to
/// k8s-openapi's schema of `ObjectMeta`.
const METADATA_FIELDS: [&str; 15] = [
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// The BoxTable CRD's schema, compiled once, judging documents.
pub struct Judge {
    schema: Value,
    validator: openapi::SchemaValidator,
    programs: cel::Programs,
}

impl Judge {
    /// A judge for the BoxTable CRD (as checked in, the same as generated from [`crate::crd`]).
    ///
    /// # Errors
    /// [`SchemaCompileError`] if the schema cannot be read or does not compile (a bug, not input).
    pub fn for_boxtable() -> Result<Self, SchemaCompileError> {
        Self::with_schema(schema()?)
    }

    /// A judge for `schema`, the BoxTable CRD's `openAPIV3Schema` ([`schema`]).
    fn with_schema(schema: Value) -> Result<Self, SchemaCompileError> {
        let validator = openapi::SchemaValidator::new(&schema)?;
        Ok(Self {
            schema,
            validator,
            programs: cel::Programs::default(),
        })
    }

    /// Decodes and validates one BoxTable document; every error found, not just the first.
    ///
    /// # Errors
    /// Every [`FieldError`]: unknown fields first (as the API server stops at decoding), then
    /// schema violations and CEL rules, in the API server's order: the rules run unless a
    /// violation blocks them ([`FieldError::blocks_rules`]), which adds
    /// [`FieldError::RulesNotChecked`] instead.
    pub fn boxtable(&self, object: Value) -> Result<BoxTable, Vec<FieldError>> {
        let object = decode_object(&self.schema, object)?;
        self.check(&object)?;
        to_boxtable(object)
    }

    /// Validates a decoded object against the schema and its rules, in the API server's order
    /// (see [`Judge::boxtable`]).
    ///
    /// # Errors
    /// Every schema violation and failed rule.
    fn check(&self, object: &Value) -> Result<(), Vec<FieldError>> {
        let mut errors = self.validator.errors(object);
        if errors.iter().any(FieldError::blocks_rules) {
            errors.push(FieldError::RulesNotChecked);
        } else {
            errors.extend(cel::errors(&self.programs, &self.schema, object));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// The CRD's `openAPIV3Schema`, read from [`SCHEMA_JSON`].
///
/// # Errors
/// [`SchemaCompileError`] if it is not JSON (a bug, not input).
fn schema() -> Result<Value, SchemaCompileError> {
    serde_json::from_str(SCHEMA_JSON)
        .map_err(|error| SchemaCompileError::new(format!("reading the schema: {error}")))
}

/// The API server's decoding of `object` as a BoxTable: unknown fields refused, nulls pruned,
/// defaults applied (see [`strict`]).
///
/// # Errors
/// Every unknown field.
fn decode_object(schema: &Value, mut object: Value) -> Result<Value, Vec<FieldError>> {
    let unknown = strict::Decoder::new(schema, &METADATA_FIELDS).decode(&mut object);
    if unknown.is_empty() {
        Ok(object)
    } else {
        Err(unknown)
    }
}

/// A decoded object as a [`BoxTable`].
///
/// # Errors
/// [`FieldError::Decode`] when it does not decode into the type.
fn to_boxtable(object: Value) -> Result<BoxTable, Vec<FieldError>> {
    serde_json::from_value(object).map_err(|e| {
        vec![FieldError::Decode {
            detail: format!("the object does not decode as a BoxTable: {e}"),
        }]
    })
}

/// The file name endings read from a directory (a file named on its own is read whatever its
/// name); in a mounted ConfigMap each key is a file.
pub const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Reads every `.yaml`/`.yml`/`.json` file under `paths` (directories are read in name order,
/// not recursively) and judges each BoxTable in them; never stops at a broken file. The schema is
/// compiled only when a BoxTable document is found, so files without one cost no compilation.
///
/// # Errors
/// [`SchemaCompileError`] only if the generated CRD schema is broken.
pub fn read(paths: &[PathBuf]) -> Result<Manifests, SchemaCompileError> {
    decode(paths)?.judge(|_, _| ())
}

/// Reads every file under `paths` as [`read`] does, and decodes each BoxTable document as the
/// API server decodes it, without judging it yet (see [`Decoded`]).
///
/// # Errors
/// [`SchemaCompileError`] only if the generated CRD schema is broken.
pub fn decode(paths: &[PathBuf]) -> Result<Decoded, SchemaCompileError> {
    let mut decoded = Decoded::default();
    for path in paths {
        match expand(path) {
            Ok(files) => {
                for file in files {
                    decoded.read_file(&file)?;
                }
            }
            Err(error) => decoded.problem(Problem {
                source: Source {
                    path: path.clone(),
                    index: 0,
                    line: None,
                },
                object: None,
                errors: vec![format!("cannot be read: {error}")],
            }),
        }
    }
    Ok(decoded)
}

/// The given files' documents, decoded but not yet judged: each BoxTable decoded as the API
/// server decodes it (unknown fields refused, nulls pruned, defaults applied), not yet checked
/// against the schema and its rules, which is most of a judge's cost. A caller may start reading
/// what a provisional BoxTable names while [`Decoded::judge`] runs, as long as nothing is
/// changed for it before its verdict: an accepted BoxTable is exactly its provisional one.
#[derive(Default)]
pub struct Decoded {
    /// BoxTables decoded and defaulted, in file order, each waiting for its verdict.
    pub provisional: Vec<Document>,
    /// Secrets found beside them (for connection strings).
    pub secrets: Vec<Secret>,
    /// Documents of other kinds that were skipped, as `file: apiVersion/kind name`.
    pub skipped: Vec<String>,
    /// BoxTable documents still to be judged, in file order.
    pending: Vec<Pending>,
    /// The problems found while decoding, each after its document's place among all documents.
    problems: Vec<(usize, Problem)>,
    /// The CRD's schema, read when the first BoxTable document is found.
    schema: Option<Value>,
    /// Documents (and unreadable paths) seen so far.
    seen: usize,
}

/// A decoded BoxTable document waiting for the schema and the rules.
struct Pending {
    /// Its place among all documents.
    order: usize,
    /// Where it came from.
    source: Source,
    /// `BoxTable shop/orders`.
    object: String,
    /// The decoded object.
    value: Value,
    /// Its place in [`Decoded::provisional`], or why it does not decode as a BoxTable (reported
    /// only if the schema and the rules find nothing else).
    provisional: Result<usize, Vec<FieldError>>,
}

impl Decoded {
    /// Whether the files hold no BoxTable document and nothing went wrong reading them.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.problems.is_empty()
    }

    /// Judges every decoded BoxTable against the schema and its rules, in file order, telling
    /// `verdict` each provisional BoxTable's verdict (by its place in [`Decoded::provisional`]) as
    /// soon as it is known: `Ok` when accepted, else the problem that refuses it. Returns what
    /// [`read`] returns.
    ///
    /// # Errors
    /// [`SchemaCompileError`] only if the generated CRD schema is broken; no verdict is told
    /// then.
    pub fn judge(
        self,
        mut verdict: impl FnMut(usize, Result<(), &Problem>),
    ) -> Result<Manifests, SchemaCompileError> {
        let Decoded {
            provisional,
            secrets,
            skipped,
            pending,
            mut problems,
            schema,
            seen: _,
        } = self;
        let mut provisional: Vec<Option<Document>> = provisional.into_iter().map(Some).collect();
        let mut boxtables = Vec::new();
        if let (Some(schema), false) = (schema, pending.is_empty()) {
            let judge = Judge::with_schema(schema)?;
            for document in pending {
                let (errors, place) = match (judge.check(&document.value), document.provisional) {
                    (Ok(()), Ok(place)) => {
                        verdict(place, Ok(()));
                        boxtables.extend(provisional.get_mut(place).and_then(Option::take));
                        continue;
                    }
                    (Err(errors), place) => (errors, place.ok()),
                    (Ok(()), Err(errors)) => (errors, None),
                };
                let problem = Problem {
                    source: document.source,
                    object: Some(document.object),
                    errors: errors.iter().map(ToString::to_string).collect(),
                };
                if let Some(place) = place {
                    verdict(place, Err(&problem));
                }
                problems.push((document.order, problem));
            }
        }
        problems.sort_by_key(|(order, _)| *order);
        Ok(Manifests {
            boxtables,
            secrets,
            skipped,
            problems: problems.into_iter().map(|(_, problem)| problem).collect(),
        })
    }

    /// Keeps a problem found while decoding, in document order.
    fn problem(&mut self, problem: Problem) {
        self.seen += 1;
        self.problems.push((self.seen, problem));
    }

    /// A BoxTable document decoded: refused at once for an unknown field, else kept for
    /// [`Decoded::judge`] (and, when it decodes as a BoxTable, as a provisional one).
    fn boxtable(&mut self, source: Source, value: Value) -> Result<(), SchemaCompileError> {
        let object = describe(&value);
        let schema = match self.schema.take() {
            Some(schema) => self.schema.insert(schema),
            None => self.schema.insert(schema()?),
        };
        let value = match decode_object(schema, value) {
            Ok(value) => value,
            Err(unknown) => {
                self.problem(Problem {
                    source,
                    object: Some(object),
                    errors: unknown.iter().map(ToString::to_string).collect(),
                });
                return Ok(());
            }
        };
        let provisional = to_boxtable(value.clone()).map(|boxtable| {
            self.provisional.push(Document {
                source: source.clone(),
                boxtable,
            });
            self.provisional.len() - 1
        });
        self.seen += 1;
        self.pending.push(Pending {
            order: self.seen,
            source,
            object,
            value,
            provisional,
        });
        Ok(())
    }

    /// Reads one file's documents: each BoxTable decoded, each Secret kept, anything else
    /// skipped, and every problem kept with its document and line.
    ///
    /// Longer than most: one loop over the documents whose arms each add a found object or a
    /// problem; split, the arms would pass the same values around.
    fn read_file(&mut self, path: &Path) -> Result<(), SchemaCompileError> {
        let source = |index, line| Source {
            path: path.to_owned(),
            index,
            line,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => {
                self.problem(Problem {
                    source: source(0, None),
                    object: None,
                    errors: vec![format!("cannot be read: {error}")],
                });
                return Ok(());
            }
        };
        let mut options = serde_saphyr::Options::default();
        // The snippet would echo the file's text, which may hold a Secret.
        options.with_snippet = false;
        let mut reader = std::io::Cursor::new(text.as_bytes());
        let documents = serde_saphyr::read_with_options::<_, serde_saphyr::Spanned<Value>>(
            &mut reader,
            options,
        );
        let boxtable_api = format!("{GROUP}/{VERSION}");
        for (i, document) in documents.enumerate() {
            let index = i + 1;
            let spanned = match document {
                Ok(spanned) => spanned,
                Err(error) => {
                    let line = error.location().map(|l| l.line());
                    self.problem(Problem {
                        source: source(index, line),
                        object: None,
                        errors: vec![format!("not valid YAML: {}", error.without_snippet())],
                    });
                    continue;
                }
            };
            let line = Some(spanned.referenced.line());
            let value = spanned.value;
            let problem = |object: Option<String>, errors: Vec<String>| Problem {
                source: source(index, line),
                object,
                errors,
            };
            let api_version = str_at(&value, "/apiVersion");
            let kind = str_at(&value, "/kind");
            if !value.is_object() || api_version.is_empty() || kind.is_empty() {
                self.problem(problem(
                    None,
                    vec!["not a Kubernetes object: apiVersion and kind are required".to_owned()],
                ));
            } else if api_version == boxtable_api && kind == KIND {
                self.boxtable(source(index, line), value)?;
            } else if api_version == "v1" && kind == "Secret" {
                let object = describe(&value);
                match serde_json::from_value::<Secret>(value) {
                    Ok(secret) => {
                        self.seen += 1;
                        self.secrets.push(secret);
                    }
                    // The decoder's message may quote a value, and a Secret's values are secret.
                    Err(_) => self.problem(problem(
                        Some(object),
                        vec![
                            "not a valid v1 Secret: data and stringData must map keys to strings"
                                .to_owned(),
                        ],
                    )),
                }
            } else {
                self.seen += 1;
                self.skipped.push(format!(
                    "{}: {api_version}/{kind} {}",
                    source(index, line),
                    str_at(&value, "/metadata/name")
                ));
            }
        }
        Ok(())
    }
}

fn expand(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| MANIFEST_EXTENSIONS.contains(&e))
        })
        .collect();
    files.sort();
    Ok(files)
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `BoxTable shop/orders` (or `v1/Secret db`) for messages.
fn describe(value: &Value) -> String {
    let kind = str_at(value, "/kind");
    let name = str_at(value, "/metadata/name");
    match value.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::CustomResourceExt;
    use serde_json::json;

    #[test]
    fn the_embedded_schema_is_the_generated_one() {
        let embedded: Value = serde_json::from_str(SCHEMA_JSON).unwrap();
        let crd = serde_json::to_value(BoxTable::crd()).unwrap();
        let generated = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(
            &embedded, generated,
            "crds/boxtable.yaml is not what src/crd/ generates: regenerate it (see its first lines)"
        );
    }

    #[test]
    fn the_metadata_fields_are_object_metas() {
        let meta = serde_json::to_value(schemars::schema_for!(ObjectMeta)).unwrap();
        let mut fields: Vec<&str> = meta["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(fields, METADATA_FIELDS);
    }

    fn object(spec: Value) -> Value {
        json!({"apiVersion": "brighter.dev/v1alpha1", "kind": "BoxTable",
               "metadata": {"name": "orders", "namespace": "shop", "labels": {"app": "shop"}},
               "spec": spec})
    }

    #[test]
    fn the_generated_crd_defaults_a_bare_spec() {
        let judge = Judge::for_boxtable().unwrap();
        let bt = judge
            .boxtable(object(
                json!({"box": "Outbox", "database": {"secretRef": {"name": "db"}}}),
            ))
            .unwrap();
        assert_eq!(bt.spec.schema, "public");
        assert_eq!(bt.spec.lock.timeout, "30s");
        assert_eq!(bt.spec.database.secret_ref.key(), "connectionString");
    }

    #[test]
    fn the_generated_crd_refuses_unknown_fields_schema_violations_and_failed_rules() {
        let judge = Judge::for_boxtable().unwrap();
        let errors = |spec: Value| -> Vec<String> {
            judge
                .boxtable(object(spec))
                .unwrap_err()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let db = json!({"secretRef": {"name": "db"}});
        assert_eq!(
            errors(json!({"box": "Outbox", "tabel": "x", "database": db})),
            ["strict decoding error: unknown field \"spec.tabel\""]
        );
        assert_eq!(
            errors(json!({"box": "Inbox", "targetVersion": 3, "database": db})),
            ["spec: Invalid value: an Inbox has versions 1 to 2"]
        );
        assert_eq!(
            errors(json!({"box": "Outbox"})),
            ["spec.database: Required value", RULES_NOT_CHECKED]
        );
    }

    #[test]
    fn each_duration_mistake_draws_one_message() {
        let judge = Judge::for_boxtable().unwrap();
        let errors = |lock: &str, ddl: &str| -> Vec<String> {
            let spec = json!({"box": "Outbox", "database": {"secretRef": {"name": "db"}},
                              "lock": {"timeout": lock}, "ddl": {"statementTimeout": ddl}});
            match judge.boxtable(object(spec)) {
                Ok(_) => Vec::new(),
                Err(errors) => errors.iter().map(ToString::to_string).collect(),
            }
        };
        let malformed = "must be a duration of whole numbers with units h, m, s, ms in that \
                         order, like 30s, 1m30s or 500ms";
        for text in ["30 s", "1d", "", "1.5s", "1s1m"] {
            assert_eq!(
                errors(text, "1s"),
                [format!(
                    "spec.lock.timeout: Invalid value: {text:?}: {malformed}"
                )]
            );
        }
        for text in [
            "61m",
            "2h",
            "999999999h",
            "1000000h",
            "99999999m",
            "0001h1ms",
        ] {
            assert_eq!(
                errors(text, "1s"),
                [format!(
                    "spec.lock.timeout: Invalid value: {text:?}: must be at most 1h"
                )]
            );
        }
        for text in [
            "0s",
            "1h",
            "59m59s999ms",
            "000000001h",
            "3600s",
            "3600000ms",
        ] {
            assert!(errors(text, "1s").is_empty(), "{text}");
        }
        assert_eq!(
            errors("1h", "999999999h"),
            ["spec.ddl.statementTimeout: Invalid value: \"999999999h\": must be at most 24h"]
        );
        assert!(errors("1h", "24h").is_empty());
    }

    #[test]
    fn rules_run_beside_a_pattern_violation_and_not_beside_a_blocking_one() {
        let judge = Judge::for_boxtable().unwrap();
        let errors = |spec: Value| -> Vec<String> {
            judge
                .boxtable(object(spec))
                .unwrap_err()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let db = json!({"secretRef": {"name": "db"}});
        let found = errors(
            json!({"box": "Outbox", "schema": "my-schema", "database": db,
                                  "lock": {"timeout": "2h"}}),
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("spec.schema: Invalid value: "),
            "{found:?}"
        );
        assert_eq!(
            found[1],
            "spec.lock.timeout: Invalid value: \"2h\": must be at most 1h"
        );
        let found = errors(json!({"box": "Crate", "database": db, "lock": {"timeout": "2h"}}));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("spec.box: Invalid value: "),
            "{found:?}"
        );
        assert_eq!(found[1], RULES_NOT_CHECKED);
    }
}
