#!/usr/bin/env bash
# Makes docs/monitoring.png from real scraped data: runs the operator against a throwaway
# PostgreSQL and control plane (scripts/pg.sh, scripts/control-plane.sh), puts a small scripted
# load on it (BoxTables created, some stalled on a missing Secret, some waiting on Brighter's
# advisory lock that another session holds, two timing out, then the Secret created and some
# BoxTables deleted), scrapes /metrics every 2 s meanwhile and plots state counts, lock waits and
# lock outcomes with matplotlib (from PyPI, in a virtualenv in the cache). The scraped samples
# stay in a temporary directory; only the picture is kept.
#
#   scripts/monitoring-picture.sh [OUT.png]     about three minutes
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/monitoring.png}
. scripts/pg.sh
. scripts/control-plane.sh

venv="${XDG_CACHE_HOME:-$HOME/.cache}/boxtable-operator/plot-venv/matplotlib-3.10"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'matplotlib==3.10.*'
fi

cargo build --bin boxtable-operator
scripts/reliability.sh --install >/dev/null
[ -n "${DATABASE_URL:-}" ] || pg_start
[ -n "${CONTROL_PLANE_KUBECONFIG:-}" ] || cp_start
export KUBECONFIG="$CONTROL_PLANE_KUBECONFIG"
kubectl="$CONTROL_PLANE_BIN/kubectl"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$kubectl" apply -k crds/ >/dev/null
"$kubectl" create namespace picture >/dev/null
"$kubectl" -n picture create secret generic db --from-literal=connectionString="$DATABASE_URL" >/dev/null
port=$(cp_free_port)
target/debug/boxtable-operator run --namespace picture --metrics-addr "127.0.0.1:$port" \
  --resync-interval 20s --retry-backoff 1s --concurrency 4 --instance picture 2>"$work/operator.log" &
pids+=($!)
"$venv/bin/python" scripts/monitoring-picture.py scrape "http://127.0.0.1:$port/metrics" "$work/samples.jsonl" &
pids+=($!)

boxtable() { # name table secret lock-timeout
  printf -- '---\napiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: %s\n  namespace: picture\nspec:\n  box: Outbox\n  table: %s\n  database:\n    secretRef:\n      name: %s\n  lock:\n    timeout: %s\n' "$1" "$2" "$3" "$4"
}
key() { target/debug/boxtable-operator key --schema public --table "$1" | awk '$1 == "key:" {print $2}'; }
# Another session (an application's start-up migration, say) holds the lock on each table for $1 s.
hold_locks() {
  local seconds=$1; shift
  local sql=""
  for table in "$@"; do sql+="SELECT pg_advisory_lock($(key "$table")); "; done
  psql "$DATABASE_URL" -qAt -c "$sql SELECT pg_sleep($seconds);" >/dev/null &
  pids+=($!)
}
log() { echo "monitoring-picture.sh: $(date -u +%T) $*" >&2; }

sleep 6
log "12 BoxTables"
for i in $(seq -w 1 12); do boxtable "orders-$i" "orders_$i" db 30s; done | "$kubectl" apply -f - >/dev/null
sleep 14
log "4 BoxTables whose Secret does not exist yet"
for i in 1 2 3 4; do boxtable "late-$i" "late_$i" late 30s; done | "$kubectl" apply -f - >/dev/null
sleep 10
log "6 BoxTables whose lock another session holds for 20 s, 2 more held for 45 s with a 10 s lock timeout"
hold_locks 20 busy_1 busy_2 busy_3 busy_4 busy_5 busy_6
hold_locks 45 slow_1 slow_2
sleep 1
{ for i in 1 2 3 4 5 6; do boxtable "busy-$i" "busy_$i" db 30s; done
  for i in 1 2; do boxtable "slow-$i" "slow_$i" db 10s; done; } | "$kubectl" apply -f - >/dev/null
sleep 45
log "the missing Secret is created"
"$kubectl" -n picture create secret generic late --from-literal=connectionString="$DATABASE_URL" >/dev/null
sleep 25
log "6 BoxTables deleted"
"$kubectl" -n picture delete boxtable orders-01 orders-02 orders-03 orders-04 orders-05 orders-06 >/dev/null
sleep 20
log "plotting"
"$venv/bin/python" scripts/monitoring-picture.py plot "$work/samples.jsonl" "$out"
log "wrote $out"
