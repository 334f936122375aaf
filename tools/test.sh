#!/usr/bin/env bash
# Installs, builds and runs every test. Exits non-zero on any failure; the
# last lines are ctest's summary.
#
# Two builds: GCC into ./build, whose tests run, and Clang into
# ./build-clang, which only compiles every target, with Clang's lock
# checking (-Wthread-safety, see CMakeLists.txt) as errors: a field read
# without the mutex its ABSL_GUARDED_BY names fails CI. The tests run once,
# so the Clang build adds its compile time and nothing else. Both use ccache
# when it is installed.
#
# The metrics test checks a live node's /metrics with Prometheus's promtool:
# tools/fetch-promtool.sh provides it without installing Prometheus (whose
# package would start a server), and TALLY_PROMTOOL names it, which makes
# that check required: it fails, not skips, when promtool cannot run.
#
# The PostgreSQL tests start their own throwaway servers
# (support/pg_cluster.h). TALLY_REQUIRE_POSTGRES=1 makes each of them FAIL,
# not skip, when PostgreSQL is missing, so a machine without it never reads
# green; the check below says so up front.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
export TALLY_REQUIRE_POSTGRES=1
if [ ! -x /usr/lib/postgresql/15/bin/initdb ]; then
  echo "test.sh: PostgreSQL 15 is not installed (tools/install-deps.sh installs it)" >&2
  exit 1
fi
if ! TALLY_PROMTOOL=$(bash tools/fetch-promtool.sh build/promtool); then
  echo "test.sh: cannot provide promtool (tools/fetch-promtool.sh)" >&2
  exit 1
fi
export TALLY_PROMTOOL
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# Unoptimized and without debug info: the lock analysis runs in the front
# end, so the code generation is all this build would otherwise spend
# (about 7 minutes on 2 cores from scratch, against about 10 at -O2 -g).
cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g0" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-Werror=thread-safety \
  "${launcher[@]}" >/dev/null
cmake --build build-clang -j "$(nproc)"
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 600
