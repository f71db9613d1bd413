#!/usr/bin/env bash
# Throwaway PostgreSQL for tests and the demo. Source this file, then call `pg_start`: it exports
# DATABASE_URL and stops the server (and deletes its data) when the calling shell exits.
#
# - Uses the machine's PostgreSQL binaries; installs the `postgresql` package with apt if missing.
#   With `PG_MAJOR=13` (..18) set, uses that major's pinned build instead, fetched once into a
#   cache by scripts/pg-install.sh. `PG_BIN` is exported for tests that start private clusters.
# - Runs the server as a non-root user (the `postgres` system user when invoked as root).
# - Listens on 127.0.0.1 on a free port, with password (SCRAM) authentication over TCP.

. "$(dirname "${BASH_SOURCE[0]}")/pg-install.sh"

pg_bindir() {
  if [ -n "${PG_MAJOR:-}" ]; then
    pg_install_major "$PG_MAJOR"
    return
  fi
  local d
  for d in "$(pg_config --bindir 2>/dev/null)" /usr/lib/postgresql/*/bin; do
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

pg_ensure_installed() {
  if [ -n "${PG_MAJOR:-}" ]; then
    pg_install_major "$PG_MAJOR" >/dev/null
    return
  fi
  if pg_bindir >/dev/null; then return 0; fi
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "pg.sh: PostgreSQL server binaries not found; installing the postgresql package" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  fi
  if ! pg_bindir >/dev/null; then
    echo "pg.sh: PostgreSQL server binaries (initdb, pg_ctl) are missing. Install them with" >&2
    echo "  sudo apt-get install postgresql" >&2
    echo "or set DATABASE_URL to a disposable PostgreSQL server." >&2
    return 1
  fi
}

pg_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $(( 20000 + RANDOM % 30000 ))
}

# Runs a command as the server's (non-root) user.
pg_as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$PG_OWNER" -- "$@"
  else
    "$@"
  fi
}

pg_stop() {
  if [ -n "${PG_DATA:-}" ] && [ -d "$PG_DATA" ]; then
    pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$PG_ROOT"
  fi
}

pg_start() {
  pg_ensure_installed || return 1
  PG_BIN=$(pg_bindir)
  PG_OWNER=$(id -un)
  if [ "$(id -u)" -eq 0 ]; then
    PG_OWNER=postgres
    id "$PG_OWNER" >/dev/null 2>&1 || useradd --system --no-create-home "$PG_OWNER"
  fi
  PG_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/boxtable-pg.XXXXXX")
  PG_DATA="$PG_ROOT/data"
  PG_PASSWORD=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  printf '%s\n' "$PG_PASSWORD" > "$PG_ROOT/pwfile"
  chmod 755 "$PG_ROOT"
  [ "$(id -u)" -eq 0 ] && chown -R "$PG_OWNER" "$PG_ROOT"
  pg_as_owner "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --pwfile="$PG_ROOT/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-sync >"$PG_ROOT/initdb.log" 2>&1 \
    || { cat "$PG_ROOT/initdb.log" >&2; return 1; }
  rm -f "$PG_ROOT/pwfile"
  local attempt
  for attempt in 1 2 3 4 5; do
    PG_PORT=$(pg_free_port)
    if pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_ROOT/server.log" -w -t 60 start \
      -o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$PG_ROOT \
          -c max_connections=400 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
          -c shared_buffers=128MB" >/dev/null 2>&1; then
      local existing
      existing=$(eval "set -- $(trap -p EXIT)"; printf '%s' "${3:-}")
      # shellcheck disable=SC2064
      trap "pg_stop${existing:+; $existing}" EXIT
      export PG_BIN PG_ROOT PG_DATA PG_PORT PG_OWNER PG_PASSWORD
      export DATABASE_URL="postgres://postgres:${PG_PASSWORD}@127.0.0.1:${PG_PORT}/postgres"
      echo "pg.sh: PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT" >&2
      return 0
    fi
  done
  cat "$PG_ROOT/server.log" >&2
  return 1
}
