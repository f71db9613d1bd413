#!/usr/bin/env bash
# Benchmarks against the floor (plain PostgreSQL) and the peer (sqlx-cli), side by side in one
# run. Prints one table; BENCHMARKS.md explains every row. Usage: scripts/bench.sh
#
# Installs what it needs (PostgreSQL via scripts/pg.sh, python3, sqlx-cli into target/bench-tools,
# built once and cached; the control plane via scripts/control-plane.sh, built from pinned Go
# modules and cached), builds release binaries,
# starts its own throwaway PostgreSQL and control plane, and leaves raw results in
# target/bench-results/*.json (target/ is $CARGO_TARGET_DIR when set).
#
# Knobs (environment): BENCH_ITEMS (the items to run, default "1 2 3 4 5 6 7"),
# BENCH_OPERATOR (process or pod, item 6: the operator as a process on this host, or as the Pods
# of dist/install.yaml's Deployment on the node of scripts/node.sh, with their shipped requests and
# limits, the image scripts/image.sh builds from this tree, imagePullPolicy Never; pod needs root
# and cgroup v1, see scripts/node.sh), BENCH_RESYNC (the operator's --resync-interval in item 6,
# default its own, 5m), BENCH_NEW (100, item 6: new BoxTables created one by one in the Ready fleet,
# BENCH_NEW_GAP seconds apart, 1, once while it resyncs and once right after a restart; 0 skips), BENCH_RUNS (15, items 3 and 5), BENCH_BULK_RUNS (3, item 4),
# BENCH_CONTENTION_RUNS (5, item 7), BENCH_BOXTABLES (10000, item 6), BENCH_SCHEMAS (1000, item 6),
# BENCH_SECRETS (2000, item 6), BENCH_SECRET_KIB (200, item 6),
# BENCH_BULK_TABLES (500, item 4), BENCH_PGBENCH_TX (20000, item 2), BENCH_CRITERION_SECS (3, items
# 1 and 2), BENCH_LOCK_ROUNDS (3, item 2), SQLX (path to sqlx), BENCH_BIN (another build of
# boxtable-operator to measure in items 3 to 7, for a before/after on the same machine; default
# this tree's release build).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=${BENCH_RUNS:-15}
BULK_RUNS=${BENCH_BULK_RUNS:-3}
CONTENTION_RUNS=${BENCH_CONTENTION_RUNS:-5}
BOXTABLES=${BENCH_BOXTABLES:-10000}
SCHEMAS=${BENCH_SCHEMAS:-1000}
NOISE_SECRETS=${BENCH_SECRETS:-2000}
NOISE_KIB=${BENCH_SECRET_KIB:-200}
BULK_TABLES=${BENCH_BULK_TABLES:-500}
PGBENCH_TX=${BENCH_PGBENCH_TX:-20000}
CRITERION_SECS=${BENCH_CRITERION_SECS:-3}
LOCK_ROUNDS=${BENCH_LOCK_ROUNDS:-3}
ITEMS=" ${BENCH_ITEMS:-1 2 3 4 5 6 7} "
OPERATOR_MODE=${BENCH_OPERATOR:-process}
NEW=${BENCH_NEW:-100}
NEW_GAP=${BENCH_NEW_GAP:-1}
case $OPERATOR_MODE in process|pod) ;; *) echo "bench.sh: BENCH_OPERATOR is process or pod, not $OPERATOR_MODE" >&2; exit 2 ;; esac
want() { [[ $ITEMS == *" $1 "* ]]; }
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
W=$TARGET/bench-work
R=$TARGET/bench-results
TOOLS=$TARGET/bench-tools
SQLX=${SQLX:-$TOOLS/bin/sqlx}
BIN=${BENCH_BIN:-$TARGET/release/boxtable-operator}
BENCH=$ROOT/scripts/bench

say() { printf '\n== %s\n' "$*" >&2; }

