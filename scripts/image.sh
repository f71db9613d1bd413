#!/usr/bin/env bash
# Builds the operator's OCI image without a container daemon, with its SBOM.
#
#   scripts/image.sh [--binary PATH] [--tag TAG] [--platform linux/ARCH] [--output DIR] [--push REF]
#
#   --binary PATH     the operator binary to ship (default: `cargo build --release --locked`)
#   --tag TAG         the image tag and the version label (default: the version in Cargo.toml)
#   --platform P      linux/amd64 or linux/arm64 (default: the machine's); the binary must be
#                     built for it, and apt must know that architecture's packages
#   --output DIR      where the results go (default: target/image)
#   --push REF        also push the image to REF with crane (credentials from ~/.docker/config.json,
#                     as `crane auth login` or `docker login` leave them); prints REF@digest
#
# The root filesystem is scripts/image-rootfs.sh's (the binary, glibc and libgcc_s from Debian's
# packages with their copyright files, /etc/passwd and /etc/group with UID/GID 65532 `nonroot`,
# no shell). It becomes one layer, written with sorted names, numeric owner 0, and every time set
# to the commit's, so the same commit, binary and packages give the same digest. crane appends it
# to an empty OCI base and sets the configuration (user 65532:65532, entrypoint, cmd `run`,
# workdir, port, platform, OCI labels and manifest annotations) in a registry it serves on a
# loopback port for the length of the build; the result is pulled out as:
#
#   DIR/oci/                 OCI image layout (push it with `crane push DIR/oci REF`)
#   DIR/boxtable-operator.tar  the same image as a tarball for `docker load` / `podman load`
#   DIR/sbom.cdx.json        CycloneDX SBOM: every crate in the binary (cargo-cyclonedx, from
#                            Cargo.lock) and the Debian packages the libraries come from
#   DIR/digest               the image manifest's digest
#
# crane and cargo-cyclonedx are built once into a cache by scripts/tools.sh.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
. scripts/tools.sh

log() { echo "image.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# The labels (and manifest annotations). The Dockerfile sets the same ones; tests/suite/install/image.rs checks
# that they agree.
IMAGE_TITLE=boxtable-operator
IMAGE_DESCRIPTION="Provisions Brighter outbox and inbox tables in PostgreSQL"
IMAGE_SOURCE=https://github.com/boxtable/boxtable-operator
IMAGE_LICENSES=Apache-2.0

binary='' tag='' platform='' output="$PWD/target/image" push=''
while [ $# -gt 0 ]; do
  case $1 in
    --binary) binary=${2:?--binary needs a path}; shift 2 ;;
    --tag) tag=${2:?--tag needs a tag}; shift 2 ;;
    --platform) platform=${2:?--platform needs os/arch}; shift 2 ;;
    --output) output=${2:?--output needs a directory}; shift 2 ;;
    --push) push=${2:?--push needs an image reference}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

