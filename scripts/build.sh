#!/usr/bin/env bash
# Builds into ./build (Release with debug info) with the default compiler
# (GCC), with ccache when it is installed. Does not install anything: run
# scripts/install-deps.sh first on a fresh machine (the demos and the tests
# do). Idempotent; safe to run again.
#
#   scripts/build.sh             everything (libraries, tallyd, the CLI,
#                                tally-bench, every test program)
#   scripts/build.sh TARGET...   only those targets and what they need,
#                                e.g. `scripts/build.sh tallyd tally`
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build build -j "$(nproc)" "${targets[@]}"
