//! The OCI image `scripts/image.sh` builds without a container daemon: built once per run from
//! the debug binary, its layers unpacked into a root filesystem, its entrypoint run from there as
//! UID 65532 on a read-only mount, and its configuration, files and SBOM checked; and the
//! `Dockerfile` held to the same user, entrypoint, cmd, workdir and labels.
//!
//! Running the entrypoint needs root (a private mount namespace and `chroot --userspec`), as CI
//! has; without it the test fails and says so. The first run builds crane and cargo-cyclonedx
//! into the cache (`scripts/tools.sh`).

// Helpers fail the test they serve, exactly as the #[test] functions do.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value as Json;

use crate::support::process::printed;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const BINARY: &str = env!("CARGO_BIN_EXE_boxtable-operator");

/// The labels both builds set, with the values that do not depend on the commit.
const FIXED_LABELS: &[(&str, &str)] = &[
    ("org.opencontainers.image.title", "boxtable-operator"),
    (
        "org.opencontainers.image.description",
        "Provisions Brighter outbox and inbox tables in PostgreSQL",
    ),
    (
        "org.opencontainers.image.source",
        "https://github.com/boxtable/boxtable-operator",
    ),
    ("org.opencontainers.image.licenses", "Apache-2.0"),
];

/// Programs that must not be in the image: shells and the usual multi-call binaries.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "toybox",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The image built for this run, unpacked.
struct Image {
    /// Keeps the build's directory for the length of the run.
    _dir: tempfile::TempDir,
    output: PathBuf,
    manifest: Json,
    config: Json,
    /// Every path in every layer, as the layer's tar lists it, with its `tar -tv` line.
    entries: Vec<(String, String)>,
    rootfs: PathBuf,
    sbom: Json,
}

fn build(output: &Path) -> Output {
    Command::new(root().join("scripts/image.sh"))
        .args(["--binary", BINARY, "--output"])
        .arg(output)
        .current_dir(root())
        .output()
        .expect("run scripts/image.sh")
}

fn read_json(path: &Path) -> Json {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    layout.join("blobs/sha256").join(hex)
}

fn image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("image");
        let built = build(&output);
        assert!(
            built.status.success(),
            "scripts/image.sh failed:\n{}",
            printed(&built)
        );
        let layout = output.join("oci");
        let index = read_json(&layout.join("index.json"));
        let manifests = index["manifests"]
            .as_array()
            .expect("index.json lists manifests");
        assert_eq!(manifests.len(), 1, "one image in the layout: {index}");
        let manifest = read_json(&blob(&layout, manifests[0]["digest"].as_str().unwrap()));
        let config = read_json(&blob(
            &layout,
            manifest["config"]["digest"].as_str().unwrap(),
        ));
        let rootfs = dir.path().join("rootfs");
        fs::create_dir(&rootfs).unwrap();
        let mut entries = Vec::new();
        for layer in manifest["layers"].as_array().expect("layers") {
            let media_type = layer["mediaType"].as_str().unwrap();
            assert_eq!(
                media_type, "application/vnd.oci.image.layer.v1.tar+gzip",
                "an OCI layer"
            );
            let path = blob(&layout, layer["digest"].as_str().unwrap());
            let listed = Command::new("tar")
                .args(["--list", "--verbose", "--numeric-owner", "--gzip", "--file"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(listed.status.success(), "{}", printed(&listed));
            for line in String::from_utf8(listed.stdout).unwrap().lines() {
                let name = line
                    .split_whitespace()
                    .nth(5)
                    .expect("a tar -tv line has a name")
                    .to_string();
                entries.push((name, line.to_string()));
            }
            let unpacked = Command::new("tar")
                .args(["--extract", "--gzip", "--same-permissions", "--file"])
                .arg(&path)
                .arg("--directory")
                .arg(&rootfs)
                .output()
                .unwrap();
            assert!(unpacked.status.success(), "{}", printed(&unpacked));
        }
        let sbom = read_json(&output.join("sbom.cdx.json"));
        Image {
            _dir: dir,
            output,
            manifest,
            config,
            entries,
            rootfs,
            sbom,
        }
    })
}

