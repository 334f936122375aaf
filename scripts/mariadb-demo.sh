#!/usr/bin/env bash
# tally as a sidecar to MariaDB, in one mesh with a sidecar to PostgreSQL,
# end to end on one machine: starts a throwaway MariaDB server and a
# throwaway PostgreSQL 15 server (loopback, free ports, temp dirs, the
# settings a sidecar needs), the same table in both (the MariaDB database is
# named `public`, so both tables are the keyspace public.users), one tallyd
# next to each (peering), writes on both databases, then shows both tables
# equal by each database's own md5 of its rows, and `tally status` of the
# MariaDB sidecar. Stops the nodes and the servers at the end, and on any
# failure or Ctrl-C, before it removes their directories.
#
# TALLY_BUILD_DIR=DIR skips the install and the build and runs the binaries
# in DIR. As root the servers run as the `mysql` and `postgres` users.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
if [ -z "${TALLY_BUILD_DIR:-}" ]; then
  bash "$here/install-deps.sh"
  bash "$here/build.sh" tallyd tally
  TALLY_BUILD_DIR=./build
fi

TALLYD=$TALLY_BUILD_DIR/node/tallyd
TALLY=$TALLY_BUILD_DIR/tools/tally
PGBIN=${TALLY_PG_BIN_DIR:-/usr/lib/postgresql/15/bin}
WORK=$(mktemp -d -t tally-mariadb-demo-XXXXXX)
chmod 755 "$WORK"
AS_PG=()
AS_MY=()
if [ "$(id -u)" = 0 ]; then
  AS_PG=(runuser -u postgres --)
  AS_MY=(runuser -u mysql --)
fi
PIDS=()
NAMES=()
MYPID=
PGDIR=

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
stop_servers() {
  if [ -n "$MYPID" ]; then
    kill -TERM "$MYPID" 2>/dev/null || true
    wait "$MYPID" 2>/dev/null || true
    MYPID=
  fi
  if [ -n "$PGDIR" ]; then
    "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$PGDIR" -m fast -w stop >/dev/null 2>&1 || true
    PGDIR=
  fi
}
cleanup() {
  stop_nodes >/dev/null
  stop_servers
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "a MariaDB server and a PostgreSQL 15 server, the same table in both"
mkdir -p "$WORK/my"
[ "$(id -u)" = 0 ] && chown mysql "$WORK/my"
"${AS_MY[@]}" mariadb-install-db --no-defaults --datadir="$WORK/my/data" \
  --auth-root-authentication-method=normal --skip-test-db >/dev/null 2>&1
MP=$(free_port)
# What a sidecar needs: the binary log in row format, full images and
# metadata.
"${AS_MY[@]}" mariadbd --no-defaults --datadir="$WORK/my/data" \
  --socket="$WORK/my/sock" --pid-file="$WORK/my/pid" --port="$MP" \
  --bind-address=127.0.0.1 --skip-name-resolve --log-error="$WORK/my/log" \
  --tmpdir="$WORK/my" \
  --log-bin="$WORK/my/data/bin" --binlog-format=ROW --binlog-row-image=FULL \
  --binlog-row-metadata=FULL --server-id=1 2>>"$WORK/my/stderr" &
MYPID=$!
my() { mariadb --no-defaults -h 127.0.0.1 -P "$MP" -u root -N -B -e "$1"; }
for _ in $(seq 300); do my "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
PGDIR=$WORK/pg
mkdir -p "$PGDIR" && chmod 700 "$PGDIR"
[ "$(id -u)" = 0 ] && chown postgres "$WORK" "$PGDIR"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$PGDIR" -U postgres --auth=trust -N --locale=C >/dev/null
PP=$(free_port)
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$PGDIR" -l "$WORK/pg.log" -w -o \
  "-c listen_addresses=127.0.0.1 -c port=$PP -c unix_socket_directories=$WORK -c wal_level=logical -c track_commit_timestamp=on" \
  start >/dev/null
pg() { "$PGBIN/psql" -X -q -At -h 127.0.0.1 -p "$PP" -U postgres -d postgres -c "$1"; }

# The user the MariaDB sidecar runs as, with the privileges docs/mariadb.md
# lists.
my "CREATE DATABASE public; USE public;
    CREATE TABLE public.users (id bigint PRIMARY KEY, name text, score int) DEFAULT CHARSET utf8mb4;
    INSERT INTO public.users SELECT seq, CONCAT('user-', seq), seq % 100 FROM seq_1_to_10000;
    CREATE USER tally@'127.0.0.1' IDENTIFIED BY 'secret';
    GRANT SELECT, INSERT, UPDATE, DELETE ON public.* TO tally@'127.0.0.1';
    GRANT CREATE, SELECT, INSERT, UPDATE ON tally.* TO tally@'127.0.0.1';
    GRANT REPLICATION SLAVE, BINLOG MONITOR, BINLOG REPLAY ON *.* TO tally@'127.0.0.1';"
pg "CREATE TABLE users (id bigint PRIMARY KEY, name text, score int)"
echo "MariaDB on port $MP: 10,000 rows; PostgreSQL on port $PP: empty"

# start NAME FLAGS...: a sidecar; sets ADDR.
start() {
  local name=$1; shift
  "$TALLYD" --name "$name" --data-dir "$WORK/$name" --listen 127.0.0.1:0 \
    --table public.users --sync-interval 1s "$@" >/dev/null 2>"$WORK/$name.log" &
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

step "a sidecar next to each database, peering"
start side-pg --postgres "postgresql://postgres@127.0.0.1:$PP/postgres"; P=$ADDR
start side-maria --mariadb "mariadb://tally:secret@127.0.0.1:$MP/public" --peer "$P"; M=$ADDR
echo "side-maria $M (MariaDB), side-pg $P (PostgreSQL)"

same() {
  for _ in $(seq 300); do
    MM=$(my "SET SESSION group_concat_max_len = 1073741824; SELECT MD5(GROUP_CONCAT(CONCAT_WS(',', id, IFNULL(name, '\\\\N'), IFNULL(score, '\\\\N')) ORDER BY id SEPARATOR ';')) FROM public.users")
    MP5=$(pg "SELECT md5(string_agg(concat_ws(',', id, coalesce(name, '\\N'), coalesce(score::text, '\\N')), ';' ORDER BY id)) FROM users")
    if [ "$MM" = "$MP5" ]; then break; fi
    sleep 0.2
  done
  echo "MariaDB    md5 $MM"
  echo "PostgreSQL md5 $MP5"
  [ "$MM" = "$MP5" ]
}
step "the MariaDB rows reach PostgreSQL (each database's own md5 of its rows)"
same

step "application writes on both databases"
my "UPDATE public.users SET score = 1000 WHERE id = 17; DELETE FROM public.users WHERE id = 5"
pg "INSERT INTO users VALUES (20001, 'only-on-pg', 1); UPDATE users SET name = NULL WHERE id = 42"
same
"$TALLY" --node "$M" status | sed -n '/^  mariadb /,/^  KEYSPACE/p'

step "stopping the sidecars and the servers"
stop_nodes
stop_servers

step "next"
cat <<EOF2
A sidecar of your own: tallyd --mariadb URL --table DATABASE.TABLE next to
each server (its settings: log_bin, binlog_format=ROW, binlog_row_image=FULL,
binlog_row_metadata=FULL; the user's privileges as above). The docs:
docs/mariadb.md. Every test, as CI runs them: bash scripts/test.sh
EOF2
