#!/usr/bin/env bash
# Runs every test: unit, PostgreSQL integration, controller and kubectl end-to-end against a real
# Kubernetes control plane (API faults injected by a proxy in front of it), the check that the
# demo's local API server answers the operator's requests as kube-apiserver does, and the local
# API server's own tests.
# Starts a throwaway PostgreSQL unless DATABASE_URL is already set (it must then point at a
# disposable server where the user may create databases and roles), and a throwaway control
# plane (etcd, kube-apiserver, kube-controller-manager; built from Go modules the first time and
# cached, see scripts/control-plane.sh) unless CONTROL_PLANE_KUBECONFIG is already set, and Helm 3
# and Helm 4 for the chart tests (built the same way, see scripts/helm.sh). The node tests (the
# operator's image as Pods on a real node) run beside the rest, on a control plane and a node of
# their own: see scripts/test-node.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh
. scripts/control-plane.sh
. scripts/helm.sh

# PostgreSQL server binaries (also used to start private clusters for restart and replica
# scenarios) and PgBouncer (pooler scenarios); installed with apt when missing and run as root.
scripts/reliability.sh --install
if [ -z "${DATABASE_URL:-}" ]; then
  pg_start
fi

# --pg-matrix (what CI runs): everything below, and once the main phase is done, the
# PostgreSQL-facing suites on every other supported major (scripts/pg-matrix.sh) beside the
# isolated phase, while the node tests finish beside them all.
pg_matrix=
if [ "$#" -eq 1 ] && [ "$1" = --pg-matrix ]; then
  pg_matrix=1
  shift
fi

# A phase that runs beside the rest: `start_beside NAME COMMAND...` starts it in a process group
# of its own (ended if this run is) with its output kept in a file, and sets beside_pid and
# beside_output; `await_beside WHAT PID OUTPUT` waits for it, prints its output and keeps its
# failure in `status`.
start_beside() {
  beside_output=$(mktemp "${TMPDIR:-/tmp}/boxtable-$1.XXXXXX")
  shift
  setsid "$@" >"$beside_output" 2>&1 &
  beside_pid=$!
  local existing
  existing=$(eval "set -- $(trap -p EXIT)"; printf '%s' "${3:-}")
  # shellcheck disable=SC2064
  trap "kill -TERM -- -$beside_pid 2>/dev/null && wait $beside_pid; rm -f '$beside_output'${existing:+; $existing}" EXIT
}
await_beside() {
  local what=$1 pid=$2 output=$3 phase_status=0
  wait "$pid" || phase_status=$?
  echo "test.sh: $what, which ran beside the rest, ended with status $phase_status:" >&2
  cat "$output"
  [ "$phase_status" -eq 0 ] || status=$phase_status
}

# Without arguments: the node tests start now, and their output is printed when they end.
node_modules=()
node_phase=
if [ $# -eq 0 ]; then
  mapfile -t node_modules < <(scripts/test-node.sh --modules)
  start_beside test-node scripts/test-node.sh
  node_phase=$beside_pid node_output=$beside_output
fi
if [ -z "${CONTROL_PLANE_KUBECONFIG:-}" ]; then
  cp_start
fi
# Helm 3 and Helm 4 for the chart tests (tests/suite/install/helm_chart.rs); built once, like the control plane.
helm_build

# bash runs a trap only once its foreground command has ended, so the long commands below run
# through `interruptible`: in a process group of their own, waited for, which a signal interrupts
# at once; the EXIT trap then ends that group before the traps above stop PostgreSQL and the
# control plane.
running=
existing=$(eval "set -- $(trap -p EXIT)"; printf '%s' "${3:-}")
# shellcheck disable=SC2064
trap "[ -z \"\$running\" ] || kill -TERM -- -\"\$running\" 2>/dev/null${existing:+; $existing}" EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
interruptible() {
  setsid "$@" &
  running=$!
  local status=0
  wait "$running" || status=$?
  running=
  return "$status"
}

interruptible cargo build --workspace --bins
# Arguments go to cargo test as they are (for example `--test suite -- lock_wait::advisory_lock::`), and then that is
# all that runs.
if [ $# -gt 0 ]; then
  interruptible cargo test --workspace --no-fail-fast "$@"
  exit
fi

# The integration tests are one binary (tests/suite), whose modules run side by side. These few
# change what every other test shares, so they run after the rest, one at a time:
# - soak::processes::, several operator replicas for SOAK_SECONDS, electing a leader through the same Lease
#   in boxtable-system as resilience::shutdown's leader;
# - resilience::api_restart::, which kills the one kube-apiserver every Kubernetes test talks to;
# - one deletion::controller test, which takes a validation rule out of the cluster-wide CRD for a
#   while (the schema tests would see it missing);
# - the telemetry test of boxtable_lock_held, a gauge of the whole process that every test holding
#   an advisory lock in this binary moves.
# Each filter names that module or test and nothing else (libtest filters are substrings).
isolated=(
  soak::processes::
  resilience::api_restart::
  deletion::controller::a_drop_still_runs_when_the_spec_no_longer_plans
  observability::health_server::lock_held_counts_the_locks_this_process_holds
)
skip=()
for filter in "${isolated[@]}" "${node_modules[@]}"; do skip+=(--skip "$filter"); done
# Every test binary runs even after one fails, and the isolated phase runs even after the main one
# failed, so a red run shows every failure at once.
status=0
# The suite's tests spend most of their time waiting on the servers they talk to, so the main
# phase runs one test more at a time than the machine has CPUs (RUST_TEST_THREADS overrides).
threads=()
[ -n "${RUST_TEST_THREADS:-}" ] || threads=(--test-threads "$(($(nproc) + 1))")
interruptible cargo test --workspace --no-fail-fast -- "${threads[@]}" "${skip[@]}" || status=$?
# The matrix runs the PostgreSQL-facing suites on the other supported majors, each on a server of
# its own and in a test process of its own (no control plane, nothing this binary's process
# shares), so it runs beside the isolated phase, which mostly waits, two majors at a time.
matrix_phase=
if [ -n "$pg_matrix" ]; then
  . scripts/pg-install.sh
  system_major=$("$(pg_bindir)/postgres" --version | awk '{split($3, v, "."); print v[1]}')
  others=$(tr ' ' '\n' <<<"$PG_SUPPORTED_MAJORS" | grep -vx "$system_major" | tr '\n' ' ')
  others=${others% }
  echo "test.sh: the main suite ran on PostgreSQL $system_major; the matrix runs $others beside the isolated phase" >&2
  start_beside pg-matrix env PG_MAJORS="$others" PG_MATRIX_JOBS=2 scripts/pg-matrix.sh
  matrix_phase=$beside_pid matrix_output=$beside_output
fi
interruptible cargo test --test suite --no-fail-fast -- --test-threads 1 "${isolated[@]}" || status=$?
if [ -n "$matrix_phase" ]; then
  await_beside "the PostgreSQL matrix (scripts/pg-matrix.sh)" "$matrix_phase" "$matrix_output"
fi
if [ -n "$node_phase" ]; then
  await_beside "the node tests (scripts/test-node.sh)" "$node_phase" "$node_output"
fi
exit "$status"
