//! Helm 3 and Helm 4 as users run them, against the suite's control plane as its admin, each run
//! with a home of its own (no configuration or cache of the machine's).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::support::control_plane::{ControlPlane, root};
use crate::support::node::printed;

/// Helm `major` (`v3` or `v4`): `$HELM_V3` / `$HELM_V4` (exported by `scripts/helm.sh`'s
/// `helm_build`), else built once by `scripts/helm.sh` (it needs Go).
pub fn helm_binary(major: &str) -> PathBuf {
    static V3: OnceLock<PathBuf> = OnceLock::new();
    static V4: OnceLock<PathBuf> = OnceLock::new();
    let cell = if major == "v3" { &V3 } else { &V4 };
    cell.get_or_init(|| {
        let var = format!("HELM_{}", major.to_uppercase());
        if let Some(path) = std::env::var_os(&var).filter(|p| !p.is_empty()) {
            return PathBuf::from(path);
        }
        let out = Command::new(root().join("scripts/helm.sh"))
            .args(["path", major])
            .output()
            .unwrap_or_else(|e| panic!("running scripts/helm.sh path {major}: {e}"));
        assert!(
            out.status.success(),
            "{var} is not set and `scripts/helm.sh path {major}` could not build Helm {major}: {}",
            printed(&out)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

/// Runs Helm `major` against the control plane as the admin, with `home` as its home, in the
/// clone's root (so a chart is named by its path there).
pub fn helm(major: &str, plane: &ControlPlane, home: &Path, args: &[&str]) -> Output {
    Command::new(helm_binary(major))
        .args(args)
        .current_dir(root())
        .env("KUBECONFIG", &plane.admin_kubeconfig)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("HELM_NAMESPACE")
        .env_remove("HELM_KUBECONTEXT")
        .output()
        .unwrap()
}
