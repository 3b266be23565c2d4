#!/usr/bin/env bash
# Configures and builds parabench in build/ (Release, warnings on). Where
# ccache is installed (scripts/setup.sh installs it), compiles go through it:
# a second checkout or a rebuild after a branch switch reuses the objects.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  # Paths below the checkout's parent are hashed relative to the build
  # directory, so sibling checkouts share the cache.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${PARABENCH_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
