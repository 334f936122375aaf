#!/usr/bin/env bash
# Provides promtool, Prometheus's checker of metric expositions, for the
# tests (tests/watching_test.cc runs `promtool check metrics` on a live
# node's /metrics), without installing Prometheus: Debian's `prometheus`
# package, the one that ships promtool, also installs and starts the
# Prometheus server, which a build or an operator's machine must not get as
# a side effect. So the package is downloaded (apt-get download; nothing is
# installed) and only its promtool, a static binary, is unpacked into DIR.
#
#   promtool=$(bash scripts/fetch-promtool.sh build/promtool)
#
# Prints the absolute path of a working promtool on stdout: /usr/bin/promtool
# when the machine already has it, else DIR/promtool (downloaded once; a
# later run reuses it). Exits non-zero, saying why, when neither works.
set -euo pipefail
dir=${1:?usage: scripts/fetch-promtool.sh DIR}

if [ -x /usr/bin/promtool ] && /usr/bin/promtool --version >/dev/null 2>&1; then
  echo /usr/bin/promtool
  exit 0
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
tool="$dir/promtool"
if [ ! -x "$tool" ] || ! "$tool" --version >/dev/null 2>&1; then
  work=$(mktemp -d "$dir/prometheus-deb.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  # apt-get download needs the package lists; without them (a machine where
  # install-deps.sh found everything installed and never updated) update
  # them once and try again.
  if ! (cd "$work" && apt-get download prometheus) >&2; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get -o DPkg::Lock::Timeout=900 update >&2
    (cd "$work" && apt-get download prometheus) >&2
  fi
  deb=$(ls "$work"/prometheus_*.deb)
  # Only promtool: not the server, not the package's scripts.
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" ./usr/bin/promtool
  mv "$work/usr/bin/promtool" "$tool"
fi
if ! "$tool" --version >/dev/null 2>&1; then
  echo "fetch-promtool: $tool does not run" >&2
  exit 1
fi
echo "$tool"
