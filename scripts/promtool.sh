#!/usr/bin/env bash
# promtool (Prometheus's rule checker and rule unit-test runner), pinned, for the tests of
# deploy/monitoring/. Source this file and call `promtool_install`, or run it: either prints the
# path of the binary.
#
# It comes from Debian's `prometheus` package, unpacked (`apt-get download` + `dpkg -x`, nothing
# is installed on the system), else, where that package cannot be had, it is built from its Go
# module. Cached outside the clone under
# ${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/promtool/<version>/ (PROMTOOL_CACHE overrides
# the root) and reused when present.

PROMTOOL_VERSION=2.42.0
# The Debian package (bookworm) and the Go module tag of the same release.
PROMTOOL_DEB_VERSION=2.42.0+ds-5+deb12u1
PROMTOOL_GO_MODULE=github.com/prometheus/prometheus/cmd/promtool@v0.42.0

promtool_log() { echo "promtool.sh: $*" >&2; }

promtool_dir() {
  echo "${PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator}/promtool/$PROMTOOL_VERSION"
}

# Unpacks promtool from the Debian package into $1; fails when the package cannot be downloaded.
promtool_from_debian() {
  local dir="$1" work
  command -v apt-get >/dev/null && command -v dpkg >/dev/null || return 1
  work="$(mktemp -d)"
  chmod 0755 "$work"  # apt downloads as _apt where it can
  if ! (cd "$work" && apt-get download -q "prometheus=$PROMTOOL_DEB_VERSION" >&2); then
    promtool_log "prometheus=$PROMTOOL_DEB_VERSION not in the package lists; running apt-get update"
    apt-get update -q >&2 || true
    if ! (cd "$work" && apt-get download -q "prometheus=$PROMTOOL_DEB_VERSION" >&2); then
      rm -rf "$work"
      return 1
    fi
  fi
  dpkg -x "$work"/prometheus_*.deb "$work/root" \
    && install -m 0755 "$work/root/usr/bin/promtool" "$dir/promtool.tmp" \
    && mv "$dir/promtool.tmp" "$dir/promtool"
  local rc=$?
  rm -rf "$work"
  return $rc
}

# Builds promtool from its Go module into $1.
promtool_from_go() {
  local dir="$1"
  command -v go >/dev/null || { promtool_log "neither the Debian package nor go is available"; return 1; }
  GOBIN="$dir" go install "$PROMTOOL_GO_MODULE" >&2
}

# Prints the path of the pinned promtool, fetching it into the cache first when needed.
promtool_install() {
  local dir start
  dir="$(promtool_dir)"
  if [ -x "$dir/promtool" ]; then
    echo "$dir/promtool"
    return 0
  fi
  mkdir -p "$dir"
  start=$SECONDS
  promtool_log "fetching promtool $PROMTOOL_VERSION into $dir"
  if ! promtool_from_debian "$dir"; then
    promtool_log "the Debian package failed; building $PROMTOOL_GO_MODULE"
    promtool_from_go "$dir" || return 1
  fi
  promtool_log "promtool ready in $((SECONDS - start)) s"
  echo "$dir/promtool"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  promtool_install
fi
