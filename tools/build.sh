#!/usr/bin/env bash
# Installs the Debian packages tally needs and builds everything (Release
# with debug info) into ./build with the default compiler (GCC). Uses ccache
# when it is installed. Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
cmake --build build -j "$(nproc)"
