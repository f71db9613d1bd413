#!/usr/bin/env bash
# The node tests: the operator's image (scripts/image.sh, this commit) run as Pods on a real node
# (scripts/node.sh: kubelet, containerd and runc in namespaces of their own) next to a control
# plane of their own (scripts/control-plane.sh with CP_WORKLOADS=1), installed the way users
# install it (dist/install.yaml, the Helm chart, examples/jobs/). scripts/test.sh runs this beside
# its main phase; run it alone to work on the node tests:
#
#   scripts/test-node.sh                                 every node test (the modules node:: and
#                                                        soak::node::, the invariant soak on the node)
#   scripts/test-node.sh node::failover:: --nocapture    some of them (libtest filters, run one
#                                                        after the other; options go to each)
#   scripts/test-node.sh --shell                         start the control plane and the node and
#                                                        open a shell with KUBECONFIG and kubectl
#                                                        set (kubectl get pods -A, logs, exec);
#                                                        leaving it stops everything
#   scripts/test-node.sh --modules                       print the modules (for scripts/test.sh)
#
# The tests run one at a time: each installs the operator cluster-wide and takes its Lease.
# Starts a throwaway PostgreSQL unless DATABASE_URL is set.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh
. scripts/control-plane.sh
. scripts/node.sh
. scripts/helm.sh

# Every module of tests/suite whose tests run on the node, in the order they run: node::scale::
# last, because it loads the API server most and scripts/test.sh's main phase, which runs
# beside these, has then most likely ended.
NODE_TEST_MODULES=(node::install:: node::failover:: node::helm:: node::jobs:: node::upgrade:: soak::node:: node::scale::)

shell=
filters=()
# libtest's own options (--nocapture, --exact, ...) go to every run.
options=()
for arg in "$@"; do
  case "$arg" in
    --shell) shell=1 ;;
    --modules) printf '%s\n' "${NODE_TEST_MODULES[@]}"; exit 0 ;;
    -*) options+=("$arg") ;;
    *) filters+=("$arg") ;;
  esac
done
[ ${#filters[@]} -gt 0 ] || filters=("${NODE_TEST_MODULES[@]}")

if [ -z "$shell" ]; then
  helm_build
  # The test binary and the operator binary the image ships, before the servers start.
  cargo build --workspace --bins
  cargo test --test suite --no-run
fi
if [ -z "${DATABASE_URL:-}" ]; then
  pg_start
fi
CP_WORKLOADS=1 cp_start
node_start
if [ -n "$shell" ]; then
  cp_use_kubectl
  export KUBECONFIG="$CONTROL_PLANE_KUBECONFIG"
  echo "test-node.sh: the node $NODE_NAME is Ready; KUBECONFIG is set; exit the shell to stop everything" >&2
  "${SHELL:-bash}" -i || true
  exit 0
fi
# One filter at a time, in the order given, each line stamped with the seconds since the tests
# started (so a log shows what each test took); every filter runs even after one failed.
started=$SECONDS
status=0
for filter in "${filters[@]}"; do
  cargo test --test suite --no-fail-fast -- --test-threads 1 "${options[@]}" "$filter" 2>&1 \
    | while IFS= read -r line; do printf '[+%4ds] %s\n' "$((SECONDS - started))" "$line"; done \
    || status=$?
done
exit "$status"
