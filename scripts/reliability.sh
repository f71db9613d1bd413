#!/usr/bin/env bash
# Reliability scenarios (RELIABILITY.md). Installs what they need, then runs them.
#
#   scripts/reliability.sh            install prerequisites, start a throwaway PostgreSQL, run the reliability_* modules of tests/suite
#   scripts/reliability.sh --install  only install prerequisites (CI runs this before scripts/test.sh)
#
# Needs the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup: the tests start private
# clusters to restart and to replicate) and PgBouncer (the tests start it as the server's non-root
# owner). As root, missing packages are installed with apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

install_prerequisites() {
  pg_ensure_installed
  if [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "reliability.sh: installing pgbouncer" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >&2
  else
    echo "reliability.sh: pgbouncer is missing; install it with: sudo apt-get install pgbouncer" >&2
    return 1
  fi
}

install_prerequisites
if [ "${1:-}" = "--install" ]; then
  exit 0
fi
if [ -z "${DATABASE_URL:-}" ]; then
  pg_start
fi
cargo test --test suite "$@" -- reliability_
