#!/usr/bin/env bash
# Installs the Debian packages tally needs and builds everything (Release
# with debug info) into ./build. Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
