#!/usr/bin/env bash
# Configures and builds parabench in build/ (Release, warnings on).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${PARABENCH_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
