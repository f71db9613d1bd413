# shellcheck shell=bash
# Source this file: builds the peer of benchmark item 8, Atlas Operator, and the `atlas` CLI it
# drives, from their Go modules pinned in tools/atlas-operator/ and tools/atlas/ (go.mod, go.sum),
# once, into the tools cache of scripts/tools.sh (flock, temporary file, then mv).
#
#   bench_atlas      exports ATLAS_OPERATOR (the manager binary), ATLAS_CLI_DIR (holds `atlas`),
#                    ATLAS_OPERATOR_MODULE (the module's files: CRDs and RBAC under config/)
#
# The CLI comes from module ariga.io/atlas/cmd/atlas. The Go module proxy serves none of its
# releases after v0.9.1 (2023; only the library ariga.io/atlas is served up to v1.2.3, which Atlas
# Operator v0.7.37 drives), so v0.9.1 is built: with golang.org/x/tools raised to v0.44.0 (its own
# v0.3.1 does not compile with Go 1.26) and its entgo.io/ent pseudo-version, which the proxy serves
# but the checksum database does not list (go.sum was written once with GONOSUMDB=entgo.io/ent and
# pins it since). BENCHMARKS.md item 8 says what this old CLI cannot do for the operator.
. "$(dirname "${BASH_SOURCE[0]}")/../tools.sh"

# bench_atlas_cli: builds the CLI as its releases are built, with its version stamped in (the
# operator refuses to start when `atlas version` prints none); prints the directory holding `atlas`.
bench_atlas_cli() {
  local dir=$TOOLS_MODULES_DIR/atlas version hash out
  version=$(awk '$1 == "ariga.io/atlas/cmd/atlas" { print $2 }' "$dir/go.mod")
  hash=$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-12)
  out="$(tools_cache_root)/atlas-cli/$version-$hash"
  mkdir -p "$out"
  (
    flock 9
    [ ! -x "$out/atlas" ] || exit 0
    tools_log "building atlas $version (once, into $out)"
    if ! (cd "$dir" && GOFLAGS="-mod=readonly -trimpath" GOTOOLCHAIN=local CGO_ENABLED=0 go build \
          -ldflags "-s -w -X ariga.io/atlas/cmd/atlas/internal/cmdapi.version=$version" \
          -o "$out/atlas.tmp" ariga.io/atlas/cmd/atlas); then
      rm -f "$out/atlas.tmp"
      tools_log "building atlas failed (see the go output above)"
      exit 1
    fi
    mv "$out/atlas.tmp" "$out/atlas"
  ) 9>"$out.lock" || return 1
  echo "$out"
}

bench_atlas() {
  ATLAS_OPERATOR=$(tools_go_build atlas-operator github.com/ariga/atlas-operator) || return 1
  ATLAS_CLI_DIR=$(bench_atlas_cli) || return 1
  ATLAS_OPERATOR_MODULE=$(cd "$TOOLS_MODULES_DIR/atlas-operator" && GOFLAGS=-mod=readonly GOTOOLCHAIN=local \
    go list -m -f '{{.Dir}}' github.com/ariga/atlas-operator) || return 1
  export ATLAS_OPERATOR ATLAS_CLI_DIR ATLAS_OPERATOR_MODULE
}
