#!/usr/bin/env bash
# The invariant soak (tests/suite/soak/processes.rs): for SOAK_SECONDS (default 60) several operator replicas,
# with and without leader election, `migrate` runs and Brighter-style application racers work on
# many BoxTables in several schemas while operators are SIGKILLed and SIGTERMed, their PostgreSQL
# sessions terminated, API requests failed, stalled or their watches cut (a fault proxy in front of
# a real kube-apiserver, the leader-election Lease included), specs edited and BoxTables deleted. It checks
# the invariants all along and at the end (see RELIABILITY.md, "The invariant soak"), prints one
# line of counts, and exits non-zero on any violation, listing each.
#
#   scripts/soak.sh                      about a minute
#   SOAK_SECONDS=1800 scripts/soak.sh    half an hour
#   SOAK_SEED=N scripts/soak.sh          the random choices of an earlier run
#   scripts/soak.sh --node [DURATION]    the same soak with the operator as the two Pods of
#                                        dist/install.yaml on a real node (tests/suite/soak/node.rs):
#                                        Pods deleted (the leader's sometimes mid-migration),
#                                        containers SIGKILLed, kubelet restarts and one rollout
#                                        added to the chaos; DURATION like 1800, 90s or 30m
#                                        (default SOAK_SECONDS, else 90 s)
#
# Starts a throwaway PostgreSQL unless DATABASE_URL is set (a disposable server), and a throwaway
# control plane (scripts/control-plane.sh) unless CONTROL_PLANE_KUBECONFIG is set (with --node
# always one of its own, with the node of scripts/node.sh; that needs root). Everything runs on
# loopback or inside the node's network namespace. The test runs in its own process group, which
# is ended on exit, so no operator or migrate process outlives the script, even after Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh
. scripts/control-plane.sh
. scripts/node.sh

node=
case "${1:-}" in
  --node)
    node=1
    duration=${2:-${SOAK_SECONDS:-90}}
    case "$duration" in
      *m) SOAK_SECONDS=$(( ${duration%m} * 60 )) 2>/dev/null || SOAK_SECONDS= ;;
      *s) SOAK_SECONDS=${duration%s} ;;
      *) SOAK_SECONDS=$duration ;;
    esac
    ;;
  '') ;;
  *) echo "soak.sh: unknown argument $1 (scripts/soak.sh [--node [DURATION]])" >&2; exit 2 ;;
esac
export SOAK_SECONDS=${SOAK_SECONDS:-60}
case "$SOAK_SECONDS" in ''|*[!0-9]*|0) echo "soak.sh: the duration must be a positive number of seconds (or 30m, 90s)" >&2; exit 2 ;; esac

scripts/reliability.sh --install
# Build first (the test and the operator binary it runs, with the features `cargo test` builds it
# with), then start the servers.
artifacts=$(cargo test --no-run --test suite --message-format=json \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        name = m["target"]["name"]
        if name in ("suite", "boxtable-operator"):
            print(name, m["executable"])')
test_binary=$(awk '$1 == "suite" {print $2}' <<<"$artifacts")
operator_binary=$(awk '$1 == "boxtable-operator" {print $2}' <<<"$artifacts")
operator_binary=${operator_binary:-target/debug/boxtable-operator}
# Run copies, so rebuilding the tree while a long soak runs changes nothing under it.
bin_dir=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-soak.XXXXXX")
cp "$operator_binary" "$bin_dir/boxtable-operator"
cp "$test_binary" "$bin_dir/suite"
export SOAK_OPERATOR_BINARY="$bin_dir/boxtable-operator"

# The servers' own EXIT traps stop them (the node, then the control plane, then PostgreSQL); the
# test's process group is ended before all of them.
if [ -z "${DATABASE_URL:-}" ]; then
  pg_start
fi
if [ -n "$node" ]; then
  CP_WORKLOADS=1 cp_start
  node_start
  filter=soak::node::
else
  if [ -z "${CONTROL_PLANE_KUBECONFIG:-}" ]; then
    cp_start
  fi
  filter=soak::processes::
fi

group=
end_group() {
  if [ -n "$group" ]; then
    kill -TERM -- "-$group" 2>/dev/null || true
    # Give the test a moment to end its children, then make sure.
    for _ in $(seq 50); do kill -0 -- "-$group" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$group" 2>/dev/null || true
  fi
  rm -rf "$bin_dir"
}
# The EXIT trap already set, unquoted (trap -p prints it quoted for eval).
existing=$(eval "set -- $(trap -p EXIT)"; printf '%s' "${3:-}")
# shellcheck disable=SC2064
trap "end_group${existing:+; $existing}" EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

setsid "$bin_dir/suite" --nocapture --test-threads 1 "$filter" &
group=$!
status=0
wait "$group" || status=$?
group_left=$group
group=
kill -KILL -- "-$group_left" 2>/dev/null || true
exit "$status"
