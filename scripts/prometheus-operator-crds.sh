#!/usr/bin/env bash
# The Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule, ...) at a pinned release, for
# tests that install the chart's monitoring objects into the test control plane. They ship in the
# Go module github.com/prometheus-operator/prometheus-operator (example/prometheus-operator-crd/),
# so `go mod download` fetches them, checked against the Go checksum database, into Go's module
# cache (reused when present). Prints the directory that holds the CRD files.
set -euo pipefail

PROMETHEUS_OPERATOR_VERSION=v0.85.0
module=github.com/prometheus-operator/prometheus-operator

if ! command -v go >/dev/null 2>&1; then
  echo "prometheus-operator-crds.sh: Go is not installed; the CRDs come from a Go module." >&2
  echo "Install Go 1.26 or newer and run scripts/test.sh again" >&2
  exit 1
fi
dir=$(cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod GOTOOLCHAIN=local \
  go mod download -json "$module@$PROMETHEUS_OPERATOR_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
crds="$dir/example/prometheus-operator-crd"
if [ ! -f "$crds/monitoring.coreos.com_servicemonitors.yaml" ]; then
  echo "prometheus-operator-crds.sh: no CRDs in $crds" >&2
  exit 1
fi
echo "$crds"