# ---------------------------------------------------------------- tools
if ! command -v python3 >/dev/null 2>&1; then
  say "installing python3"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3
fi
if [ ! -x "$SQLX" ] && { want 3 || want 5; }; then
  say "installing sqlx-cli into $TOOLS (one time; several minutes)"
  cargo install sqlx-cli --no-default-features --features postgres --locked --root "$TOOLS"
fi
say "building release binaries"
cargo build --release --workspace --bins

. scripts/pg.sh
pg_start
PSQL="$PG_BIN/psql"
PGBENCH="$PG_BIN/pgbench"
[ -x "$PGBENCH" ] || PGBENCH=$(command -v pgbench)

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  pg_stop
}
trap cleanup EXIT
# An interrupt (Ctrl-C, kill, a CI timeout) ends the run through cleanup and the servers' own stop
# functions (which the control plane and node scripts chain in front of it). bash runs a trap only
# once its foreground command has ended, so the long commands run through `interruptible`: in the
# background, waited for, which a signal interrupts at once; cleanup then stops them.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
interruptible() {
  "$@" &
  local pid=$! status=0
  PIDS+=("$pid")
  wait "$pid" || status=$?
  # Waited for: cleanup must not signal its pid, which the system may have reused.
  unset 'PIDS[-1]'
  return "$status"
}

