#!/usr/bin/env bash
# Runs every test: unit, PostgreSQL integration, local API server and kubectl end-to-end.
# Starts a throwaway PostgreSQL unless DATABASE_URL is already set (it must then point at a
# disposable server where the user may create databases and roles).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

# PostgreSQL server binaries (also used to start private clusters for restart and replica
# scenarios) and PgBouncer (pooler scenarios); installed with apt when missing and run as root.
scripts/reliability.sh --install
if [ -z "${DATABASE_URL:-}" ]; then
  pg_start
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "test.sh: kubectl is not on PATH; the end-to-end tests need it (see README, 'Testing')" >&2
fi

cargo build --workspace --bins
cargo test --workspace "$@"
