#!/usr/bin/env bash
# Installs, builds and runs every test. Exits non-zero on any failure; the
# last lines are ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 600
