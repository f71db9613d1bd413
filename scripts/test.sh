#!/usr/bin/env bash
# Runs every test: unit, PostgreSQL integration, controller and kubectl end-to-end against a real
# Kubernetes control plane (API faults injected by a proxy in front of it), the check that the
# demo's local API server answers the operator's requests as kube-apiserver does, and the local
# API server's own tests.
# Starts a throwaway PostgreSQL unless DATABASE_URL is already set (it must then point at a
# disposable server where the user may create databases and roles), and a throwaway control
# plane (etcd, kube-apiserver, kube-controller-manager; built from Go modules the first time and
# cached, see scripts/control-plane.sh) unless CONTROL_PLANE_KUBECONFIG is already set, and Helm 3
# and Helm 4 for the chart tests (built the same way, see scripts/helm.sh).
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
if [ -z "${CONTROL_PLANE_KUBECONFIG:-}" ]; then
  cp_start
fi
# Helm 3 and Helm 4 for the chart tests (tests/helm_chart.rs); built once, like the control plane.
helm_build

cargo build --workspace --bins
# Every test binary runs even after one fails, so a red run shows every failure at once.
cargo test --workspace --no-fail-fast "$@"
