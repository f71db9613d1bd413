#!/usr/bin/env bash
# The operator's image as an older commit built it, for the upgrade test (tests/suite/node/upgrade.rs):
#
#   scripts/previous-image.sh COMMIT
#
# prints one line, the directory holding what that commit ships:
#
#   DIR/image/boxtable-operator.tar   its image, built by its own scripts/image.sh
#   DIR/dist/install.yaml             its one-file install
#   DIR/charts/boxtable-operator/     its Helm chart
#   DIR/revision                      the commit (40 hex digits)
#
# The commit's tree is taken with `git archive` into a temporary directory (nothing in this clone
# changes), its binary built there with `cargo build --locked` (the dev profile the node tests'
# own image ships, and BOXTABLE_REVISION set to the commit, so its boxtable_build_info names it),
# and its image made by that commit's scripts/image.sh --binary. Built once per commit and kept
# in ${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/previous-image/<commit>/ (the root follows
# CONTROL_PLANE_CACHE like the other caches); the builds share one cargo target directory there,
# so a second commit compiles only what changed. A commit this clone does not have fails with one
# line saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "previous-image.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[ $# -eq 1 ] || die "usage: scripts/previous-image.sh COMMIT"
commit=$(git rev-parse --verify --quiet "$1^{commit}") \
  || die "commit $1 is not in this clone (git fetch the branch or tag that has it, or name another commit)"
for path in scripts/image.sh dist/install.yaml charts/boxtable-operator/Chart.yaml Cargo.lock; do
  git cat-file -e "$commit:$path" 2>/dev/null \
    || die "commit $commit has no $path: name a commit from after the image, install bundle and chart were added"
done

root="${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator}/previous-image"
dir="$root/$commit"
mkdir -p "$root"
# One build per commit at a time; a run that waited finds the other's result.
(
  flock 9
  [ ! -f "$dir/revision" ] || exit 0
  started=$(date +%s)
  log "building the image of $commit into $dir (once; the first build compiles every crate)"
  work=$(mktemp -d "$root/.build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/src" "$work/out/image" "$work/out/dist" "$work/out/charts"
  git archive --format tar "$commit" | tar --extract --directory "$work/src"
  (cd "$work/src" && BOXTABLE_REVISION=${commit:0:12} CARGO_TARGET_DIR="$root/target" \
    cargo build --locked --bin boxtable-operator) || die "cargo build of $commit failed (see above)"
  (cd "$work/src" && scripts/image.sh --binary "$root/target/debug/boxtable-operator" \
    --tag "${commit:0:12}" --output "$work/out/image") || die "scripts/image.sh of $commit failed (see above)"
  cp "$work/src/dist/install.yaml" "$work/out/dist/"
  cp -r "$work/src/charts/boxtable-operator" "$work/out/charts/"
  echo "$commit" >"$work/out/revision"
  rm -rf "$dir"
  mv "$work/out" "$dir"
  log "built the image of $commit in $(( $(date +%s) - started ))s"
) 9>"$dir.lock"
echo "$dir"
