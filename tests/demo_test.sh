#!/usr/bin/env bash
# DemoStopsItsNodes: scripts/demo.sh, run as the README's quick start runs it
# (but on the binaries already built, TALLY_BUILD_DIR), must leave no tallyd
# running and no data directory behind, and its nodes must have stopped
# cleanly before their directories were removed.
#
#   bash tests/demo_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SOURCE_DIR=$1
BUILD_DIR=$2
# The demo's mktemp puts its work directory under TMPDIR: a directory of our
# own tells this demo's nodes from every other tallyd on the machine.
export TMPDIR
TMPDIR=$(mktemp -d -t tally-demo-test-XXXXXX)
leftovers() {
  # Processes whose command line names our TMPDIR (the nodes' --data-dir),
  # read from /proc: procps (pgrep, ps) is not in a minimal Debian.
  local cmdline pid
  for cmdline in /proc/[0-9]*/cmdline; do
    pid=${cmdline#/proc/}
    pid=${pid%/cmdline}
    if { tr '\0' ' ' <"$cmdline"; } 2>/dev/null | grep -q -F -- "--data-dir $TMPDIR/"; then
      echo "$pid"
    fi
  done
}
finish() {
  for pid in $(leftovers); do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$TMPDIR"
}
trap finish EXIT

out=$TMPDIR/demo.out
code=0
TALLY_BUILD_DIR=$BUILD_DIR bash "$SOURCE_DIR/scripts/demo.sh" >"$out" 2>&1 || code=$?
if [ "$code" -ne 0 ]; then
  echo "FAIL: scripts/demo.sh exited $code:"; tail -40 "$out"; exit 1
fi

failed=0
left=$(leftovers)
if [ -n "$left" ]; then
  echo "FAIL: tallyd still running after the demo said it stopped them:"
  for pid in $left; do
    echo "  $pid: $({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null)"
  done
  failed=1
fi
if compgen -G "$TMPDIR/tally-demo-*" >/dev/null; then
  echo "FAIL: the demo left its work directory behind:"; ls -d "$TMPDIR"/tally-demo-*
  failed=1
fi
# Each of the three nodes reports its own clean stop (exit code 0).
stopped=$(grep -c 'stopped, exit code 0$' "$out" || true)
if [ "$stopped" -ne 3 ]; then
  echo "FAIL: expected 3 nodes stopped with exit code 0, saw $stopped:"
  tail -20 "$out"
  failed=1
fi
if [ "$failed" -eq 0 ]; then echo "PASS: the demo stopped its 3 nodes"; fi
exit "$failed"
