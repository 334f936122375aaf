#!/usr/bin/env bash
# tally as a sidecar to PostgreSQL, end to end on one machine: starts two
# throwaway PostgreSQL 15 servers (loopback, free ports, temp dirs, the
# settings a sidecar needs), the same table in both, one tallyd next to
# each (peering), writes on both databases, then shows `tally diff` of the
# two sidecars, a row read through `tally get`, and `tally status` with the
# sidecar's block. Stops the nodes and the servers at the end, and on any
# failure or Ctrl-C, before it removes their directories.
#
# TALLY_BUILD_DIR=DIR skips the install and the build and runs the binaries
# in DIR. As root the servers run as the `postgres` user (initdb and
# postgres refuse root), as support/pg_cluster.h does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
if [ -z "${TALLY_BUILD_DIR:-}" ]; then
  bash "$here/install-deps.sh"
  # Only what this script runs (tally brings tally-pg): not the tests.
  bash "$here/build.sh" tallyd tally
  TALLY_BUILD_DIR=./build
fi

TALLYD=$TALLY_BUILD_DIR/node/tallyd
TALLY=$TALLY_BUILD_DIR/tools/tally
PGBIN=${TALLY_PG_BIN_DIR:-/usr/lib/postgresql/15/bin}
WORK=$(mktemp -d -t tally-pg-demo-XXXXXX)
chmod 755 "$WORK"
AS_PG=()
if [ "$(id -u)" = 0 ]; then
  AS_PG=(runuser -u postgres --)
  chown postgres "$WORK"
fi
PIDS=()
NAMES=()
CLUSTERS=()

stop_nodes() {
  local i
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for i in "${!PIDS[@]}"; do
    local code=0
    wait "${PIDS[$i]}" 2>/dev/null || code=$?
    echo "${NAMES[$i]} (pid ${PIDS[$i]}) stopped, exit code $code"
  done
  PIDS=()
  NAMES=()
}
stop_clusters() {
  for dir in "${CLUSTERS[@]}"; do
    "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
  done
  CLUSTERS=()
}
cleanup() {
  stop_nodes >/dev/null
  stop_clusters
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# cluster NAME: initdb + start with what a sidecar needs; sets PORT.
cluster() {
  local dir=$WORK/$1
  "${AS_PG[@]}" "$PGBIN/initdb" -D "$dir" -U postgres --auth=trust -N \
    --locale=C >/dev/null
  PORT=$(free_port)
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$dir" -l "$dir.log" -w -o \
    "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$WORK -c wal_level=logical -c track_commit_timestamp=on -c max_replication_slots=10 -c max_wal_senders=10" \
    start >/dev/null
  CLUSTERS+=("$dir")
}
sql() { "$PGBIN/psql" -X -q -At -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2"; }

# start NAME PGPORT [FLAGS...]: a sidecar on that database; sets ADDR.
start() {
  local name=$1 port=$2; shift 2
  "$TALLYD" --name "$name" --data-dir "$WORK/$name" --listen 127.0.0.1:0 \
    --postgres "postgresql://postgres@127.0.0.1:$port/postgres" \
    --table public.users "$@" >/dev/null 2>"$WORK/$name.log" &
  PIDS+=($!)
  NAMES+=("$name")
  ADDR=
  for _ in $(seq 300); do
    ADDR=$(grep -o 'listening on [^ ]*' "$WORK/$name.log" 2>/dev/null | cut -d' ' -f3 || true)
    if [ -n "$ADDR" ]; then return; fi
    if ! kill -0 "${PIDS[-1]}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "sidecar $name did not start:" >&2; cat "$WORK/$name.log" >&2; exit 1
}

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "two PostgreSQL 15 servers, the same table in both"
cluster pg-a; PA=$PORT
cluster pg-b; PB=$PORT
for p in $PA $PB; do
  sql "$p" "CREATE TABLE users (id bigint PRIMARY KEY, name text, score int)"
done
sql "$PA" "INSERT INTO users SELECT g, 'user-' || g, g % 100 FROM generate_series(1, 10000) g"
sql "$PB" "INSERT INTO users SELECT g, 'user-' || g, g % 100 FROM generate_series(1, 10000) g"
echo "pg-a on port $PA, pg-b on port $PB: 10,000 equal rows each"

step "a sidecar next to each database, peering"

start side-b "$PB"; B=$ADDR
start side-a "$PA" --peer "$B" --sync-interval 1s; A=$ADDR
echo "side-a $A (pg-a), side-b $B (pg-b)"

step "tally diff side-a side-b (equal tables: equal trees)"
for _ in $(seq 100); do
  if "$TALLY" --keyspace public.users diff "$A" "$B" >/dev/null 2>&1; then break; fi
  sleep 0.2
done
"$TALLY" --keyspace public.users diff "$A" "$B"

step "application writes on both databases (and one through tally put)"
sql "$PA" "UPDATE users SET score = 1000 WHERE id = 17"
sql "$PB" "DELETE FROM users WHERE id = 5"
sql "$PB" "INSERT INTO users VALUES (20001, 'only-on-b', 1)"
"$TALLY" --node "$A" --keyspace public.users put 42 '{"name":"Ada"}'

step "the sidecars bring them across: both tables equal (md5 of the rows)"
for _ in $(seq 100); do
  MA=$(sql "$PA" "SELECT md5(string_agg(u::text, ',' ORDER BY id)) FROM users u")
  MB=$(sql "$PB" "SELECT md5(string_agg(u::text, ',' ORDER BY id)) FROM users u")
  if [ "$MA" = "$MB" ]; then break; fi
  sleep 0.2
done
echo "pg-a $MA"
echo "pg-b $MB"
"$TALLY" --keyspace public.users diff "$A" "$B"
"$TALLY" --node "$B" --keyspace public.users get 42
"$TALLY" --node "$A" status

step "stopping the sidecars and the servers"
stop_nodes
stop_clusters

step "next"
cat <<EOF
A sidecar of your own: tallyd --postgres URL --table SCHEMA.TABLE, next to
each database (the server's settings are the ones above: wal_level=logical,
track_commit_timestamp=on). The docs: README.md, then docs/postgres.md.
Every test, as CI runs them (builds the test programs too): bash scripts/test.sh
EOF
