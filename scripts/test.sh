#!/usr/bin/env bash
# Sets up, builds and runs every test (the command .ci/run calls): the build
# with warnings as errors (C++ and, where nvcc is found, CUDA), the ctest
# suite, then the sanitizer runs (ASan+UBSan and TSan builds: harness tests and
# a reduced conformance matrix, scripts/sanitize.sh), then a bounded run of
# every fuzz target (10 s each, scripts/fuzz.sh). The ctest suite includes the
# PyTorch adapter's run (torch_adapter), whose environment
# scripts/torch/setup.sh installs once (PyPI, about 5 GB) and reuses. About
# 26 to 33 minutes on 2 cores; 30.6 on a fresh machine, installing the
# dependencies included (README, "The test command's
# length").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/torch/setup.sh >/dev/null
PARABENCH_CMAKE_ARGS="${PARABENCH_CMAKE_ARGS:-} -DPARABENCH_WERROR=ON" bash scripts/build.sh
# Where nvcc is, the CUDA kernels and the NCCL backend must have been built
# (CMake falls back quietly when it finds no CUDA or NCCL).
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  for lib in build/kernels/cuda/libpb_kernels_cuda.a build/harness/comm/libpb_harness_nccl.a; do
    [ -f "$lib" ] || { echo "test.sh: nvcc is here but $lib was not built (CMake found no CUDA toolkit or NCCL)" >&2; exit 1; }
  done
fi
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600)
bash scripts/sanitize.sh
bash scripts/fuzz.sh --time 10 --out build-fuzz/test-out
