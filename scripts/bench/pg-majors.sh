#!/usr/bin/env bash
# Side by side per PostgreSQL major (13..18): the uncontended lock round trip (pgbench -M prepared,
# pg_try_advisory_lock + pg_advisory_unlock) and one outbox V8 from empty (`migrate`, process start
# to exit, median of RUNS). One server per major, one after another, same machine, same run.
#
#   scripts/bench/pg-majors.sh                 every pinned major
#   PG_MAJORS="13 18" RUNS=9 scripts/bench/pg-majors.sh
#
# Prints one Markdown table row per major. Uses target/release/boxtable-operator when built,
# else the debug build (the comparison is between majors, not against another tool).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/pg-install.sh

RUNS=${RUNS:-15}
PGBENCH_TX=${PGBENCH_TX:-5000}
PGBENCH=$(command -v pgbench)
PSQL=$(command -v psql)
BIN=target/release/boxtable-operator
[ -x "$BIN" ] || { cargo build -q --bins; BIN=target/debug/boxtable-operator; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
printf -- "apiVersion: brighter.dev/v1alpha1\nkind: BoxTable\nmetadata:\n  name: orders\nspec:\n  box: Outbox\n  database:\n    secretRef:\n      name: db\n" > "$W/outbox.yaml"
cat > "$W/lock.pgbench" <<'EOF'
\set key -5469556670739463647
SELECT pg_try_advisory_lock(:key::int8);
SELECT pg_advisory_unlock(:key::int8);
EOF

echo "| PostgreSQL | lock round trip (pgbench -M prepared, µs, 3 runs) | one outbox V8 from empty, \`migrate\` start→exit (median of $RUNS, ms) |"
echo "|---|---|---|"
for major in ${PG_MAJORS:-$PG_SUPPORTED_MAJORS}; do
  (
    export PG_MAJOR=$major
    unset DATABASE_URL
    . scripts/pg.sh
    pg_start >/dev/null 2>&1
    base=${DATABASE_URL%/postgres}
    "$PSQL" -X -q -d "$DATABASE_URL" -c 'CREATE DATABASE lockbench' -c 'CREATE DATABASE onetable'
    lock=()
    for _ in 1 2 3; do
      lock+=("$("$PGBENCH" -n -M prepared -c 1 -j 1 -t "$PGBENCH_TX" -f "$W/lock.pgbench" "$base/lockbench" 2>/dev/null \
        | awk '/latency average/ {printf "%.0f", $4 * 1000}')")
    done
    recreate="'$PSQL' -X -q -d '$DATABASE_URL' -c 'DROP DATABASE onetable' -c 'CREATE DATABASE onetable'"
    python3 scripts/bench/timeit.py --runs "$RUNS" --json "$W/one-$major.json" --prepare "$recreate" \
      --variant "migrate='$BIN' migrate -f '$W/outbox.yaml' --database-url '$base/onetable'" 2>/dev/null
    one=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["migrate"]["median"] * 1000))' "$W/one-$major.json")
    version=$("$PG_BIN/postgres" --version | awk '{print $3}')
    echo "| $version | ${lock[*]} | $one |"
  )
done
