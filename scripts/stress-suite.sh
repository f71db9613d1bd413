#!/usr/bin/env bash
# Runs the test command (scripts/test.sh) several times in a row with every CPU kept busy by
# spinning loops, to show that the suite passes on a loaded machine and not only on an idle one.
#
#   scripts/stress-suite.sh              5 runs
#   scripts/stress-suite.sh -n 20        20 runs (or STRESS_RUNS=20)
#   scripts/stress-suite.sh -- --test suite -- lock_wait::advisory_lock::   arguments after -- go to scripts/test.sh (cargo test)
#
# Knobs: STRESS_RUNS (runs, default 5), STRESS_BUSY (spinning loops, default one per CPU).
# The code is built once before the loops start, so the runs time the tests, not the compiler.
# Prints one line per run and a summary; for a failed run, the names of the failed tests and
# their output. Every run's full log is kept in a temporary directory whose path is printed.
# Exits 0 only if every run passed. The loops are stopped on exit, also after Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

runs=${STRESS_RUNS:-5}
busy=${STRESS_BUSY:-$(nproc 2>/dev/null || echo 2)}
test_args=() # scripts/test.sh already runs cargo test --no-fail-fast
while [ $# -gt 0 ]; do
  case "$1" in
    -n) [ $# -ge 2 ] || usage; runs=$2; shift 2 ;;
    -n*) runs=${1#-n}; shift ;;
    -h|--help) usage ;;
    --) shift; test_args+=("$@"); break ;;
    *) echo "stress-suite.sh: unknown argument $1" >&2; usage ;;
  esac
done
case "$runs" in ''|*[!0-9]*|0) echo "stress-suite.sh: the number of runs must be a positive integer" >&2; exit 2 ;; esac
case "$busy" in ''|*[!0-9]*) echo "stress-suite.sh: STRESS_BUSY must be a number" >&2; exit 2 ;; esac

logs=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-stress.XXXXXX")
spinners=()

stop_spinners() {
  local pid
  for pid in "${spinners[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${spinners[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  spinners=()
}
trap stop_spinners EXIT
trap 'stop_spinners; exit 130' INT
trap 'stop_spinners; exit 143' TERM

# The failed tests of a cargo test log: "---- name stdout ----" headers, one per failed test.
failed_tests() {
  sed -n 's/^---- \(.*\) stdout ----$/\1/p' "$1" | sort -u
}

# The captured output of every failed test (each block runs to the "failures:" list that follows
# it), or the end of the log when no test failed (a build or set-up failure).
failure_output() {
  if grep -q '^---- .* stdout ----$' "$1"; then
    awk '/^---- .* stdout ----$/ {on = 1} /^failures:$/ {on = 0} on' "$1"
    grep -E '^error: (test failed|[0-9]+ targets? failed)' "$1" || true
  else
    tail -n 40 "$1"
  fi
}

echo "stress-suite: building before the load starts (log: $logs/build.log)"
if ! { cargo build --workspace --bins && cargo test --workspace --no-run; } >"$logs/build.log" 2>&1; then
  tail -n 40 "$logs/build.log"
  echo "stress-suite: the build failed; no run was started" >&2
  exit 1
fi

for _ in $(seq "$busy"); do
  ( while :; do :; done ) &
  spinners+=("$!")
done
echo "stress-suite: $runs run(s) of scripts/test.sh ${test_args[*]} with $busy spinning loop(s); logs in $logs"

passed=0
failed=0
total_seconds=0
failures=()
for run in $(seq "$runs"); do
  log="$logs/run-$run.log"
  started=$(date +%s)
  if scripts/test.sh "${test_args[@]}" >"$log" 2>&1; then
    result=passed
    passed=$((passed + 1))
  else
    result=failed
    failed=$((failed + 1))
    failures+=("$run")
  fi
  seconds=$(( $(date +%s) - started ))
  total_seconds=$((total_seconds + seconds))
  if [ "$result" = failed ]; then
    names=$(failed_tests "$log" | paste -sd ' ' -)
    printf 'run %d/%d: failed in %ds: %s (log: %s)\n' "$run" "$runs" "$seconds" "${names:-no test failed; see the log}" "$log"
  else
    printf 'run %d/%d: passed in %ds\n' "$run" "$runs" "$seconds"
  fi
done
stop_spinners

echo "stress-suite: $passed of $runs run(s) passed, $failed failed, $((total_seconds / runs))s per run on average, $busy spinning loop(s); logs in $logs"
for run in "${failures[@]}"; do
  echo
  echo "=== run $run: failed tests and their output ($logs/run-$run.log)"
  failure_output "$logs/run-$run.log"
done
[ "$failed" -eq 0 ]
