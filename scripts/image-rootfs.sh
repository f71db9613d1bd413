#!/usr/bin/env bash
# Assembles the image's root filesystem: the operator binary, the shared libraries it loads taken
# from Debian's packages (with their copyright files), and an /etc/passwd and /etc/group naming
# UID/GID 65532 `nonroot`. Nothing else: no shell, no package manager, no certificates (the
# operator carries its own TLS roots).
#
#   scripts/image-rootfs.sh BINARY ROOTFS [DEB_ARCH]
#
# ROOTFS must not exist yet. DEB_ARCH (default: the machine's, `dpkg --print-architecture`) is the
# Debian architecture of the binary (amd64, arm64). The libraries are found by reading the
# binary's ELF interpreter and NEEDED entries (readelf) and resolving them, recursively, inside
# the unpacked packages, so a new dependency on a library outside them fails here, by name.
# Prints the Debian packages used, one `name version arch` line each, on stdout.
# Used by scripts/image.sh and by the Dockerfile, so both images hold the same files.
set -euo pipefail

# The packages the binary's libraries come from: glibc (libc, libm, the dynamic loader) and
# libgcc's unwinder (Rust's panic machinery links libgcc_s). A package whose /usr/share/doc entry
# is a link to another package's (libgcc-s1's to gcc-12-base's) brings that one for its copyright.
PACKAGES=(libc6 libgcc-s1)

log() { echo "image-rootfs.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[ $# -ge 2 ] || die "usage: scripts/image-rootfs.sh BINARY ROOTFS [DEB_ARCH]"
binary=$1 rootfs=$2 arch=${3:-$(dpkg --print-architecture)}
[ -f "$binary" ] || die "$binary does not exist"
[ ! -e "$rootfs" ] || die "$rootfs exists already"
command -v readelf >/dev/null || die "readelf is missing (apt-get install binutils)"
command -v apt-get >/dev/null || die "apt-get is missing: the libraries come from Debian's packages"

cache="${BOXTABLE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator}/debs"
mkdir -p "$cache"
work=$(mktemp -d "${TMPDIR:-/tmp}/image-rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Downloads PACKAGE:ARCH at the candidate version into the cache unless it is there; prints the
# .deb's path.
fetch_deb() {
  local pkg=$1 version file
  version=$(apt-cache show --no-all-versions "$pkg:$arch" 2>/dev/null | awk '$1 == "Version:" { print $2; exit }')
  if [ -z "$version" ] && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq >&2
    version=$(apt-cache show --no-all-versions "$pkg:$arch" 2>/dev/null | awk '$1 == "Version:" { print $2; exit }')
  fi
  [ -n "$version" ] || die "apt knows no $pkg for $arch (run apt-get update; for a foreign architecture dpkg --add-architecture $arch first)"
  file="$cache/${pkg}_${version//:/%3a}_$arch.deb"
  if [ ! -s "$file" ]; then
    # As root, apt would hand the download to its unprivileged _apt user, who cannot write here.
    (cd "$work" && apt-get download -qq ${sandbox:+-o "APT::Sandbox::User=$sandbox"} "$pkg:$arch=$version" >&2) \
      || die "apt-get download $pkg:$arch=$version failed"
    mv "$work/${pkg}_${version//:/%3a}_$arch.deb" "$file"
  fi
  echo "$file"
}

sandbox=
[ "$(id -u)" -ne 0 ] || sandbox=root
mkdir -p "$work/debs"
used=()
for pkg in "${PACKAGES[@]}"; do
  deb=$(fetch_deb "$pkg")
  dpkg-deb --extract "$deb" "$work/debs"
  used+=("$pkg")
  echo "$pkg $(dpkg-deb --field "$deb" Version) $arch"
  doc=$(dpkg-deb --contents "$deb" | awk -v p="./usr/share/doc/$pkg" '$6 == p && $7 == "->" { print $8 }')
  if [ -n "$doc" ]; then
    deb=$(fetch_deb "$(basename "$doc")")
    dpkg-deb --extract "$deb" "$work/debs"
    used+=("$(basename "$doc")")
    echo "$(basename "$doc") $(dpkg-deb --field "$deb" Version) $arch"
  fi
done

mkdir -p "$rootfs"
# Copies PATH (absolute, as inside the image) from the unpacked packages, following a symbolic
# link to its target (which is copied too).
copy_from_debs() {
  local path=$1 target
  [ -e "$rootfs$path" ] || [ -L "$rootfs$path" ] && return 0
  [ -e "$work/debs$path" ] || die "$path is in none of the packages ${PACKAGES[*]}"
  mkdir -p "$rootfs$(dirname "$path")"
  cp -a "$work/debs$path" "$rootfs$path"
  if [ -L "$work/debs$path" ]; then
    target=$(readlink "$work/debs$path")
    case $target in
      /*) copy_from_debs "$target" ;;
      *) copy_from_debs "$(realpath --canonicalize-missing --no-symlinks "$(dirname "$path")/$target")" ;;
    esac
  fi
}

# Finds the library NAME in the packages' library directories; prints its path inside the image.
find_library() {
  local name=$1 found
  found=$(cd "$work/debs" && find lib usr/lib -name "$name" \( -type f -o -type l \) 2>/dev/null | LC_ALL=C sort | head -1)
  [ -n "$found" ] || die "the binary needs $name, which is in none of the packages ${PACKAGES[*]}"
  echo "/$found"
}

needed() { readelf --dynamic --wide "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

interpreter=$(readelf --program-headers --wide "$binary" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]/\1/p')
[ -n "$interpreter" ] || die "$binary has no ELF interpreter: expected a dynamically linked binary"
copy_from_debs "$interpreter"

queue=$(needed "$binary")
seen=" "
while [ -n "$queue" ]; do
  name=${queue%%$'\n'*}
  if [ "$queue" = "$name" ]; then queue=; else queue=${queue#*$'\n'}; fi
  case $seen in *" $name "*) continue ;; esac
  seen="$seen$name "
  path=$(find_library "$name")
  copy_from_debs "$path"
  more=$(needed "$(readlink -f "$rootfs$path")")
  [ -z "$more" ] || queue="${queue:+$queue$'\n'}$more"
done

# Each package's copyright file; a package whose doc directory is a link to another's keeps the
# link (not the other package's whole directory).
for pkg in "${used[@]}"; do
  if [ -L "$work/debs/usr/share/doc/$pkg" ]; then
    mkdir -p "$rootfs/usr/share/doc"
    cp -a "$work/debs/usr/share/doc/$pkg" "$rootfs/usr/share/doc/$pkg"
  else
    copy_from_debs "/usr/share/doc/$pkg/copyright"
  fi
done

install -m 0755 "$binary" "$rootfs/boxtable-operator"
mkdir -p "$rootfs/etc"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nonroot:x:65532:65532:nonroot:/:/sbin/nologin' \
  >"$rootfs/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$rootfs/etc/group"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
find "$rootfs" -type d -exec chmod 0755 {} +
