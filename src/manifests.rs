//! Reading BoxTable manifests (and the Secrets beside them) from files and directories of
//! multi-document YAML, as `kubectl apply -f` would.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;

use crate::crd::{BoxTable, GROUP, KIND, VERSION};

/// What the given files hold.
#[derive(Default)]
pub struct Manifests {
    /// BoxTables in file order, with the file each came from.
    pub boxtables: Vec<(PathBuf, BoxTable)>,
    /// Secrets found beside them (for connection strings).
    pub secrets: Vec<Secret>,
    /// Documents of other kinds that were skipped, as `file: apiVersion/kind name`.
    pub skipped: Vec<String>,
}

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file or directory could not be read.
    #[error("reading {path} failed")]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML or does not fit its kind.
    #[error("{path}: document {index} is not a valid {what}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based document number in the file.
        index: usize,
        /// What it was read as.
        what: &'static str,
        /// The YAML or decoding error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Reads every `.yaml`/`.yml`/`.json` file under `paths` (directories are read in name order,
/// not recursively).
///
/// # Errors
/// [`ManifestError`] naming the file and document.
pub fn read(paths: &[PathBuf]) -> Result<Manifests, ManifestError> {
    let mut out = Manifests::default();
    for path in paths {
        for file in expand(path)? {
            read_file(&file, &mut out)?;
        }
    }
    Ok(out)
}

fn expand(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let read_err = |source| ManifestError::Read {
        path: path.to_owned(),
        source,
    };
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_err)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Option<NameOnly>,
}

#[derive(Deserialize)]
struct NameOnly {
    #[serde(default)]
    name: Option<String>,
}

fn read_file(path: &Path, out: &mut Manifests) -> Result<(), ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
        path: path.to_owned(),
        source,
    })?;
    let boxtable_api = format!("{GROUP}/{VERSION}");
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| ManifestError::Parse {
            path: path.to_owned(),
            index: 1,
            what: "YAML stream",
            source: Box::new(e),
        })?;
    for (i, value) in documents.into_iter().enumerate() {
        let parse_err = |what, source: serde_json::Error| ManifestError::Parse {
            path: path.to_owned(),
            index: i + 1,
            what,
            source: Box::new(source),
        };
        if value.is_null() {
            continue;
        }
        let meta: TypeMeta =
            serde_json::from_value(value.clone()).map_err(|e| parse_err("Kubernetes object", e))?;
        if meta.api_version == boxtable_api && meta.kind == KIND {
            let bt: BoxTable =
                serde_json::from_value(value).map_err(|e| parse_err("BoxTable", e))?;
            out.boxtables.push((path.to_owned(), bt));
        } else if meta.api_version == "v1" && meta.kind == "Secret" {
            let secret: Secret =
                serde_json::from_value(value).map_err(|e| parse_err("Secret", e))?;
            out.secrets.push(secret);
        } else {
            let name = meta.metadata.and_then(|m| m.name).unwrap_or_default();
            out.skipped.push(format!(
                "{}: {}/{} {}",
                path.display(),
                meta.api_version,
                meta.kind,
                name
            ));
        }
    }
    Ok(())
}
