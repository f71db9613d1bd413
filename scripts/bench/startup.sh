#!/usr/bin/env bash
# Items 3 and 5 of scripts/bench.sh on their own: the `migrate` process from start to exit next to
# sqlx-cli (one outbox from empty, and a no-op run), with the no-op run's round trips counted by
# the proxy, plus where the time before the first packet goes. Prints rows 3 and 5 of the
# BENCHMARKS.md table and the first-packet table. Usage: scripts/bench/startup.sh
#
# Same inputs, variants and timer as scripts/bench.sh (sslmode=disable for every tool, the
# database recreated untimed before each fresh run). Time before the first packet: each command
# runs under `strace -f --seccomp-bpf -ttt -e trace=execve,connect,exit_group`, and the time from
# execve to the first connect() to the server, and to exit_group, is read from its trace (strace
# slows every traced call a little, so compare these between tools, not with the timed runs).
#
# Knobs (environment): BENCH_RUNS (15), BENCH_TRACE_RUNS (15), SQLX (path to sqlx; default
# target/bench-tools/bin/sqlx, installed as scripts/bench.sh installs it). Results in
# target/bench-startup/ (target/ is $CARGO_TARGET_DIR when set).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUNS=${BENCH_RUNS:-15}
TRACE_RUNS=${BENCH_TRACE_RUNS:-15}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
W=$TARGET/bench-startup/work
R=$TARGET/bench-startup/results
TOOLS=$TARGET/bench-tools
SQLX=${SQLX:-$TOOLS/bin/sqlx}
BIN=${BIN:-$TARGET/release/boxtable-operator}
BENCH=$ROOT/scripts/bench

say() { printf '\n== %s\n' "$*" >&2; }

command -v strace >/dev/null 2>&1 || {
  say "installing strace"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace
}
if [ ! -x "$SQLX" ]; then
  say "installing sqlx-cli into $TOOLS (one time; several minutes)"
  cargo install sqlx-cli --no-default-features --features postgres --locked --root "$TOOLS"
fi
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  say "building the release binary"
  cargo build --release --bin boxtable-operator
fi

. scripts/pg.sh
pg_start
PSQL="$PG_BIN/psql"
rm -rf "$W" "$R"
mkdir -p "$W" "$R"
BASE=${DATABASE_URL%/*}
NOTLS='?sslmode=disable'
url() { echo "$BASE/$1"; }
admin() { "$PSQL" -X -q -v ON_ERROR_STOP=1 -d "$DATABASE_URL" "$@"; }
recreate() { echo "'$PSQL' -X -q -d '$DATABASE_URL' -c 'DROP DATABASE IF EXISTS $1 WITH (FORCE)' -c 'CREATE DATABASE $1'"; }
timeit() { python3 "$BENCH/timeit.py" "$@"; }

cat > "$W/outbox.yaml" <<'YAML'
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
YAML
sed -e '/^--/d' -e 's/@SCHEMA@/public/g' "$BENCH/outbox_v8.sql.in" > "$W/outbox_v8.sql"
mkdir -p "$W/sqlx-migrations"
cp "$W/outbox_v8.sql" "$W/sqlx-migrations/20261130000000_outbox_v8.sql"
MIGRATE="'$BIN' migrate -f '$W/outbox.yaml' --database-url"

say "5. no-op run on an up-to-date table: round trips (proxy) and latency"
admin -c 'CREATE DATABASE b5' -c 'CREATE DATABASE b5s'
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

say "3. one table from empty, whole process: migrate vs sqlx migrate run vs psql -f (floor)"
timeit --runs "$RUNS" --json "$R/3-one.json" --prepare "$(recreate b3)" \
  --variant "ours=$MIGRATE '$(url b3)$NOTLS'" \
  --variant "sqlx=$SQLX migrate run --source '$W/sqlx-migrations' --database-url '$(url b3)$NOTLS'" \
  --variant "psql='$PSQL' -X -q -1 -v ON_ERROR_STOP=1 -d '$(url b3)$NOTLS' -f '$W/outbox_v8.sql'" \
  --variant "ours_prefer=$MIGRATE '$(url b3)'"

say "time before the first packet (strace), no-op runs"
: > "$R/first-packet.jsonl"
for i in $(seq "$TRACE_RUNS"); do
  for tool in ours sqlx; do
    case $tool in
      ours) cmd=("$BIN" migrate -f "$W/outbox.yaml" --database-url "$(url b5)$NOTLS") ;;
      sqlx) cmd=("$SQLX" migrate run --source "$W/sqlx-migrations" --database-url "$(url b5s)$NOTLS") ;;
    esac
    strace -f --seccomp-bpf -ttt -e trace=execve,connect,exit_group -o "$W/trace" "${cmd[@]}" >/dev/null 2>&1
    python3 - "$W/trace" "$tool" "$PG_PORT" >> "$R/first-packet.jsonl" <<'PY'
import json, re, sys
path, tool, port = sys.argv[1], sys.argv[2], sys.argv[3]
start = connect = end = None
for line in open(path):
    m = re.match(r"\d+\s+(\d+\.\d+) (\w+)\(", line)
    if not m:
        continue
    t, call = float(m.group(1)), m.group(2)
    if call == "execve" and start is None:
        start = t
    elif call == "connect" and connect is None and f"htons({port})" in line:
        connect = t
    elif call == "exit_group":
        end = t
print(json.dumps({"tool": tool, "first_connect_ms": (connect - start) * 1000,
                  "exit_ms": (end - start) * 1000}))
PY
  done
done

say "results (medians; ratio = ours / baseline; same run, same machine)"
python3 "$BENCH/report.py" "$R" | grep -E '^\| (#|---|3|5) ' | tee "$R/table.md"
python3 - "$R/first-packet.jsonl" <<'PY' | tee "$R/first-packet.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| under strace, no-op run (median of %d) | execve → first connect() | execve → exit_group |" % (len(rows) // 2))
print("|---|---|---|")
for tool in ("ours", "sqlx"):
    mine = [r for r in rows if r["tool"] == tool]
    print(f"| {tool} | {statistics.median(r['first_connect_ms'] for r in mine):.2f} ms "
          f"| {statistics.median(r['exit_ms'] for r in mine):.2f} ms |")
PY
