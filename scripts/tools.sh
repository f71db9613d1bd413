# shellcheck shell=bash
# Source this file: builds the pinned tools the image and the release workflow need, once, into
# a cache outside the clone (the way scripts/control-plane.sh builds the control plane):
#
#   tools_crane        crane (go-containerregistry), from tools/crane/go.mod   -> $CRANE
#   tools_actionlint   actionlint, from tools/actionlint/go.mod                -> $ACTIONLINT
#   tools_cyclonedx    cargo-cyclonedx, from crates.io at CYCLONEDX_VERSION    -> $CARGO_CYCLONEDX
#   tools_shellcheck   shellcheck, Debian's package (apt-get as root)         -> $SHELLCHECK
#
# Go tools are named by the `tool` line of their module and built with the machine's Go (1.26,
# no toolchain download, -mod=readonly so go.sum decides every byte). The cache directory is
# ${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/<tool>/<version>-<hash of go.mod and go.sum>/
# (BOXTABLE_TOOLS_CACHE overrides the root); cargo-cyclonedx is installed with
# `cargo install --locked` into <root>/cargo-cyclonedx/<version>/.

TOOLS_MODULES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)"
CYCLONEDX_VERSION=0.5.9

tools_log() { echo "tools.sh: $*" >&2; }

tools_cache_root() {
  echo "${BOXTABLE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator}"
}

# tools_go_build NAME MODULE: builds the `tool` package of tools/NAME (MODULE is the module whose
# version names the cache directory) unless cached; prints the binary's path.
tools_go_build() {
  local name=$1 module=$2 dir version hash pkg started
  dir="$TOOLS_MODULES_DIR/$name"
  if ! command -v go >/dev/null 2>&1; then
    tools_log "Go is not installed; $name is built from its Go module. Install Go 1.26 or newer"
    tools_log "(for example 'apt-get install golang-go' or the Go distribution)"
    return 1
  fi
  version=$(awk -v m="$module" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$dir/go.mod")
  hash=$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-12)
  pkg=$(awk '$1 == "tool" { print $2 }' "$dir/go.mod")
  local out
  out="$(tools_cache_root)/$name/${version:-unknown}-$hash"
  mkdir -p "$out"
  # One build at a time (tests run in parallel and may all ask for the tool at once).
  (
    flock 9
    [ ! -x "$out/$name" ] || exit 0
    tools_log "building $name $version (once, into $out)"
    started=$(date +%s)
    if ! (cd "$dir" && GOFLAGS="-mod=readonly -trimpath" GOTOOLCHAIN=local CGO_ENABLED=0 \
          go build -ldflags "-s -w" -o "$out/$name.tmp" "$pkg"); then
      rm -f "$out/$name.tmp"
      tools_log "building $name failed (see the go output above)"
      exit 1
    fi
    mv "$out/$name.tmp" "$out/$name"
    tools_log "built $name in $(( $(date +%s) - started ))s"
  ) 9>"$out.lock" || return 1
  echo "$out/$name"
}

tools_crane() {
  CRANE=$(tools_go_build crane github.com/google/go-containerregistry) || return 1
  export CRANE
}

tools_actionlint() {
  ACTIONLINT=$(tools_go_build actionlint github.com/rhysd/actionlint) || return 1
  export ACTIONLINT
}

# cargo-cyclonedx writes the image's SBOM from the crate graph (`cargo metadata`, so the exact
# versions in Cargo.lock). Built from crates.io with its own lock file, unoptimised (--debug):
# it only reads metadata, and the optimised build takes several times longer on 2 cores.
tools_cyclonedx() {
  local root started
  if [ -n "${CARGO_CYCLONEDX:-}" ]; then # one of your own
    [ -x "$CARGO_CYCLONEDX" ] || { tools_log "CARGO_CYCLONEDX=$CARGO_CYCLONEDX is not executable"; return 1; }
    return 0
  fi
  root="$(tools_cache_root)/cargo-cyclonedx/$CYCLONEDX_VERSION"
  mkdir -p "$(dirname "$root")"
  (
    flock 9
    [ ! -x "$root/bin/cargo-cyclonedx" ] || exit 0
    tools_log "building cargo-cyclonedx $CYCLONEDX_VERSION (once, into $root)"
    started=$(date +%s)
    if ! cargo install --quiet --debug --locked --version "$CYCLONEDX_VERSION" --root "$root.tmp" cargo-cyclonedx; then
      rm -rf "$root.tmp"
      tools_log "building cargo-cyclonedx failed (see the cargo output above)"
      exit 1
    fi
    rm -rf "$root"
    mv "$root.tmp" "$root"
    tools_log "built cargo-cyclonedx in $(( $(date +%s) - started ))s"
  ) 9>"$root.lock" || return 1
  CARGO_CYCLONEDX="$root/bin/cargo-cyclonedx"
  export CARGO_CYCLONEDX
}

# The shellcheck binary, which actionlint runs on every `run:` script: Debian's package,
# installed with apt when missing and run as root.
tools_shellcheck() {
  if ! command -v shellcheck >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      tools_log "shellcheck is missing: sudo apt-get install shellcheck"
      return 1
    fi
    mkdir -p "$(tools_cache_root)"
    (
      flock 9
      ! command -v shellcheck >/dev/null 2>&1 || exit 0
      tools_log "installing shellcheck with apt-get"
      # Waits for another apt (or dpkg) to finish rather than failing on its lock.
      apt_install() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq shellcheck >&2; }
      apt_install || { apt-get -o DPkg::Lock::Timeout=600 update -qq >&2 && apt_install; } \
        || { tools_log "installing shellcheck failed"; exit 1; }
    ) 9>"$(tools_cache_root)/shellcheck.lock" || return 1
  fi
  SHELLCHECK=$(command -v shellcheck)
  export SHELLCHECK
}
