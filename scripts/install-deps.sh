#!/usr/bin/env bash
# Installs the Debian 12 packages that tally's build, tests and benchmarks
# need. Idempotent: run it as often as you like (as root, or via sudo).
set -euo pipefail

packages=(
  cmake g++ make ninja-build pkg-config
  clang lld
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libleveldb-dev libsnappy-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libssl-dev openssl
  nlohmann-json3-dev libcpp-httplib-dev
  # tallyd's config file (node/config/config_file.h).
  libinih-dev
  # The PostgreSQL backend: libpq to build, the server for the tests'
  # throwaway clusters, pg_comparator as the benchmark's baseline.
  libpq-dev postgresql-15 postgresql-comparator
  # The MariaDB/MySQL backend: Connector/C to build, the server for the
  # tests' throwaway servers (the package's own service is not used).
  libmariadb-dev mariadb-server
  # The MariaDB benchmark's baseline (pt-table-sync), and an outside
  # workload for the MariaDB sidecar's tests (sysbench).
  percona-toolkit sysbench
  # Running as a service: sd_notify (libsystemd), man pages from --help
  # (help2man), and what the install test checks them with.
  libsystemd-dev help2man systemd man-db groff-base
  # The status page's test loads it in a real browser, headless.
  chromium
  # The monitoring files' check reads the dashboard's JSON and the rules'
  # expressions (packaging/monitoring_test.sh).
  python3
  # Not `prometheus`: it would install and start the Prometheus server. The
  # tests' promtool comes out of its package unpacked, not installed
  # (scripts/fetch-promtool.sh, run by scripts/test.sh).
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=900 update
$SUDO apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}"