/// Runs the image's entrypoint with `args` from the unpacked root filesystem, as the image's
/// user, in a private mount namespace where that root filesystem is mounted read-only.
fn run_entrypoint(image: &Image, args: &[&str]) -> Output {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    assert!(
        is_root,
        "running the image's entrypoint from its unpacked root filesystem needs root (a private \
         mount namespace for the read-only mount and chroot --userspec to become UID 65532); CI \
         runs as root: run this test as root, for example with sudo -E cargo test --test suite -- image::"
    );
    let config = &image.config["config"];
    let user = config["User"].as_str().unwrap();
    let mut command = vec![config["Entrypoint"][0].as_str().unwrap().to_string()];
    command.extend(args.iter().map(|a| a.to_string()));
    // The probe write shows the mount is read-only before the entrypoint runs on it.
    let script = r#"
        root=$1 user=$2; shift 2
        mount --bind "$root" "$root" && mount -o remount,bind,ro "$root" || exit 91
        if touch "$root/.write-probe" 2>/dev/null; then echo "the root filesystem is writable" >&2; exit 92; fi
        exec chroot --userspec="$user" "$root" "$@"
    "#;
    Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(&image.rootfs)
        .arg(user)
        .args(&command)
        .env_clear()
        .output()
        .expect("run unshare (util-linux)")
}

#[test]
fn the_entrypoint_prints_its_version_as_uid_65532_on_a_read_only_root() {
    let image = image();
    let out = run_entrypoint(image, &["--version"]);
    assert!(out.status.success(), "{}", printed(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("boxtable-operator {VERSION}")
    );
}

#[test]
fn the_entrypoint_prints_the_crd_as_uid_65532_on_a_read_only_root() {
    let image = image();
    let out = run_entrypoint(image, &["crd"]);
    assert!(out.status.success(), "{}", printed(&out));
    let expected = fs::read_to_string(root().join("crds/boxtable.yaml")).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

#[test]
fn the_configuration_runs_the_operator_as_nonroot() {
    let config = &image().config;
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532", "the image's user: {c}");
    assert_eq!(c["Entrypoint"], serde_json::json!(["/boxtable-operator"]));
    assert_eq!(c["Cmd"], serde_json::json!(["run"]));
    assert_eq!(c["WorkingDir"], "/");
    assert_eq!(c["ExposedPorts"], serde_json::json!({"8080/tcp": {}}));
    assert!(c["Env"].is_null(), "no environment: {}", c["Env"]);
    assert_eq!(config["os"], "linux");
    let arch = Command::new("dpkg")
        .arg("--print-architecture")
        .output()
        .unwrap();
    assert_eq!(
        config["architecture"],
        String::from_utf8_lossy(&arch.stdout).trim()
    );
}

fn git(args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", printed(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The labels every image must carry, for the commit checked out.
fn expected_labels() -> BTreeMap<String, String> {
    let epoch: i64 = git(&["log", "-1", "--format=%ct", "HEAD"]).parse().unwrap();
    let created = jiff::Timestamp::from_second(epoch)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut labels: BTreeMap<String, String> = FIXED_LABELS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.insert("org.opencontainers.image.version".into(), VERSION.into());
    labels.insert(
        "org.opencontainers.image.revision".into(),
        git(&["rev-parse", "HEAD"]),
    );
    labels.insert("org.opencontainers.image.created".into(), created);
    labels
}

fn string_map(value: &Json) -> BTreeMap<String, String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("a map: {value}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn labels_and_annotations_name_the_source_version_revision_licenses_and_commit_time() {
    let image = image();
    let expected = expected_labels();
    assert_eq!(string_map(&image.config["config"]["Labels"]), expected);
    assert_eq!(string_map(&image.manifest["annotations"]), expected);
}

/// What a file in the image may be, by path.
fn allowed(path: &str) -> bool {
    let lib = regex::Regex::new(r"^(lib|lib64)/([a-z0-9_]+-linux-gnu/)?(ld-linux[-a-z0-9_.]*\.so\.\d+|lib[a-z0-9_]+\.so\.\d+)$").unwrap();
    let copyright = regex::Regex::new(r"^usr/share/doc/[a-z0-9.+-]+(/copyright)?$").unwrap();
    path == "boxtable-operator"
        || path == "etc/passwd"
        || path == "etc/group"
        || lib.is_match(path)
        || copyright.is_match(path)
}

#[test]
fn the_layers_hold_the_binary_its_libraries_copyrights_and_users_and_no_shell() {
    let image = image();
    assert!(!image.entries.is_empty());
    let mut files = BTreeSet::new();
    for (name, line) in &image.entries {
        let path = name.trim_start_matches("./").trim_end_matches('/');
        let base = path.rsplit('/').next().unwrap();
        assert!(!SHELLS.contains(&base), "a shell in the image: {line}");
        let kind = line.chars().next().unwrap();
        assert!(
            matches!(kind, 'd' | '-' | 'l'),
            "only directories, files and symbolic links: {line}"
        );
        if kind != 'd' {
            assert!(allowed(path), "an unexpected file in the image: {line}");
            files.insert(path.to_string());
        }
        let owner = line.split_whitespace().nth(1).unwrap();
        assert_eq!(
            owner, "0/0",
            "owned by root (and so not writable by 65532): {line}"
        );
    }
    for required in ["boxtable-operator", "etc/passwd", "etc/group"] {
        assert!(files.contains(required), "{required} is missing: {files:?}");
    }
    // The loader the binary names, and one copyright file for each Debian package.
    assert!(files.iter().any(|f| f.contains("ld-linux")), "{files:?}");
    for package in debian_packages(&image.sbom) {
        let copyright = format!("usr/share/doc/{package}/copyright");
        assert!(
            image.rootfs.join(&copyright).is_file(),
            "no {copyright}: {files:?}"
        );
    }
}

#[test]
fn passwd_and_group_name_uid_and_gid_65532_nonroot_with_no_login_shell() {
    let rootfs = &image().rootfs;
    let passwd = fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    let group = fs::read_to_string(rootfs.join("etc/group")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "{passwd}"
    );
    assert!(group.lines().any(|l| l == "nonroot:x:65532:"), "{group}");
    for line in passwd.lines() {
        let shell = line.rsplit(':').next().unwrap();
        assert_eq!(shell, "/sbin/nologin", "{line}");
        assert!(!rootfs.join(shell.trim_start_matches('/')).exists());
    }
}

/// `name version` of every package in Cargo.lock.
fn cargo_lock() -> BTreeSet<(String, String)> {
    let lock = fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let mut packages = BTreeSet::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_string());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            // (The file's own `version = 4` comes before any package.)
            packages.insert((n, v.trim_matches('"').to_string()));
        }
    }
    packages
}

