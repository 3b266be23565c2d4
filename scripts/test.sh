#!/usr/bin/env bash
# Sets up, builds and runs every test (the command .ci/run calls).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600