absolute() { case $1 in /*|'') echo "$1" ;; *) echo "$caller/$1" ;; esac; }
binary=$(absolute "$binary")
output=$(absolute "$output")

version=$(awk -F'"' '/^\[package\]/ { p = 1 } p && $1 ~ /^version *= *$/ { print $2; exit }' Cargo.toml)
[ -n "$version" ] || die "no version in Cargo.toml's [package]"
tag=${tag:-$version}
host_arch=$(dpkg --print-architecture)
platform=${platform:-linux/$host_arch}
case $platform in
  linux/amd64|linux/arm64) arch=${platform#linux/} ;;
  *) die "unsupported platform $platform (linux/amd64 or linux/arm64)" ;;
esac
if [ -z "$binary" ]; then
  [ "$arch" = "$host_arch" ] || die "building for $platform on $host_arch: pass --binary with a binary built for it"
  log "building the release binary"
  cargo build --release --locked --bin boxtable-operator
  target_dir=${CARGO_TARGET_DIR:-target}
  case $target_dir in /*) ;; *) target_dir=$PWD/$target_dir ;; esac
  binary=$target_dir/release/boxtable-operator
fi
[ -x "$binary" ] || die "$binary is not an executable"

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
epoch=$(git log -1 --format=%ct HEAD 2>/dev/null || echo 0)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

tools_crane
tools_cyclonedx

work=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-image.XXXXXX")
registry_pid=
cleanup() {
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$work"
  # cargo-cyclonedx writes next to each manifest; nothing of it stays in the tree.
  rm -f boxtable-operator.cdx.json localapi/boxtable-operator.cdx.json
}
trap cleanup EXIT

log "assembling the root filesystem for $platform"
scripts/image-rootfs.sh "$binary" "$work/rootfs" "$arch" >"$work/debs.txt"

# One layer, byte for byte the same for the same inputs.
(cd "$work/rootfs" && find . -mindepth 1 | sed 's|^\./||' | LC_ALL=C sort) >"$work/files.txt"
tar --create --file "$work/layer.tar" --directory "$work/rootfs" --no-recursion --files-from "$work/files.txt" \
  --format posix --pax-option 'exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime' \
  --mtime "@$epoch" --owner 0 --group 0 --numeric-owner

# crane edits configurations in a registry: serve one on loopback for this build only.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$CRANE" registry serve --address "127.0.0.1:$port" >"$work/registry.log" 2>&1 &
registry_pid=$!
deadline=$(( $(date +%s) + 60 ))
until curl -fs "http://127.0.0.1:$port/v2/" >/dev/null; do
  kill -0 "$registry_pid" 2>/dev/null || die "crane's registry did not start: $(cat "$work/registry.log")"
  [ "$(date +%s)" -lt "$deadline" ] || die "crane's registry did not answer on 127.0.0.1:$port within 60 s"
  sleep 0.2
done
ref="127.0.0.1:$port/boxtable-operator:$tag"

"$CRANE" append --insecure --oci-empty-base --new_layer "$work/layer.tar" --new_tag "$ref" >/dev/null 2>"$work/crane.log" \
  || die "crane append failed: $(cat "$work/crane.log")"
meta=()
for pair in \
  "org.opencontainers.image.title=$IMAGE_TITLE" \
  "org.opencontainers.image.description=$IMAGE_DESCRIPTION" \
  "org.opencontainers.image.source=$IMAGE_SOURCE" \
  "org.opencontainers.image.licenses=$IMAGE_LICENSES" \
  "org.opencontainers.image.version=$tag" \
  "org.opencontainers.image.revision=$revision" \
  "org.opencontainers.image.created=$created"; do
  meta+=(--label "$pair" --annotation "$pair")
done
"$CRANE" mutate --insecure "$ref" --tag "$ref" --set-platform "$platform" \
  --user 65532:65532 --workdir / --entrypoint /boxtable-operator --cmd run --exposed-ports 8080/tcp \
  "${meta[@]}" >/dev/null 2>"$work/crane.log" || die "crane mutate failed: $(cat "$work/crane.log")"

mkdir -p "$output"
rm -rf "$output/oci" "$output/boxtable-operator.tar"
"$CRANE" pull --insecure --format oci "$ref" "$output/oci"
"$CRANE" pull --insecure --format tarball "$ref" "$output/boxtable-operator.tar"
digest=$("$CRANE" digest --insecure "$ref")
echo "$digest" >"$output/digest"

# The SBOM: cargo-cyclonedx describes the crates of the binary for the platform's target (from
# Cargo.lock, without dev-dependencies), then the Debian packages are added as components.
case $arch in amd64) triple=x86_64-unknown-linux-gnu ;; arm64) triple=aarch64-unknown-linux-gnu ;; esac
"$CARGO_CYCLONEDX" cyclonedx --quiet --format json --spec-version 1.5 --target "$triple" \
  --no-build-deps --override-filename boxtable-operator.cdx >/dev/null
mv boxtable-operator.cdx.json "$work/crates.cdx.json"
jq -n --rawfile debs "$work/debs.txt" --slurpfile crates "$work/crates.cdx.json" \
  --arg digest "$digest" --arg tag "$tag" --arg created "$created" '
  ($debs | split("\n") | map(select(length > 0) | split(" ")
    | {type: "library", name: .[0], version: .[1],
       purl: "pkg:deb/debian/\(.[0])@\(.[1])?arch=\(.[2])", "bom-ref": "pkg:deb/debian/\(.[0])@\(.[1])?arch=\(.[2])"})) as $packages
  | $crates[0]
  | .metadata.timestamp = $created
  | .metadata.properties = ((.metadata.properties // []) + [
      {name: "boxtable-operator:image:digest", value: $digest},
      {name: "boxtable-operator:image:tag", value: $tag}])
  | .components = ((.components // []) + $packages)' >"$output/sbom.cdx.json"

log "built $platform image $digest ($tag): $output/oci, $output/boxtable-operator.tar, $output/sbom.cdx.json"

if [ -n "$push" ]; then
  "$CRANE" push "$output/oci" "$push"
fi
