#!/usr/bin/env bash
# Builds into ./build with Clang, optimized (-O2) with line tables (-g1: a
# crash's backtrace names files and lines), with ccache when it is
# installed. Clang, because it checks the lock annotations (a field read
# without the mutex its ABSL_GUARDED_BY names fails the build) and compiles
# this tree in about half the time GCC takes with full debug info. CXX=g++
# picks GCC for a new build directory. Does not install anything: run
# scripts/install-deps.sh first on a fresh machine (the demos and the tests
# do). Idempotent; safe to run again.
#
#   scripts/build.sh             everything (libraries, tallyd, the CLI,
#                                tally-bench, every test program)
#   scripts/build.sh TARGET...   only those targets and what they need,
#                                e.g. `scripts/build.sh tallyd tally`
set -euo pipefail
cd "$(dirname "$0")/.."
options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ ! -f build/CMakeCache.txt ]; then
  # The first configure chooses the compiler and the flags; later runs keep
  # what the cache holds.
  options+=(-G Ninja "-DCMAKE_CXX_COMPILER=${CXX:-clang++}"
            "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
  if command -v ccache >/dev/null; then
    options+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  # LLVM's linker: the ~60 programs link in a fraction of the time.
  if command -v ld.lld >/dev/null; then
    options+=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld)
  fi
fi
cmake -S . -B build "${options[@]}" >/dev/null
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build build -j "$(nproc)" "${targets[@]}"
