#!/usr/bin/env bash
# Sanitizer runs (part of the test command): for each of the CMake presets
# asan (AddressSanitizer with leak checking + UndefinedBehaviorSanitizer, UB
# aborts) and tsan (ThreadSanitizer: the local backend runs ranks as threads,
# so every collective's real concurrency is checked), builds parabench and
# the harness unit tests in build-<preset>/, runs the harness tests
# (ctest --preset <preset>), then a reduced conformance matrix on the local
# backend with the sanitized binary: every strategy family at its smallest
# size (data parallel with several shardings, pipeline, tensor, sequence,
# context and expert parallel, composed meshes), fp32, two steps. Any sanitizer report fails the run
# (halt_on_error) with exit 1; the reports are in build-<preset>/sanitize-*.log.
#
#   scripts/sanitize.sh              asan then tsan
#   scripts/sanitize.sh tsan         one preset
set -euo pipefail
cd "$(dirname "$0")/.."

presets=("$@")
((${#presets[@]})) || presets=(asan tsan)
for p in "${presets[@]}"; do
  [[ "$p" == asan || "$p" == tsan ]] || { echo "sanitize.sh: unknown preset '$p' (asan, tsan)" >&2; exit 2; }
done

# The harness unit tests are the tests the presets select (^harness_); each
# test's name is its target's (parabench_test), listed after configuring.

# The reduced matrix: the smallest point of each strategy family (data
# parallel with every sharding, pipeline, tensor, sequence and context
# parallel, expert parallel with both capacity modes, a composed mesh).
matrix_asan=(--dp 2 --precision fp32 --shard none zero1 zero3 hzero
             --schedule 1f1b interleaved --pp 2 --tp 2 --cp 2 --ep 2 --moe-capacity global local --steps 2)
# TSan runs 5-15x slower: the same families with fewer variants.
matrix_tsan=(--dp 2 --precision fp32 --shard none zero3
             --schedule 1f1b --pp 2 --tp 2 --cp 2 --ep 2 --moe-capacity global --steps 2)

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
export OPENBLAS_NUM_THREADS=1

for p in "${presets[@]}"; do
  dir="build-$p"
  start=$SECONDS
  cmake --preset "$p" >/dev/null
  mapfile -t harness_tests < <(ctest --preset "$p" -N | sed -n 's/^ *Test *#[0-9]*: *\(harness_[a-z0-9_]*\)$/\1/p')
  ((${#harness_tests[@]})) || { echo "sanitize.sh: $p: no harness tests configured" >&2; exit 1; }
  if ! nice -n 5 cmake --build --preset "$p" --target parabench "${harness_tests[@]}" >"$dir/sanitize-build.log" 2>&1; then
    tail -n 40 "$dir/sanitize-build.log" >&2
    echo "sanitize.sh: $p build failed (log: $dir/sanitize-build.log)" >&2
    exit 1
  fi
  built=$((SECONDS - start))
  if ! ctest --preset "$p" >"$dir/sanitize-ctest.log" 2>&1; then
    tail -n 60 "$dir/sanitize-ctest.log" >&2
    echo "sanitize.sh: $p harness tests failed (log: $dir/sanitize-ctest.log)" >&2
    exit 1
  fi
  tested=$((SECONDS - start - built))
  runs="$dir/sanitize-runs"
  rm -rf "$runs"
  status=0
  matrix="matrix_$p[@]"
  "$dir/parabench" check "${!matrix}" --backend local --out "$runs" >"$dir/sanitize-check.log" 2>&1 || status=$?
  if ((status != 0)) || grep -qE 'ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:' "$dir/sanitize-check.log"; then
    grep -E -A 30 'Sanitizer|runtime error:' "$dir/sanitize-check.log" | head -60 >&2 || tail -n 40 "$dir/sanitize-check.log" >&2
    echo "sanitize.sh: $p conformance matrix failed (exit $status; log: $dir/sanitize-check.log)" >&2
    exit 1
  fi
  rows=$(grep -h -c '' "$runs"/*/conformance.csv 2>/dev/null | awk '{s+=$1-1} END {print s+0}')
  echo "sanitize.sh: $p clean: build ${built}s, ${#harness_tests[@]} harness tests ${tested}s, conformance matrix $rows rows $((SECONDS - start - built - tested))s"
done
