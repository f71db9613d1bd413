#!/usr/bin/env bash
# Runs the PostgreSQL-facing suites once per supported major (13..18), one major after another,
# each on a throwaway server of that major (scripts/pg.sh with PG_MAJOR; builds fetched once by
# scripts/pg-install.sh), and prints one line per major: version, tests passed, failed, seconds.
#
#   scripts/pg-matrix.sh            every pinned major
#   PG_MAJORS="13 18" scripts/pg-matrix.sh
#
# Exits non-zero if any test failed on any major. Each major's full output is kept in
# target/pg-matrix/<major>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg-install.sh

# The suites that talk to PostgreSQL: the lock, the migration runner (fresh, upgrade and Brighter
# interop, locking, scopes and drop, errors, snapshots, after-commit, newer history), the
# `migrate` command, sessions, and the reliability scenarios (restarts and the hot standby,
# killed processes, PgBouncer, session attacks, secrets).
SUITES=(
  lock db_connect
  migrate_fresh migrate_upgrade migrate_locking migrate_scope_and_drop migrate_errors
  migrate_snapshot migrate_lock_after_commit migrate_newer_history
  cli_migrate
  reliability_cluster reliability_kill reliability_pooler reliability_session reliability_secrets
)

majors=${PG_MAJORS:-$PG_SUPPORTED_MAJORS}
# The statistical snapshot race runs 30 rounds in the main suite; what it guards (one statement,
# one snapshot) does not depend on the major, so a few rounds per major suffice here.
export BOXTABLE_RACE_ROUNDS=${BOXTABLE_RACE_ROUNDS:-6}
scripts/reliability.sh --install
for major in $majors; do
  pg_install_major "$major" >/dev/null
done

test_args=()
for suite in "${SUITES[@]}"; do test_args+=(--test "$suite"); done
cargo build --bins
cargo test --no-run "${test_args[@]}"

logs=target/pg-matrix
mkdir -p "$logs"
failed_any=0
summary=()
for major in $majors; do
  log="$logs/$major.log"
  started=$(date +%s)
  set +e
  (
    export PG_MAJOR=$major
    unset DATABASE_URL
    . scripts/pg.sh
    pg_start || exit 1
    "$PG_BIN/postgres" --version
    cargo test --no-fail-fast "${test_args[@]}"
  ) >"$log" 2>&1
  rc=$?
  set -e
  seconds=$(( $(date +%s) - started ))
  version=$(awk '/^postgres \(PostgreSQL\)/ {print $3; exit}' "$log")
  passed=$(awk '/^test result:/ {for (i = 1; i <= NF; i++) if ($(i+1) ~ /^passed/) s += $i} END {print s + 0}' "$log")
  failed=$(awk '/^test result:/ {for (i = 1; i <= NF; i++) if ($(i+1) ~ /^failed/) s += $i} END {print s + 0}' "$log")
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1 # the server did not start or a test binary crashed: see the log
  fi
  [ "$failed" -eq 0 ] || failed_any=1
  line=$(printf 'PostgreSQL %-6s passed %4d  failed %3d  %5d s' "${version:-$major?}" "$passed" "$failed" "$seconds")
  echo "pg-matrix: $line" >&2
  summary+=("$line")
done

echo "pg-matrix: one line per major (full logs in $logs/)"
printf '%s\n' "${summary[@]}"
exit "$failed_any"
