#!/usr/bin/env bash
# The main job, end to end: installs, builds, starts three tally nodes on
# the embedded store (loopback, free ports, temp data dirs), loads data,
# makes one node drift, shows `tally diff` finding exactly the drift,
# repairs it, shows the nodes equal, and lets the third node converge on
# its own through its peer sessions. Stops the nodes at the end, and on any
# failure or Ctrl-C, before it removes their data directories.
#
# TALLY_BUILD_DIR=DIR skips the install and the build and runs the binaries
# in DIR (the test of this script, tests/demo_test.sh, does).
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
WORK=$(mktemp -d -t tally-demo-XXXXXX)
# The nodes' PIDs. start() must run in this shell, never inside $(...): a
# subshell's additions to PIDS are lost, and the nodes with them.
PIDS=()
NAMES=()
# stop_nodes: SIGTERM to every node, then waits for each to exit (a clean
# stop closes the store), so that nothing still runs on the data directories.
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
cleanup() {
  stop_nodes >/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME [FLAGS...]: starts a node and sets ADDR to its address.
start() {
  local name=$1; shift
  "$TALLYD" --name "$name" --data-dir "$WORK/$name" --listen 127.0.0.1:0 \
    "$@" >/dev/null 2>"$WORK/$name.log" &
  PIDS+=($!)
  NAMES+=("$name")
  ADDR=
  for _ in $(seq 100); do
    ADDR=$(grep -o 'listening on [^ ]*' "$WORK/$name.log" 2>/dev/null | cut -d' ' -f3 || true)
    if [ -n "$ADDR" ]; then return; fi
    sleep 0.1
  done
  echo "node $name did not start:" >&2; cat "$WORK/$name.log" >&2; exit 1
}

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

start node-a; A=$ADDR
start node-b; B=$ADDR
start node-c --peer "$A" --sync-interval 1s; C=$ADDR
echo "node-a $A, node-b $B, node-c $C (peers with node-a every ~1s)"

step "load 100,000 rows into node-a"
"$TALLY" --node "$A" load --count 100000

step "copy node-a to the empty node-b with one repair"
"$TALLY" repair "$A" "$B"

step "make node-b drift: 3 updates, 2 deletes, 1 new key; node-a: 1 update"
"$TALLY" --node "$B" put key-17 changed-on-b
"$TALLY" --node "$B" put key-4242 changed-on-b
"$TALLY" --node "$B" put key-99999 changed-on-b
"$TALLY" --node "$B" del key-5
"$TALLY" --node "$B" del key-77777
"$TALLY" --node "$B" put only-on-b hello
"$TALLY" --node "$A" put key-123 changed-on-a

step "tally diff node-a node-b (exit 1: they differ)"
set +e
"$TALLY" diff "$A" "$B"
echo "exit code $?"
set -e

step "tally repair node-a node-b (last writer wins, both ways)"
"$TALLY" repair "$A" "$B"

step "tally diff node-a node-b (exit 0: equal)"
"$TALLY" diff "$A" "$B"
echo "exit code $?"

step "node-c converged on its own through its sessions with node-a"
for _ in $(seq 60); do
  if "$TALLY" diff "$A" "$C" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
"$TALLY" diff "$A" "$C" && echo "node-a and node-c are equal"
"$TALLY" --node "$C" status
# Its log's last session lines (none yet is no failure: the line of a
# session that has just ended may still be on its way to the file).
{ grep 'session peer' "$WORK/node-c.log" || true; } | tail -2

step "stopping the nodes"
stop_nodes

step "next"
cat <<EOF
The binaries: $TALLY_BUILD_DIR/node/tallyd (the node) and $TALLY_BUILD_DIR/tools/tally
(the CLI; tally --help). The docs: README.md, then docs/ (running nodes in
docs/running.md, the tally command in docs/cli.md).
Next to PostgreSQL, as a sidecar: bash scripts/pg-demo.sh
Every test, as CI runs them (builds the test programs too): bash scripts/test.sh
EOF
