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

bench_atlas() {
  local cli
  ATLAS_OPERATOR=$(tools_go_build atlas-operator github.com/ariga/atlas-operator) || return 1
  cli=$(tools_go_build atlas ariga.io/atlas/cmd/atlas) || return 1
  ATLAS_CLI_DIR=$(dirname "$cli")
  ATLAS_OPERATOR_MODULE=$(cd "$TOOLS_MODULES_DIR/atlas-operator" && GOFLAGS=-mod=readonly GOTOOLCHAIN=local \
    go list -m -f '{{.Dir}}' github.com/ariga/atlas-operator) || return 1
  export ATLAS_OPERATOR ATLAS_CLI_DIR ATLAS_OPERATOR_MODULE
}
