#!/usr/bin/env bash
# See it work: a throwaway PostgreSQL, a Kubernetes API server, the operator, and the examples
# applied with kubectl. Prints the BoxTables, one status, a lock identity, shows a Drop deletion,
# then cleans everything up.
#
#   scripts/demo.sh          seconds: the local API server (localapi/) and the operator as a
#                            process; needs kubectl on PATH
#   scripts/demo.sh --node   the way a cluster runs it: the real control plane and a real node
#                            (scripts/control-plane.sh, scripts/node.sh), the operator's image from
#                            scripts/image.sh installed from dist/install.yaml as two Pods; about a
#                            minute once the control plane's and the node's binaries are cached
#                            (their first build takes long, see README "Testing"); needs root
#
# Installs PostgreSQL with apt if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

mode=local
case "${1:-}" in
  '') ;;
  --node) mode=node ;;
  *) echo "usage: scripts/demo.sh [--node]" >&2; exit 2 ;;
esac
if [ "$mode" = local ] && ! command -v kubectl >/dev/null 2>&1; then
  echo "demo.sh: kubectl is not on PATH; install kubectl first (scripts/demo.sh --node builds its own)" >&2
  exit 1
fi

say "building"
cargo build --quiet --workspace --bins

WORK=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-demo.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pg_stop
  rm -rf "$WORK"
}
trap cleanup EXIT

say "starting a throwaway PostgreSQL"
pg_start

PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL")
APP_PASSWORD=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
"${PSQL[@]}" -c "CREATE ROLE shop_migrator LOGIN PASSWORD '$APP_PASSWORD'" -c "CREATE DATABASE shop OWNER shop_migrator"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "postgres://shop_migrator:$APP_PASSWORD@127.0.0.1:$PG_PORT/shop" \
  -c "CREATE SCHEMA billing"

if [ "$mode" = local ]; then
  say "starting the local Kubernetes API server"
  target/debug/boxtable-localapi --crd crds/boxtable.yaml --kubeconfig "$WORK/kubeconfig" >"$WORK/api.url" 2>"$WORK/api.log" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$WORK/api.url" ] && break; sleep 0.1; done
  export KUBECONFIG="$WORK/kubeconfig"
  echo "API server at $(cat "$WORK/api.url")"

  say "starting boxtable-operator"
  target/debug/boxtable-operator run --metrics-addr 127.0.0.1:0 --resync-interval 30s >"$WORK/operator.log" 2>&1 &
  PIDS+=($!)
  DB_HOST=127.0.0.1 DB_PORT=$PG_PORT
else
  . scripts/control-plane.sh
  . scripts/node.sh
  say "starting the control plane and a node (kubelet, containerd and runc in namespaces of their own)"
  CP_WORKLOADS=1 cp_start
  node_start
  cp_use_kubectl
  export KUBECONFIG="$CONTROL_PLANE_KUBECONFIG"
  # Pods reach the demo's PostgreSQL through the node's forwarder.
  DB_HOST=${NODE_POSTGRES%:*} DB_PORT=${NODE_POSTGRES##*:}

  say "scripts/image.sh: the operator's image, loaded into the node"
  image=localhost/boxtable-operator:demo
  scripts/image.sh --binary target/debug/boxtable-operator --output "$WORK/image" >"$WORK/image.log" 2>&1 \
    || { cat "$WORK/image.log" >&2; exit 1; }
  ctr=("$NODE_BIN/ctr" --address "$NODE_CONTAINERD_ADDRESS" -n k8s.io)
  "${ctr[@]}" images import "$WORK/image/boxtable-operator.tar" >/dev/null
  built=$(tar --extract --to-stdout --file "$WORK/image/boxtable-operator.tar" manifest.json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["RepoTags"][0])')
  "${ctr[@]}" images tag --force "$built" "$image" >/dev/null

  say "kubectl apply -k: dist/install.yaml with the image overridden, as a user's overlay does"
  mkdir "$WORK/overlay"
  cp dist/install.yaml "$WORK/overlay/install.yaml"
  {
    echo 'apiVersion: kustomize.config.k8s.io/v1beta1'
    echo 'kind: Kustomization'
    echo 'resources: [install.yaml]'
    echo 'images:'
    echo "  - {name: ghcr.io/boxtable/boxtable-operator, newName: ${image%:*}, newTag: \"${image##*:}\"}"
    echo 'patches:'
    echo '  - target: {kind: Deployment, name: boxtable-operator}'
    echo '    patch: |-'
    echo '      - {op: replace, path: /spec/template/spec/containers/0/imagePullPolicy, value: Never}'
  } >"$WORK/overlay/kustomization.yaml"
  kubectl apply -k "$WORK/overlay" >/dev/null
  kubectl -n boxtable-system rollout status deployment/boxtable-operator --timeout=180s
  kubectl -n boxtable-system get pods -o wide
fi

say "kubectl apply -f examples/"
kubectl apply -f examples/
# The example Secret points at a placeholder host; point it at the demo database (Npgsql form, as
# a Brighter application would have it). The operator watches the Secret and reconciles at once.
kubectl -n shop create secret generic shop-db --dry-run=client -o yaml \
  --from-literal=connectionString="Host=$DB_HOST;Port=$DB_PORT;Database=shop;Username=shop_migrator;Password=$APP_PASSWORD;SSL Mode=Disable" \
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

if [ "$mode" = node ]; then
  leader=$(kubectl -n boxtable-system get lease boxtable-operator -o jsonpath='{.spec.holderIdentity}')
  say "kubectl -n boxtable-system logs $leader --tail=3 (the replica holding the Lease)"
  kubectl -n boxtable-system logs "$leader" --tail=3
fi

say "done; cleaning up"