fn components(sbom: &Json) -> &Vec<Json> {
    sbom["components"]
        .as_array()
        .expect("the SBOM lists components")
}

fn debian_packages(sbom: &Json) -> Vec<String> {
    components(sbom)
        .iter()
        .filter(|c| c["purl"].as_str().unwrap_or("").starts_with("pkg:deb/"))
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// The crates the binary is built from (`cargo tree` without dev-dependencies), `name version`.
fn crates_in_the_binary() -> BTreeSet<(String, String)> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "--package",
            "boxtable-operator",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree: {}", printed(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next()?;
            let version = parts.next()?.trim_start_matches('v');
            Some((name.to_string(), version.to_string()))
        })
        .collect()
}

#[test]
fn the_sbom_lists_the_crates_of_the_binary_from_cargo_lock_and_the_debian_packages() {
    let sbom = &image().sbom;
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let lock = cargo_lock();
    let listed: BTreeSet<(String, String)> = components(sbom)
        .iter()
        .filter(|c| c["purl"].as_str().unwrap_or("").starts_with("pkg:cargo/"))
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["version"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for krate in &listed {
        assert!(lock.contains(krate), "{krate:?} is not in Cargo.lock");
    }
    let mut needed = crates_in_the_binary();
    needed.remove(&("boxtable-operator".to_string(), VERSION.to_string()));
    let missing: Vec<_> = needed.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "crates of the binary missing from the SBOM: {missing:?}"
    );
    for dev_only in ["proptest", "criterion", "boxtable-localapi"] {
        assert!(
            !listed.iter().any(|(name, _)| name == dev_only),
            "{dev_only} is a dev-dependency, not in the binary"
        );
    }
    let debs = debian_packages(sbom);
    for package in ["libc6", "libgcc-s1"] {
        assert!(
            debs.iter().any(|d| d == package),
            "{package} missing: {debs:?}"
        );
    }
    assert_eq!(
        sbom["metadata"]["properties"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "boxtable-operator:image:digest")
            .map(|p| p["value"].as_str().unwrap().to_string()),
        Some(
            fs::read_to_string(image().output.join("digest"))
                .unwrap()
                .trim()
                .to_string()
        ),
        "the SBOM names the image it describes"
    );
}