rm -rf "$W" "$R"
mkdir -p "$W" "$R"
BASE=${DATABASE_URL%/*}
url() { echo "$BASE/$1"; }
admin() { "$PSQL" -X -q -v ON_ERROR_STOP=1 -d "$DATABASE_URL" "$@"; }
recreate() { echo "'$PSQL' -X -q -d '$DATABASE_URL' -c 'DROP DATABASE IF EXISTS $1 WITH (FORCE)' -c 'CREATE DATABASE $1'"; }
timeit() { interruptible python3 "$BENCH/timeit.py" "$@"; }

# The machine, for BENCHMARKS.md.
python3 - "$R/machine.json" <<EOF
import json, os, platform, subprocess, sys
mem = next(l.split()[1] for l in open('/proc/meminfo') if l.startswith('MemTotal'))
cpu = next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), '?')
pg = subprocess.run(['$PG_BIN/postgres', '--version'], capture_output=True, text=True).stdout.strip()
sqlx = subprocess.run(['$SQLX', '--version'], capture_output=True, text=True).stdout.strip() if os.path.exists('$SQLX') else 'not used'
load = open('/proc/loadavg').read().split()[:3]
json.dump({'nproc': os.cpu_count(), 'mem_gib': round(int(mem) / 1048576, 1), 'cpu': cpu,
           'kernel': platform.release(), 'postgres': pg, 'sqlx': sqlx, 'loadavg_at_start': load,
           'rustc': subprocess.run(['rustc', '--version'], capture_output=True, text=True).stdout.strip()},
          open(sys.argv[1], 'w'), indent=1)
EOF

# Shared inputs: the outbox manifest, the same DDL for psql, the same DDL as one sqlx migration.
cat > "$W/outbox.yaml" <<'EOF'
apiVersion: brighter.dev/v1alpha1
kind: BoxTable
metadata:
  name: outbox
spec:
  box: Outbox
  table: outbox
  database:
    secretRef:
      name: unused-database-url-given
EOF
sed -e '/^--/d' -e 's/@SCHEMA@/public/g' "$BENCH/outbox_v8.sql.in" > "$W/outbox_v8.sql"
mkdir -p "$W/sqlx-migrations"
cp "$W/outbox_v8.sql" "$W/sqlx-migrations/20261130000000_outbox_v8.sql"
MIGRATE="'$BIN' migrate -f '$W/outbox.yaml' --database-url"

if want 1; then
# ---------------------------------------------------------------- 1. key derivation
say "1. key derivation (criterion)"
cargo bench -q --bench lock_key -- --warm-up-time 1 --measurement-time "$CRITERION_SECS" --noplot >&2
python3 - "$R/1-key.json" <<'EOF' >&2
import hashlib, json, sys, timeit
n = 200000
t = min(timeit.repeat(
    "int.from_bytes(sha256(b'74726:' + k.encode()).digest()[:8], 'big', signed=True)",
    setup="from hashlib import sha256; k = 'BrighterMigration_public.outbox'", number=n, repeat=5))
json.dump({'python_hashlib_ns': t / n * 1e9}, open(sys.argv[1], 'w'))
print(f"  python hashlib baseline {t / n * 1e9:.0f} ns/key")
EOF
fi

if want 2; then
# ---------------------------------------------------------------- 2. lock round trip
say "2. uncontended lock round trip: criterion vs pgbench -M prepared"
admin -c 'CREATE DATABASE b2'
cat > "$W/lock.pgbench" <<'EOF'
\set key -5469556670739463647
SELECT pg_try_advisory_lock(:key::int8);
SELECT pg_advisory_unlock(:key::int8);
EOF
pgbench_once() {
  "$PGBENCH" -n -M prepared -c 1 -j 1 -t "$PGBENCH_TX" -f "$W/lock.pgbench" "$(url b2)" 2>/dev/null \
    | awk '/latency average/ {print $4 * 1000}'
}
# On a small shared machine a local round trip can be fast or several times slower for many
# seconds at a time (pgbench runs of 55 and 231 us a minute apart have been seen), so one pgbench
# run next to one criterion run can pair a fast baseline with a slow measurement. Each variant therefore runs
# LOCK_ROUNDS times between two pgbench runs, and the report takes the median of those paired
# ratios.
: > "$R/2-pairs.jsonl"
for round in $(seq "$LOCK_ROUNDS"); do
  for variant in crate_api_current_thread prepared_current_thread query_typed_current_thread crate_api; do
    before=$(pgbench_once)
    DATABASE_URL=$(url b2) cargo bench -q --bench lock_roundtrip -- --warm-up-time 1 \
      --measurement-time "$CRITERION_SECS" --noplot --exact "lock_roundtrip/$variant" >&2
    after=$(pgbench_once)
    ns=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' \
      "$TARGET/criterion/lock_roundtrip/$variant/new/estimates.json")
    echo "{\"round\": $round, \"variant\": \"$variant\", \"ns\": $ns, \"pgbench_us\": [$before, $after]}" \
      >> "$R/2-pairs.jsonl"
    echo "  round $round $variant: $(awk "BEGIN {print $ns / 1000}") us, pgbench -M prepared $before and $after us" >&2
  done
done
# `cargo bench` built the binaries again in the bench profile (dev-dependency features) and put them
# in target/release; put the plain release build back for the process-level items.
cargo build -q --release --workspace --bins
fi

if want 5; then
# ---------------------------------------------------------------- 5. (first, to check the DDL) no-op
say "5. no-op run on an up-to-date table: round trips (proxy) and latency"
# sqlx-cli is built without TLS and never asks for it; items 3 and 5 give every tool the same
# sslmode=disable (no SSLRequest turn). Item 3 also times ours with the default sslmode=prefer.
NOTLS='?sslmode=disable'

admin -c 'CREATE DATABASE b5' -c 'CREATE DATABASE b5s'
# proxied LABEL DB CMD...: runs CMD with PROXY_URL pointing at DB through pgproxy.py; the proxy's
# per-connection report goes to $R/5-proxy-LABEL.json.
proxied() {
  local label=$1 db=$2 proxy
  shift 2
  rm -f "$W/proxy.port"
  python3 "$BENCH/pgproxy.py" --upstream "127.0.0.1:$PG_PORT" --report "$R/5-proxy-$label.json" \
    > "$W/proxy.port" &
  proxy=$!
  until [ -s "$W/proxy.port" ]; do sleep 0.05; done
  PROXY_URL="postgres://postgres:${PG_PASSWORD}@127.0.0.1:$(cat "$W/proxy.port")/$db$NOTLS" "$@" >/dev/null
  kill -TERM "$proxy"
  wait "$proxy" || true
}
run_ours() { "$BIN" migrate -f "$W/outbox.yaml" --database-url "$PROXY_URL"; }
run_sqlx() { "$SQLX" migrate run --source "$W/sqlx-migrations" --database-url "$PROXY_URL"; }
proxied ours-fresh b5 run_ours
proxied ours-noop b5 run_ours
proxied sqlx-fresh b5s run_sqlx
proxied sqlx-noop b5s run_sqlx
cp "$W/outbox_v8.sql" "$R/5-ddl.sql"
timeit --runs "$RUNS" --json "$R/5-noop.json" \
  --variant "ours=$MIGRATE '$(url b5)$NOTLS'" \
  --variant "sqlx=$SQLX migrate run --source '$W/sqlx-migrations' --database-url '$(url b5s)$NOTLS'"
fi

if want 3; then
# ---------------------------------------------------------------- 3. one table, process start to exit
say "3. one table from empty, whole process: migrate vs sqlx migrate run vs psql -f (floor)"
timeit --runs "$RUNS" --json "$R/3-one.json" --prepare "$(recreate b3)" \
  --variant "ours=$MIGRATE '$(url b3)$NOTLS'" \
  --variant "sqlx=$SQLX migrate run --source '$W/sqlx-migrations' --database-url '$(url b3)$NOTLS'" \
  --variant "psql='$PSQL' -X -q -1 -v ON_ERROR_STOP=1 -d '$(url b3)$NOTLS' -f '$W/outbox_v8.sql'" \
  --variant "ours_prefer=$MIGRATE '$(url b3)'"
fi

if want 4; then
# ---------------------------------------------------------------- 4. 500 tables in 500 schemas
say "4. $BULK_TABLES outbox tables in distinct schemas from empty: migrate -c 1/2/4/8 vs serial psql"
python3 - "$W" "$BULK_TABLES" "$BENCH/outbox_v8.sql.in" <<'EOF'
import sys
w, n, template = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read()
ddl = "\n".join(l for l in template.splitlines() if not l.startswith("--")) + "\n"
with open(f"{w}/bulk.yaml", "w") as y, open(f"{w}/bulk.sql", "w") as s, open(f"{w}/schemas.sql", "w") as c:
    for i in range(1, n + 1):
        schema = f"s{i:04d}"
        y.write(f"---\napiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: outbox-{schema}\n"
                f"spec:\n  box: Outbox\n  schema: {schema}\n  table: outbox\n"
                f"  database:\n    secretRef:\n      name: unused-database-url-given\n")
        s.write(ddl.replace("@SCHEMA@", schema))
        c.write(f"CREATE SCHEMA {schema};\n")
EOF
BULK_PREP="$(recreate b4) && '$PSQL' -X -q -v ON_ERROR_STOP=1 -d '$(url b4)' -f '$W/schemas.sql'"
BULK_CHECK="test \$('$PSQL' -X -tA -d '$(url b4)' -c \"SELECT count(*) FROM pg_tables WHERE tablename = 'outbox'\") -eq $BULK_TABLES"
timeit --runs "$BULK_RUNS" --json "$R/4-bulk.json" --prepare "$BULK_PREP" \
  --variant "c1='$BIN' migrate -f '$W/bulk.yaml' --database-url '$(url b4)' --concurrency 1" \
  --variant "c2='$BIN' migrate -f '$W/bulk.yaml' --database-url '$(url b4)' --concurrency 2" \
  --variant "c4='$BIN' migrate -f '$W/bulk.yaml' --database-url '$(url b4)' --concurrency 4" \
  --variant "c8='$BIN' migrate -f '$W/bulk.yaml' --database-url '$(url b4)' --concurrency 8" \
  --variant "psql='$PSQL' -X -q -v ON_ERROR_STOP=1 -d '$(url b4)' -f '$W/bulk.sql'" \
  --check "c1=$BULK_CHECK" --check "c4=$BULK_CHECK" --check "psql=$BULK_CHECK"
fi

if want 7; then
# ---------------------------------------------------------------- 7. contention
say "7. contention: 16 migrate processes at once on one fresh table vs one alone"
cat > "$W/sixteen.sh" <<EOF
#!/usr/bin/env bash
set -u
pids=()
for i in \$(seq 16); do
  '$BIN' migrate -f '$W/outbox.yaml' --database-url '$(url b7)' > /dev/null &
  pids+=(\$!)
done
rc=0
for p in "\${pids[@]}"; do wait "\$p" || rc=1; done
exit \$rc
EOF
chmod +x "$W/sixteen.sh"
ONE_APPLIED="test \"\$('$PSQL' -X -tA -d '$(url b7)' -c \"SELECT count(*) || ':' || min(\\\"Description\\\") FROM \\\"__BrighterMigrationHistory\\\" WHERE \\\"BoxTableName\\\" = 'outbox'\")\" = '1:fresh install at V8'"
timeit --runs "$CONTENTION_RUNS" --json "$R/7-contention.json" --prepare "$(recreate b7)" \
  --variant "single=$MIGRATE '$(url b7)'" \
  --variant "sixteen=$W/sixteen.sh" \
  --check "single=$ONE_APPLIED" --check "sixteen=$ONE_APPLIED"
fi

if want 6; then
# ---------------------------------------------------------------- 6. scale on the real API server
say "6. $BOXTABLES BoxTables over $SCHEMAS schemas, $NOISE_SECRETS unrelated ${NOISE_KIB} KiB Secrets, on kube-apiserver"
. scripts/control-plane.sh
if [ "$OPERATOR_MODE" = pod ]; then
  . scripts/node.sh
  CP_WORKLOADS=1 cp_start
  node_start
  [ -n "${NODE_POSTGRES:-}" ] || { echo "bench.sh: the node forwards no PostgreSQL (NODE_POSTGRES is empty)" >&2; exit 1; }
else
  cp_start
fi
KUBECTL=$CONTROL_PLANE_BIN/kubectl
kubectl_admin() { KUBECONFIG=$CONTROL_PLANE_KUBECONFIG "$KUBECTL" "$@"; }
OPERATOR_ARGS=()
[ -z "${BENCH_RESYNC:-}" ] || OPERATOR_ARGS+=("--resync-interval=$BENCH_RESYNC")
if [ "$OPERATOR_MODE" = pod ]; then
  # The release image of this tree, loaded into the node; dist/install.yaml as a user's overlay
  # overrides its image, with no replica until scale.py starts the operator.
  IMAGE=localhost/boxtable-operator:bench-$(git rev-parse --short=12 HEAD)
  say "building the image (scripts/image.sh) and loading it into the node as $IMAGE"
  scripts/image.sh --binary "$BIN" --output "$W/image" >&2
  ctr_node() { "$NODE_BIN/ctr" --address "$NODE_CONTAINERD_ADDRESS" -n k8s.io "$@"; }
  ctr_node images import "$W/image/boxtable-operator.tar" >&2
  ctr_node images tag --force "$(tar -xOf "$W/image/boxtable-operator.tar" manifest.json \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["RepoTags"][0])')" "$IMAGE" >&2
  mkdir -p "$W/install"
  cp dist/install.yaml "$W/install/install.yaml"
  {
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - install.yaml\n'
    printf 'images:\n  - name: ghcr.io/boxtable/boxtable-operator\n    newName: %s\n    newTag: "%s"\n' "${IMAGE%:*}" "${IMAGE##*:}"
    printf 'replicas:\n  - name: boxtable-operator\n    count: 0\n'
    printf 'patches:\n  - target: {kind: Deployment, name: boxtable-operator}\n    patch: |-\n'
    printf '      - op: replace\n        path: /spec/template/spec/containers/0/imagePullPolicy\n        value: Never\n'
    for arg in "${OPERATOR_ARGS[@]}"; do
      printf '      - op: add\n        path: /spec/template/spec/containers/0/args/-\n        value: "%s"\n' "$arg"
    done
  } > "$W/install/kustomization.yaml"
  kubectl_admin apply -k "$W/install" >/dev/null
else
  # The CRD, the operator's ServiceAccount and RBAC as a user installs them; the operator runs as that
  # ServiceAccount, so its requests are the audit log's events of that user.
  kubectl_admin apply -k deploy/ >/dev/null
fi
kubectl_admin wait --for=condition=Established crd/boxtables.brighter.dev --timeout=120s >/dev/null
OPERATOR_USER=system:serviceaccount:boxtable-system:boxtable-operator
# token_kubeconfig FILE TOKEN: a kubeconfig for a bearer token.
token_kubeconfig() {
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {server: "$CONTROL_PLANE_SERVER", certificate-authority: "$CONTROL_PLANE_DIR/ca.crt"}
users:
- name: user
  user: {token: "$2"}
contexts:
- name: bench
  context: {cluster: bench, user: user}
current-context: bench
EOF
}
token_kubeconfig "$W/operator.kubeconfig" \
  "$(kubectl_admin create token boxtable-operator -n boxtable-system --duration=4h)"
admin -c 'CREATE DATABASE b6'
python3 -c "import sys; print(''.join(f'CREATE SCHEMA s{i:04d};' for i in range(1, int(sys.argv[1]) + 1)))" \
  "$SCHEMAS" | "$PSQL" -X -q -v ON_ERROR_STOP=1 -d "$(url b6)"
if [ "$OPERATOR_MODE" = pod ]; then
  # The Pods reach PostgreSQL through the node's forwarder.
  B6_URL=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(p._replace(netloc=p.netloc.rsplit("@", 1)[0] + "@" + sys.argv[2]).geturl())' "$(url b6)" "$NODE_POSTGRES")
  SCALE_OPERATOR=(--pod --kubectl "$KUBECTL" --kubeconfig "$CONTROL_PLANE_KUBECONFIG")
  SCALE_JSON=$R/6-scale-pod.json
else
  B6_URL=$(url b6)
  METRICS_PORT=$(pg_free_port)
  SCALE_OPERATOR=(--operator-cmd "KUBECONFIG='$W/operator.kubeconfig' RUST_LOG=${RUST_LOG:-info} exec '$BIN' run --metrics-addr 127.0.0.1:$METRICS_PORT ${OPERATOR_ARGS[*]}"
    --metrics "http://127.0.0.1:$METRICS_PORT")
  SCALE_JSON=$R/6-scale.json
fi
interruptible python3 "$BENCH/scale.py" --server "$CONTROL_PLANE_SERVER" --ca "$CONTROL_PLANE_DIR/ca.crt" \
  --cert "$CONTROL_PLANE_DIR/admin.crt" --key "$CONTROL_PLANE_DIR/admin.key" \
  --audit-log "$CONTROL_PLANE_AUDIT_LOG" --operator-user "$OPERATOR_USER" \
  "${SCALE_OPERATOR[@]}" --database-url "$B6_URL" --psql "$PSQL" \
  --admin-url "$DATABASE_URL" --database b6 --workdir "$W" \
  --count "$BOXTABLES" --schemas "$SCHEMAS" --secrets "$NOISE_SECRETS" --secret-kib "$NOISE_KIB" \
  --new "$NEW" --new-gap "$NEW_GAP" --ddl-template "$BENCH/outbox_v8.sql.in" --json "$SCALE_JSON"
fi

# ---------------------------------------------------------------- the table
say "results (medians; ratio = ours / baseline; same run, same machine)"
python3 "$BENCH/report.py" "$R" | tee "$R/table.md"
