#!/usr/bin/env bash
# Installs, builds and runs every test, then the sanitizer subsets.
# Exits non-zero on any failure.
#
# Three builds. Clang into ./build (scripts/build.sh: -O2 with line tables,
# the lock annotations checked as errors, so that a field read without the
# mutex its ABSL_GUARDED_BY names fails CI); all its tests run. Clang with
# ThreadSanitizer into ./build-tsan (the `tsan` preset of CMakePresets.json),
# which builds only the thread tests: the unit tests whose threads meet in
# tally's own code (the worker pool, the bandwidth limiter, the store's write
# queue and components, the backend seam, the TCP proxy), run with
# halt_on_error (any report fails CI). Not those over gRPC: Debian's gRPC is
# not instrumented, and the objects its completion queues hand from thread
# to thread read as hundreds of races per test. And Clang with
# AddressSanitizer and UndefinedBehaviorSanitizer into ./build-asan-ubsan
# (the `asan-ubsan` preset), which builds only the tests of the code that
# decodes bytes it did not write (PostgreSQL's messages, the row encoding,
# digests, the tree) and the storage tests (the store's records on disk,
# damage, recovery); any report fails CI.
# Every build uses ccache when it is installed.
#
# The metrics test checks a live node's /metrics with Prometheus's promtool:
# scripts/fetch-promtool.sh provides it without installing Prometheus (whose
# package would start a server), and TALLY_PROMTOOL names it, which makes
# that check required: it fails, not skips, when promtool cannot run.
#
# The PostgreSQL and MariaDB tests start their own throwaway servers
# (support/pg_cluster.h, support/mariadb_server.h). TALLY_REQUIRE_POSTGRES=1
# and TALLY_REQUIRE_MARIADB=1 make each of them FAIL, not skip, when the
# server is missing, so a machine without it never reads green; the checks
# below say so up front.
#
# The last lines printed name every test that failed (ctest's own summary
# of the main run scrolls away behind the sanitizer runs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
# How long each phase took, printed at the end (CI must stay under 30
# minutes on two cores; these say where the time goes).
phases=()
phase_start=$SECONDS
phase_done() {
  phases+=("$1 $(((SECONDS - phase_start) / 60))m$(((SECONDS - phase_start) % 60))s")
  phase_start=$SECONDS
}
bash "$here/install-deps.sh"
phase_done "install"
bash "$here/build.sh"
phase_done "build"
export TALLY_REQUIRE_POSTGRES=1 TALLY_REQUIRE_MARIADB=1
if [ ! -x /usr/lib/postgresql/15/bin/initdb ]; then
  echo "test.sh: PostgreSQL 15 is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
if [ ! -x /usr/sbin/mariadbd ]; then
  echo "test.sh: MariaDB is not installed (scripts/install-deps.sh installs mariadb-server)" >&2
  exit 1
fi
if ! TALLY_PROMTOOL=$(bash "$here/fetch-promtool.sh" build/promtool); then
  echo "test.sh: cannot provide promtool (scripts/fetch-promtool.sh)" >&2
  exit 1
fi
export TALLY_PROMTOOL
# The sanitizer builds run while the main tests do, at the lowest CPU
# priority: those tests mostly wait (on servers, sessions, timeouts), and
# the builds take the CPU they leave (a cold CI run took 31 minutes with
# the builds one after the other, over its 30).
sanitizer_log=build/sanitizer-builds.log
(
  for preset in tsan asan-ubsan; do
    cmake --preset "$preset" >/dev/null
    nice -n 19 cmake --build --preset "$preset" -j "$(nproc)"
  done
) > "$sanitizer_log" 2>&1 &
sanitizer_builds=$!
status=0
failed=()
# A test that fails is run once more (the multi-process tests share two
# cores with the sanitizer builds, and a timing-sensitive one can lose a
# race it wins alone); it still fails CI when it fails twice, and every
# test that needed the second run is named at the end, so that a flaky
# test is seen, not hidden.
main_log=build/main-tests.log
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600 \
   --repeat until-pass:2) 2>&1 | tee "$main_log" || true
if ! grep -q "100% tests passed" "$main_log"; then
  status=8
  failed+=("main: $(tr '\n' ' ' < build/Testing/Temporary/LastTestsFailed.log 2>/dev/null)")
fi
phase_done "main tests"
retried=$(grep -E '\*\*\*(Failed|Timeout|Exception)|\(Failed\)|\(Timeout\)' "$main_log" |
  sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' | sort -u | tr '\n' ' ' || true)
if ! wait "$sanitizer_builds"; then
  tail -50 "$sanitizer_log" >&2
  echo "test.sh: a sanitizer build failed (whole log: $sanitizer_log)" >&2
  for f in "${failed[@]}"; do echo "test.sh: failed in $f" >&2; done
  exit 1
fi
phase_done "sanitizer builds (after the main tests)"
for preset in tsan asan-ubsan; do
  ctest --preset "$preset" -j "$(nproc)" || {
    status=$?
    failed+=("$preset: see its output above")
  }
done
phase_done "sanitizer tests"
echo "test.sh: took ${phases[*]/%/,} in all $((SECONDS / 60))m$((SECONDS % 60))s" >&2
if [ -n "$retried" ]; then
  echo "test.sh: failed once, then run again: $retried" >&2
fi
for f in "${failed[@]}"; do echo "test.sh: failed in $f" >&2; done
exit "$status"
