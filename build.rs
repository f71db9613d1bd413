//! Build script: records the git revision the binary is built from as `BOXTABLE_REVISION`, for
//! `boxtable_build_info{revision}`. A build outside a git checkout (a source tarball, an image
//! build without `.git`) sets `BOXTABLE_REVISION` itself, else gets `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BOXTABLE_REVISION");
    let revision = std::env::var("BOXTABLE_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(git_revision)
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuild when HEAD moves (a commit, a checkout), not on every build.
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    println!("cargo:rustc-env=BOXTABLE_REVISION={revision}");
}

fn git_revision() -> Option<String> {
    git(&["rev-parse", "--short=12", "HEAD"])
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}
