#!/usr/bin/env bash
# Writes dist/install.yaml, the one-file install: `kubectl kustomize deploy/` with the operator's
# image pinned to the version in Cargo.toml, so `kubectl apply -f install.yaml` installs exactly
# that release (the CRD, namespace, RBAC, Deployment, PodDisruptionBudget and metrics Service).
#
#   scripts/install-bundle.sh            rewrite dist/install.yaml
#   scripts/install-bundle.sh --stdout   print it instead
#
# Uses kubectl from PATH, or the one in KUBECTL. tests/suite/install/bundle.rs fails when the committed
# file differs from what this prints; run it after changing deploy/ or the version. The release
# workflow publishes the file as a release asset.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=ghcr.io/boxtable/boxtable-operator
kubectl=${KUBECTL:-kubectl}
version=$(awk -F'"' '/^\[package\]/ { p = 1 } p && $1 ~ /^version *= *$/ { print $2; exit }' Cargo.toml)
[ -n "$version" ] || { echo "install-bundle.sh: no version in Cargo.toml's [package]" >&2; exit 1; }

# kustomize takes bases by relative path only: the overlay lives under target/ for the run.
mkdir -p target
overlay=$(mktemp -d target/install-bundle.XXXXXX)
trap 'rm -rf "$overlay"' EXIT
cat >"$overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../deploy
images:
  - name: $IMAGE
    newTag: "$version"
YAML

render() {
  echo "# boxtable-operator $version: kubectl apply -f install.yaml"
  echo "# Generated from deploy/ by scripts/install-bundle.sh; do not edit by hand."
  "$kubectl" kustomize "$overlay"
}

if [ "${1:-}" = --stdout ]; then
  render
else
  render >dist/install.yaml.tmp
  mv dist/install.yaml.tmp dist/install.yaml
  echo "install-bundle.sh: wrote dist/install.yaml ($IMAGE:$version)" >&2
fi
