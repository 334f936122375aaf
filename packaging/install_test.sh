#!/usr/bin/env bash
# Installs the build into a temporary prefix as `cmake --install` would on a
# machine and checks what an operator gets: every file in its place, the
# systemd unit accepted by systemd-analyze verify, man pages that render,
# the completion that loads and completes, and tallyd starting from the
# installed sample config (with the name, data dir and ports overridden).
# Usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$1
tmp=$(mktemp -d)
node_pid=""
cleanup() {
  if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"

for f in bin/tallyd bin/tally bin/tally-pg bin/tally-bench \
         share/man/man8/tallyd.8 share/man/man1/tally.1 share/man/man1/tally-bench.1 \
         share/man/man5/tallyd.conf.5 \
         share/bash-completion/completions/tally \
         share/bash-completion/completions/tallyd \
         etc/tally/tallyd.conf share/doc/tally/examples/tallyd.conf.example \
         lib/systemd/system/tallyd.service \
         share/tally/monitoring/tally-alerts.yml \
         share/tally/monitoring/tally-alerts.test.yml \
         share/tally/monitoring/tally-dashboard.json; do
  [ -e "$prefix/$f" ] || fail "missing $f after cmake --install"
done
"$prefix/bin/tallyd" --version | grep -q '^tallyd [0-9]' || fail "installed tallyd --version"
# Installed binaries carry no debug info; it is beside them under
# lib/debug, linked by .gnu_debuglink, and has what gdb needs.
for b in tallyd tally tally-pg tally-bench; do
  readelf -S "$prefix/bin/$b" | grep -q '\.debug_info' && fail "bin/$b still has its debug info"
  readelf -S "$prefix/bin/$b" | grep -q '\.gnu_debuglink' || fail "bin/$b has no .gnu_debuglink"
  debug="$prefix/lib/debug$prefix/bin/$b.debug"
  [ -s "$debug" ] || fail "missing $debug"
  readelf -S "$debug" | grep -q '\.debug_info' || fail "$debug has no debug info"
done
size=$(stat -c %s "$prefix/bin/tallyd")
[ "$size" -lt 12000000 ] || fail "installed tallyd is $size bytes: not stripped?"
if command -v gdb > /dev/null; then
  gdb -batch -iex "set debug-file-directory $prefix/lib/debug" -ex 'info line main' \
    "$prefix/bin/tallyd" 2>&1 | grep -q 'tallyd.cc' || fail "gdb does not find tallyd's debug info"
fi
# The installed tally compares PostgreSQL tables through the installed
# tally-pg: a server that is not there is a connection error, not a
# missing program.
pg_out=$("$prefix/bin/tally" diff postgresql://127.0.0.1:1/a postgresql://127.0.0.1:1/b --table t 2>&1) && fail "diff of two unreachable databases succeeded"
echo "$pg_out" | grep -qi 'tally-pg' && fail "installed tally cannot run tally-pg: $pg_out"
echo "$pg_out" | grep -qiE 'connect|connection' || fail "installed tally diff postgresql:// said: $pg_out"

# The unit names the tallyd and the config of the prefix it was installed
# under (--prefix after configure), as they are.
unit="$prefix/lib/systemd/system/tallyd.service"
grep -qx "ExecStart=$prefix/bin/tallyd --config $prefix/etc/tally/tallyd.conf" "$unit" \
  || fail "the unit does not run this prefix's tallyd with its config: $(grep ^ExecStart "$unit")"
grep -q '^Type=notify$' "$unit" || fail "the unit is not Type=notify"
grep -q '^ExecReload=/bin/kill -HUP' "$unit" || fail "the unit's reload sends no SIGHUP"
# A reload checks the config before it signals: a bad file fails it.
grep -q "^ExecReload=$prefix/bin/tallyd --check-config --config " "$unit" \
  || fail "the unit's reload does not run tallyd --check-config first"
command -v systemd-analyze > /dev/null || fail "systemd-analyze is not installed (scripts/install-deps.sh installs systemd)"
# Documentation= is checked with man(1): the pages just installed.
if ! MANPATH="$prefix/share/man" SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$unit" > "$tmp/verify.log" 2>&1; then
  cat "$tmp/verify.log" >&2
  fail "systemd-analyze verify refused the unit"
fi
# Warnings about the unit itself count as failures too (not those about
# other units of this machine).
if grep -i "tallyd.service" "$tmp/verify.log"; then
  fail "systemd-analyze verify warned about the unit"
fi

# Man pages: troff that renders and names the program and its flags.
for page in share/man/man8/tallyd.8 share/man/man1/tally.1 share/man/man5/tallyd.conf.5; do
  head -c 400 "$prefix/$page" | grep -q '^\.TH ' || fail "$page is not a man page"
done
if command -v groff > /dev/null; then
  groff -man -Tascii -P-cbou "$prefix/share/man/man8/tallyd.8" 2>/dev/null | grep -q -- 'data-dir' \
    || fail "tallyd(8) does not render its flags"
  groff -man -Tascii -P-cbou "$prefix/share/man/man5/tallyd.conf.5" 2>/dev/null | grep -q -- 'sync-interval' \
    || fail "tallyd.conf(5) does not render its settings"
fi
grep -q 'repair' "$prefix/share/man/man1/tally.1" || fail "tally(1) lacks the commands"

# tallyd's completion (from the settings table): flags, and directories
# after --data-dir.
mkdir -p "$tmp/dirs/store-here"
out=$(cd "$tmp/dirs" && bash -c "
  source '$prefix/share/bash-completion/completions/tallyd'
  COMP_WORDS=(tallyd --sync-int); COMP_CWORD=1; _tallyd; echo \"\${COMPREPLY[*]}\"
  COMP_WORDS=(tallyd --data-dir st); COMP_CWORD=2; _tallyd; echo \"\${COMPREPLY[*]}\"
  COMP_WORDS=(tallyd --check); COMP_CWORD=1; _tallyd; echo \"\${COMPREPLY[*]}\"
  COMP_WORDS=(tallyd --data-dir = st); COMP_CWORD=3; _tallyd; echo \"\${COMPREPLY[*]}\"
  COMP_WORDS=(tallyd --data-dir=st); COMP_CWORD=1; _tallyd; echo \"\${COMPREPLY[*]}\"
  COMP_WORDS=(tallyd --sync-writes = f); COMP_CWORD=3; _tallyd; echo \"\${COMPREPLY[*]}\"
")
echo "$out" | sed -n 1p | grep -qx -- '--sync-interval' || fail "tallyd completion of --sync-int gave: $out"
echo "$out" | sed -n 2p | grep -qx 'store-here' || fail "tallyd completion after --data-dir gave: $out"
echo "$out" | sed -n 3p | grep -qx -- '--check-config' || fail "tallyd completion of --check gave: $out"
# --flag=value: as bash splits it at '=' by default, and as one word.
echo "$out" | sed -n 4p | grep -qx 'store-here' || fail "tallyd completion after --data-dir= gave: $out"
echo "$out" | sed -n 5p | grep -qx -- '--data-dir=store-here' || fail "tallyd completion of --data-dir=st gave: $out"
echo "$out" | sed -n 6p | grep -qx 'false' || fail "tallyd completion after --sync-writes= gave: $out"

# Completion: loads, completes commands and flags.
out=$(bash -c "
  source '$prefix/share/bash-completion/completions/tally'
  COMP_WORDS=(tally re); COMP_CWORD=1; _tally; echo \"\${COMPREPLY[*]}\"
  COMP_WORDS=(tally diff --key); COMP_CWORD=2; _tally; echo \"\${COMPREPLY[*]}\"
")
echo "$out" | sed -n 1p | grep -q 'repair' || fail "completion of 're' gave: $out"
echo "$out" | sed -n 1p | grep -q 'recover' || fail "completion of 're' gave: $out"
echo "$out" | sed -n 2p | grep -q -- '--keyspace=' || fail "completion of '--key' gave: $out"

# The installed sample config as it is: refused for its placeholder name
# (a store keeps its first name for good).
if "$prefix/bin/tallyd" --check-config --config "$prefix/etc/tally/tallyd.conf" > /dev/null 2> "$tmp/check.log"; then
  fail "tallyd --check-config took the sample config's placeholder name"
fi
grep -q "sample config's placeholder" "$tmp/check.log" || { cat "$tmp/check.log" >&2; fail "the placeholder's refusal does not say so"; }
# With a name of its own it is valid, and --check-config shows what it sets.
checked=$("$prefix/bin/tallyd" --check-config --config "$prefix/etc/tally/tallyd.conf" --name site-a/db-1 2> "$tmp/check.log") \
  || { cat "$tmp/check.log" >&2; fail "tallyd --check-config refused the sample config"; }
echo "$checked" | grep -qx 'data-dir = /var/lib/tally' || fail "--check-config of the sample config printed: $checked"
echo "$checked" | grep -qx 'metrics-listen = 127.0.0.1:9400' || fail "--check-config of the sample config printed: $checked"

# tallyd runs from the installed sample config, its stderr standing in for
# the journal's stream as systemd names it ($JOURNAL_STREAM, DEV:INO): each
# line then starts with its syslog priority.
: > "$tmp/tallyd.log"
journal_stream=$(stat -c '%d:%i' "$tmp/tallyd.log")
JOURNAL_STREAM=$journal_stream "$prefix/bin/tallyd" --config "$prefix/etc/tally/tallyd.conf" --name install/test \
  --data-dir "$tmp/data" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --sync-writes false 2>> "$tmp/tallyd.log" &
node_pid=$!
for _ in $(seq 1 100); do
  grep -q 'listening on' "$tmp/tallyd.log" && break
  kill -0 "$node_pid" 2>/dev/null || { cat "$tmp/tallyd.log" >&2; fail "tallyd exited with the sample config"; }
  sleep 0.1
done
grep -q 'listening on' "$tmp/tallyd.log" || fail "tallyd did not start from the sample config"
grep -q '^<6>.*listening on' "$tmp/tallyd.log" || fail "under the journal, an info line lacks its priority: $(head -3 "$tmp/tallyd.log")"
grep -v '^<[0-7]>' "$tmp/tallyd.log" | grep -q . && fail "under the journal, a line lacks its priority: $(grep -v '^<[0-7]>' "$tmp/tallyd.log" | head -3)"
kill "$node_pid"
wait "$node_pid" || fail "tallyd did not stop cleanly"
node_pid=""
echo "install_test: ok"