#[test]
fn the_same_commit_and_binary_build_the_same_image_digest() {
    let image = image();
    let dir = tempfile::tempdir().unwrap();
    let again = build(&dir.path().join("image"));
    assert!(again.status.success(), "{}", printed(&again));
    assert_eq!(
        fs::read_to_string(dir.path().join("image/digest")).unwrap(),
        fs::read_to_string(image.output.join("digest")).unwrap()
    );
}

/// The instructions of the Dockerfile's last stage, `(instruction, arguments)`, with continued
/// lines joined.
fn dockerfile_final_stage() -> Vec<(String, String)> {
    let text = fs::read_to_string(root().join("Dockerfile")).unwrap();
    let mut instructions: Vec<(String, String)> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (word, rest) = current.split_once(' ').unwrap_or((&current, ""));
                instructions.push((word.to_uppercase(), rest.trim().to_string()));
                current.clear();
            }
        }
    }
    let last_from = instructions.iter().rposition(|(i, _)| i == "FROM").unwrap();
    instructions.split_off(last_from)
}

/// `KEY="value" KEY2=value2 ...` as a LABEL or an ARG writes them.
fn key_values(text: &str) -> BTreeMap<String, String> {
    let pair = regex::Regex::new(r#"([A-Za-z0-9_.-]+)=(?:"([^"]*)"|(\S+))"#).unwrap();
    pair.captures_iter(text)
        .map(|c| {
            let value = c.get(2).or_else(|| c.get(3)).unwrap().as_str();
            (c[1].to_string(), value.to_string())
        })
        .collect()
}

#[test]
fn the_dockerfile_builds_the_same_files_user_entrypoint_cmd_and_labels() {
    let stage = dockerfile_final_stage();
    let one = |name: &str| -> String {
        let found: Vec<_> = stage.iter().filter(|(i, _)| i == name).collect();
        assert_eq!(found.len(), 1, "one {name} in the final stage: {stage:?}");
        found[0].1.clone()
    };
    let config = &image().config["config"];
    assert_eq!(
        one("FROM"),
        "scratch",
        "nothing but the assembled root filesystem"
    );
    assert_eq!(one("COPY"), "--from=builder /rootfs /");
    let dockerfile = fs::read_to_string(root().join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("scripts/image-rootfs.sh target/release/boxtable-operator /rootfs"),
        "the builder assembles /rootfs with scripts/image-rootfs.sh, as scripts/image.sh does"
    );
    assert_eq!(one("USER"), config["User"].as_str().unwrap());
    assert_eq!(one("WORKDIR"), config["WorkingDir"].as_str().unwrap());
    let json = |text: String| -> Json { serde_json::from_str(&text).unwrap() };
    assert_eq!(json(one("ENTRYPOINT")), config["Entrypoint"]);
    assert_eq!(json(one("CMD")), config["Cmd"]);
    let ports: Vec<String> = config["ExposedPorts"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(one("EXPOSE"), ports.join(" "));

    let args: BTreeMap<String, String> = stage
        .iter()
        .filter(|(i, _)| i == "ARG")
        .flat_map(|(_, a)| key_values(a))
        .collect();
    assert_eq!(args.get("VERSION").map(String::as_str), Some(VERSION));
    let labels = key_values(&one("LABEL"));
    let image_labels = string_map(&config["Labels"]);
    assert_eq!(
        labels.keys().collect::<Vec<_>>(),
        image_labels.keys().collect::<Vec<_>>(),
        "the same label keys"
    );
    for (key, value) in &labels {
        match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
            Some(arg) => assert!(
                args.contains_key(arg),
                "{key} uses ARG {arg}, which is not declared"
            ),
            None => assert_eq!(Some(value), image_labels.get(key), "{key}"),
        }
    }
    assert_eq!(labels["org.opencontainers.image.version"], "${VERSION}");
    assert_eq!(
        labels["org.opencontainers.image.revision"],
        "${BOXTABLE_REVISION}"
    );
    assert_eq!(labels["org.opencontainers.image.created"], "${CREATED}");
}
