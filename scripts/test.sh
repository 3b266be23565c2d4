#!/usr/bin/env bash
# The test commands.
#
#   bash scripts/test.sh          the quick suite: sets up, builds (warnings as
#                                 errors) and runs every ctest not labelled
#                                 `full` — unit tests, conformance, the teeth's
#                                 data-parallel and pipeline catches, MPI,
#                                 the CLI, the default job and
#                                 its gate against the committed baseline.
#                                 What a newcomer runs; <= 12 min on 2 cores.
#   bash scripts/test.sh --full   everything (what .ci/run calls, <= 45 min):
#                                 the PyTorch adapter's environment and the
#                                 DeepSpeed / Megatron-Core one on top of it
#                                 (scripts/torch/setup.sh, scripts/frameworks/
#                                 setup.sh: PyPI, once), every
#                                 ctest (the `full` label adds the teeth's
#                                 other catches and no-false-alarm seeds,
#                                 calibrate_test, cli_calibrate,
#                                 report_py, the PyTorch, DeepSpeed and
#                                 Megatron-Core adapters and the
#                                 two-node namespaces), then the sanitizer
#                                 runs (scripts/sanitize.sh: ASan+UBSan, TSan)
#                                 and a bounded run of every fuzz target
#                                 (scripts/fuzz.sh, 10 s each).
# Both end with ctest's summary line. Figures: docs/measurements.md#test-commands.
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
for a in "$@"; do
  case "$a" in
    --full) full=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$a' (use --full, or nothing for the quick suite)" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh
((full)) && bash scripts/torch/setup.sh >/dev/null
((full)) && bash scripts/frameworks/setup.sh >/dev/null
PARABENCH_CMAKE_ARGS="${PARABENCH_CMAKE_ARGS:-} -DPARABENCH_WERROR=ON" bash scripts/build.sh
# Where nvcc is, the CUDA kernels and the NCCL backend must have been built
# (CMake falls back quietly when it finds no CUDA or NCCL).
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  for lib in build/kernels/cuda/libpb_kernels_cuda.a build/harness/comm/libpb_harness_nccl.a; do
    [ -f "$lib" ] || { echo "test.sh: nvcc is here but $lib was not built (CMake found no CUDA toolkit or NCCL)" >&2; exit 1; }
  done
fi

ctest_args=(--output-on-failure -j "$(nproc)" --timeout 900)
((full)) || ctest_args+=(-LE full)
log="build/test-ctest.log"
status=0
(cd build && ctest "${ctest_args[@]}") 2>&1 | tee "$log" || status=$?
summary=$(grep -E '^[0-9]+% tests passed' "$log" | tail -n 1 || true)
((status == 0)) || { echo "test.sh: ctest failed: ${summary:-no summary}" >&2; exit 1; }
if ((full)); then
  bash scripts/sanitize.sh
  bash scripts/fuzz.sh --time 10 --out build-fuzz/test-out
fi
# ctest's summary last, so a reader (and CI) sees what ran.
echo "$summary"
