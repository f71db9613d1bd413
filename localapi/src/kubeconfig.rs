//! Kubeconfig files pointing kubectl and kube-rs at the local server.

use std::path::Path;

/// The kubeconfig YAML for a server URL: one cluster, an empty user, context namespace `default`.
pub fn render(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: localapi\n  cluster:\n    server: \"{url}\"\n\
         users:\n- name: localapi\n  user: {{}}\ncontexts:\n- name: localapi\n  context:\n    cluster: localapi\n    \
         user: localapi\n    namespace: default\ncurrent-context: localapi\npreferences: {{}}\n"
    )
}

/// Writes the kubeconfig for `url` to `path`.
///
/// # Errors
/// The I/O error when the file cannot be written.
pub fn write(path: &Path, url: &str) -> std::io::Result<()> {
    std::fs::write(path, render(url))
}
