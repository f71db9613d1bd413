#!/usr/bin/env bash
# Helm 3 and Helm 4 for the chart tests (tests/suite/install/helm_chart.rs), each built from its own Go module
# pinned in tools/helm-v3/ and tools/helm-v4/ (go.mod, go.sum), the way scripts/control-plane.sh
# builds the control plane. Source this file and call `helm_build`; it exports
#
#   HELM_V3   the Helm 3 binary
#   HELM_V4   the Helm 4 binary
#
# or run it: `scripts/helm.sh path v3` (or v4) builds that Helm unless the cache has it and prints
# its path; tests/suite/support/helm.rs does this when HELM_V3 or HELM_V4 is not set.
#
# The binaries are cached outside the clone, under a directory named after the release and a hash
# of go.mod and go.sum: ${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/helm/<release>-<hash>/helm.
# Override the root with CONTROL_PLANE_CACHE (shared with scripts/control-plane.sh). Go's module
# and build caches are used as usual.

HELM_MODULES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)"

helm_log() { echo "helm.sh: $*" >&2; }

# The pinned release of Helm major $1 (v3 or v4), read from its module's go.mod.
helm_release() {
  awk -v module="helm.sh/helm/$1" '$1 == module { print $2 }' "$HELM_MODULES_DIR/helm-$1/go.mod"
}

# The cache directory for Helm major $1.
helm_cache_dir() {
  local module=$HELM_MODULES_DIR/helm-$1 hash
  hash=$(cat "$module/go.mod" "$module/go.sum" | sha256sum | cut -c1-12)
  echo "${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator}/helm/$(helm_release "$1")-$hash"
}

# Builds Helm major $1 unless the cache has it, and prints the binary's path.
helm_build_one() {
  local major=$1 dir release started
  release=$(helm_release "$major")
  if [ -z "$release" ]; then
    helm_log "tools/helm-$major/go.mod does not require helm.sh/helm/$major"
    return 1
  fi
  dir=$(helm_cache_dir "$major")
  mkdir -p "$dir"
  # One build at a time: two runs starting together must not write the same .tmp file.
  (
    flock 9
    if [ ! -x "$dir/helm" ]; then
      if ! command -v go >/dev/null 2>&1; then
        helm_log "Go is not installed; Helm is built from its Go module. Install Go 1.26 or newer"
        helm_log "(for example 'apt-get install golang-go' or the Go distribution) and run scripts/test.sh again"
        exit 1
      fi
      started=$(date +%s)
      helm_log "building Helm $release into $dir (the first build takes a few minutes)"
      mkdir -p "$dir"
      # The version `helm version` reports; a plain `go build` would report only the minor.
      if ! (cd "$HELM_MODULES_DIR/helm-$major" && GOFLAGS="-mod=readonly -trimpath" GOTOOLCHAIN=local \
            go build -ldflags "-s -w -X helm.sh/helm/$major/internal/version.version=$release" \
            -o "$dir/helm.tmp" "helm.sh/helm/$major/cmd/helm"); then
        rm -f "$dir/helm.tmp"
        helm_log "building Helm $release failed (see the go output above)"
        exit 1
      fi
      mv "$dir/helm.tmp" "$dir/helm"
      helm_log "built Helm $release in $(( $(date +%s) - started ))s"
    fi
  ) 9>"$dir.lock" || return 1
  echo "$dir/helm"
}

# Builds both (unless cached) and exports HELM_V3 and HELM_V4.
helm_build() {
  HELM_V3=$(helm_build_one v3) || return 1
  HELM_V4=$(helm_build_one v4) || return 1
  export HELM_V3 HELM_V4
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-} ${2:-}" in
    "path v3" | "path v4") helm_build_one "$2" ;;
    "build ") helm_build && echo "$HELM_V3" && echo "$HELM_V4" ;;
    *) echo "usage: $0 path v3|v4   (build if needed, print the binary's path)" >&2
       echo "       $0 build        (build both, print their paths)" >&2
       exit 2 ;;
  esac
fi
