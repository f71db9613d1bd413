#!/usr/bin/env bash
# Runs the PostgreSQL-facing suites once per supported major (13..18), one major after another
# (or PG_MATRIX_JOBS at a time),
# each on a throwaway server of that major (scripts/pg.sh with PG_MAJOR; builds fetched once by
# scripts/pg-install.sh), and prints one line per major: version, tests passed, failed, seconds.
#
#   scripts/pg-matrix.sh            every pinned major
#   PG_MAJORS="13 18" scripts/pg-matrix.sh
#   PG_MATRIX_JOBS=2 scripts/pg-matrix.sh    two majors at a time
#
# Exits non-zero if any test failed on any major. Each major's full output is kept in
# target/pg-matrix/<major>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg-install.sh

# The modules of the test binary (tests/suite) that talk to PostgreSQL, as libtest filters: the
# lock, the migration runner (fresh, upgrade and Brighter interop, locking, scopes and drop,
# errors, snapshots, after-commit, newer history), the `migrate` command, sessions, and the
# reliability scenarios (restarts and the hot standby, killed processes, PgBouncer, session
# attacks, secrets). Each ends in `::`, so that it matches that module's tests and no other's
# (`apply::fresh::` matches no module whose name only starts with it).
SUITES=(
  lock_wait::advisory_lock:: connections::connect::
  apply::fresh:: apply::upgrade:: lock_wait::concurrent_runs:: deletion::drop_and_history_scope:: apply::errors::
  apply::up_to_date_snapshot:: lock_wait::unlock_after_commit:: apply::newer_history::
  cli::migrate::
  connections::server_events:: apply::killed_mid_run:: connections::pooler:: lock_wait::session_under_attack::
  secrets::never_in_migrate_output::
)

majors=${PG_MAJORS:-$PG_SUPPORTED_MAJORS}
# The statistical snapshot race runs 30 rounds in the main suite; what it guards (one statement,
# one snapshot) does not depend on the major, so a few rounds per major suffice here.
export BOXTABLE_RACE_ROUNDS=${BOXTABLE_RACE_ROUNDS:-6}
scripts/reliability.sh --install
for major in $majors; do
  pg_install_major "$major" >/dev/null
done

# The same set as scripts/test.sh builds: a build of the root package alone unifies the
# dependencies' features differently and would compile kube, k8s-openapi and the rest again.
cargo build --workspace --bins
# The test executable, run directly below: majors running side by side then never wait on cargo's
# build-directory lock.
mapfile -t binaries < <(cargo test --no-run --test suite --message-format=json \
  | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])')
[ "${#binaries[@]}" -eq 1 ] || {
  echo "pg-matrix.sh: expected one test executable (tests/suite), cargo built ${#binaries[@]}" >&2
  exit 1
}
binary=${binaries[0]}

logs=${CARGO_TARGET_DIR:-target}/pg-matrix
mkdir -p "$logs"
# Majors run PG_MATRIX_JOBS at a time (default 1: one after another). Each has its own server on a
# free port and its own private clusters and poolers, so they share nothing but the CPUs.
jobs=${PG_MATRIX_JOBS:-1}
case "$jobs" in ''|*[!0-9]*|0) echo "pg-matrix.sh: PG_MATRIX_JOBS must be a positive integer" >&2; exit 2 ;; esac

run_major() { # major -> writes $logs/<major>.log and $logs/<major>.line
  local major=$1 log="$logs/$1.log" started rc seconds version passed failed
  started=$(date +%s)
  set +e
  (
    export PG_MAJOR=$major
    unset DATABASE_URL
    . scripts/pg.sh
    pg_start || exit 1
    "$PG_BIN/postgres" --version
    echo "     Running $binary ${SUITES[*]}"
    "$binary" "${SUITES[@]}"
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
  printf 'PostgreSQL %-6s passed %4d  failed %3d  %5d s\n' "${version:-$major?}" "$passed" "$failed" "$seconds" \
    >"$logs/$major.line"
  echo "pg-matrix: $(cat "$logs/$major.line")" >&2
}

running=0
for major in $majors; do
  rm -f "$logs/$major.line"
  run_major "$major" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

echo "pg-matrix: one line per major (full logs in $logs/)"
failed_any=0
for major in $majors; do
  if [ -f "$logs/$major.line" ]; then
    cat "$logs/$major.line"
    awk '{for (i = 1; i <= NF; i++) if ($i == "failed" && $(i+1) != 0) bad = 1} END {exit bad}' \
      "$logs/$major.line" || failed_any=1
  else
    echo "PostgreSQL $major  no result: see $logs/$major.log"
    failed_any=1
  fi
done
exit "$failed_any"
