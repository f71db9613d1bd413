#!/usr/bin/env bash
# See it work: a throwaway PostgreSQL, the local API server, the operator, and the examples applied
# with kubectl. Prints the BoxTables, one status, a lock identity, shows a Drop deletion, then
# cleans everything up. Needs kubectl on PATH; installs PostgreSQL with apt if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

command -v kubectl >/dev/null 2>&1 || { echo "demo.sh: kubectl is not on PATH; install kubectl first" >&2; exit 1; }

say "building"
cargo build --quiet --workspace --bins

say "starting a throwaway PostgreSQL"
pg_start
WORK=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-demo.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pg_stop
  rm -rf "$WORK"
}
trap cleanup EXIT

PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL")
APP_PASSWORD=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
"${PSQL[@]}" -c "CREATE ROLE shop_migrator LOGIN PASSWORD '$APP_PASSWORD'" -c "CREATE DATABASE shop OWNER shop_migrator"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "postgres://shop_migrator:$APP_PASSWORD@127.0.0.1:$PG_PORT/shop" \
  -c "CREATE SCHEMA billing"

say "starting the local Kubernetes API server"
target/debug/boxtable-localapi --crd crds/boxtable.yaml --kubeconfig "$WORK/kubeconfig" >"$WORK/api.url" 2>"$WORK/api.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/api.url" ] && break; sleep 0.1; done
export KUBECONFIG="$WORK/kubeconfig"
echo "API server at $(cat "$WORK/api.url")"

say "starting boxtable-operator"
target/debug/boxtable-operator run --metrics-addr 127.0.0.1:0 --resync-interval 30s >"$WORK/operator.log" 2>&1 &
PIDS+=($!)

say "kubectl apply -f examples/"
kubectl apply -f examples/
# The example Secret points at a placeholder host; point it at the demo database (Npgsql form, as
# a Brighter application would have it). The operator watches the Secret and reconciles at once.
kubectl -n shop create secret generic shop-db --dry-run=client -o yaml \
  --from-literal=connectionString="Host=127.0.0.1;Port=$PG_PORT;Database=shop;Username=shop_migrator;Password=$APP_PASSWORD;SSL Mode=Disable" \
  | kubectl apply -f -

say "kubectl wait --for=condition=Ready boxtable --all"
kubectl -n shop wait --for=condition=Ready boxtable --all --timeout=60s

say "kubectl get boxtables -o wide"
kubectl -n shop get boxtables -o wide

say "status of orders-outbox"
kubectl -n shop get boxtable orders-outbox -o yaml | sed -n '/^status:/,$p'

say "the tables in PostgreSQL"
"$PG_BIN/psql" -X "postgres://shop_migrator:$APP_PASSWORD@127.0.0.1:$PG_PORT/shop" -c \
  "SELECT \"SchemaName\", \"BoxTableName\", \"MigrationVersion\", \"Description\" FROM public.\"__BrighterMigrationHistory\" ORDER BY 1, 2, 3" \
  -c "SELECT \"SchemaName\", \"BoxTableName\", \"MigrationVersion\", \"Description\" FROM billing.\"__BrighterMigrationHistory\""

say "boxtable-operator key --schema public --table outbox"
target/debug/boxtable-operator key --schema public --table outbox

say "deleting scratch-outbox (deletionPolicy: Drop)"
kubectl -n shop delete boxtable scratch-outbox --timeout=60s
"$PG_BIN/psql" -X -t "postgres://shop_migrator:$APP_PASSWORD@127.0.0.1:$PG_PORT/shop" -c \
  "SELECT 'public.scratch_outbox exists: ' || (to_regclass('public.scratch_outbox') IS NOT NULL)"

say "events"
kubectl -n shop get events.events.k8s.io -o custom-columns=OBJECT:.regarding.name,TYPE:.type,REASON:.reason,NOTE:.note

say "done; cleaning up"
