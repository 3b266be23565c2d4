#!/usr/bin/env bash
# Builds the libFuzzer targets (suites/fuzz) in build-fuzz/ with clang++-14,
# ASan and UBSan (RelWithDebInfo, -DPARABENCH_FUZZ=ON), then runs each target
# on a scratch copy of its committed seed corpus, suites/fuzz/corpus/<name>/
# (new inputs go to build-fuzz/fuzz-out/<name>/corpus, never into the source
# tree), with its dictionary when there is one. Prints executions, exec/s and
# coverage per target. Exit 1 if any target found a crash, sanitizer report,
# broken invariant, leak, timeout (-timeout=10) or out-of-memory
# (-rss_limit_mb=2048); the reproducer is build-fuzz/fuzz-out/<name>/crash-*
# (or timeout-*, oom-*, leak-*) and the log beside it; rerun it with
# build-fuzz/fuzz/fuzz_<name> FILE.
#
#   scripts/fuzz.sh                      every target, 20 s each
#   scripts/fuzz.sh --time 300 csv       one target, 5 minutes
#   scripts/fuzz.sh --runs 10000000      long runs: 10M executions each (no time
#                                        limit unless --time is given too)
#   scripts/fuzz.sh --out DIR            outputs in DIR/<name> instead (so a
#                                        bounded run leaves a long one alone)
#   scripts/fuzz.sh --fork N ...         libFuzzer's fork mode: N worker
#                                        processes share one corpus; --runs
#                                        counts the executions of all of them
#   scripts/fuzz.sh --resume DIR T       a campaign continued: target T starts
#                                        from the corpus an earlier run left
#                                        in DIR/T/corpus (plus the seeds), so
#                                        long campaigns can span sessions
# Builds and runs niced, two build jobs at most. Env: PARABENCH_FUZZ_CXX
# (default clang++-14).
set -euo pipefail
cd "$(dirname "$0")/.."

all=(config run_spec_text safetensors csv schema_json schema_csv trace machine checkpoint)
seconds=20
timed=""
runs=""
outdir=""
fork=""
resume=""
targets=()
while (($#)); do
  case "$1" in
    --time) seconds="$2"; timed=1; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --out) outdir="$2"; shift 2 ;;
    --fork) fork="$2"; shift 2
            [[ "$fork" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --fork needs a positive worker count, got '$fork'" >&2; exit 2; } ;;
    --resume) resume="$2"; shift 2
              [[ -d "$resume" ]] || { echo "fuzz.sh: --resume: no directory '$resume'" >&2; exit 2; } ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (--time S, --runs N, --out DIR, --fork N, --resume DIR, target names: ${all[*]})" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (targets: ${all[*]})" >&2; exit 2; }
done

build=build-fuzz
outdir="${outdir:-$build/fuzz-out}"
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="${PARABENCH_FUZZ_CXX:-clang++-14}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARABENCH_FUZZ=ON >/dev/null
echo "fuzz.sh: building ${targets[*]} in $build/ (log: $build/fuzz-build.log)"
if ! nice -n 10 cmake --build "$build" -j 2 --target "${targets[@]/#/fuzz_}" >"$build/fuzz-build.log" 2>&1; then
  tail -n 40 "$build/fuzz-build.log" >&2
  exit 1
fi

limit=(-max_total_time="$seconds")
[[ -n "$runs" ]] && limit=(-runs="$runs")
[[ -n "$runs" && -n "$timed" ]] && limit+=(-max_total_time="$seconds")
failed=()
for t in "${targets[@]}"; do
  out="$outdir/$t"
  if [[ -n "$resume" ]]; then  # checked before $out is emptied
    [[ -d "$resume/$t/corpus" ]] || { echo "fuzz.sh: --resume: no corpus $resume/$t/corpus" >&2; exit 2; }
    [[ "$(realpath -m "$resume/$t")" != "$(realpath -m "$out")" ]] ||
      { echo "fuzz.sh: --resume and --out name the same directory ($out): it would be emptied first" >&2; exit 2; }
  fi
  rm -rf "$out"
  mkdir -p "$out/corpus"
  cp -R "suites/fuzz/corpus/$t/." "$out/corpus/"
  if [[ -n "$resume" ]]; then
    cp -R "$resume/$t/corpus/." "$out/corpus/"
    echo "fuzz.sh: $t resumes from $resume/$t/corpus ($(ls "$resume/$t/corpus" | wc -l) inputs)"
  fi
  args=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/" "${limit[@]}")
  [[ -f "suites/fuzz/$t.dict" ]] && args+=(-dict="suites/fuzz/$t.dict")
  [[ -n "$fork" ]] && args+=(-fork="$fork")
  start=$SECONDS
  status=0
  nice -n 10 "$build/fuzz/fuzz_$t" "${args[@]}" "$out/corpus" >"$out/log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/log" | tail -1)
  if [[ -n "$fork" ]]; then  # fork mode prints no final stats: its last status line counts all workers
    execs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$out/log" | tail -1)
    rate=$(( ${execs:-0} / (SECONDS - start > 0 ? SECONDS - start : 1) ))
  fi
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$out/log" | tail -1 || true)
  printf '%-14s %10s execs  %6s exec/s  %4ss  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$((SECONDS - start))" "${cov:-cov: ?}"
  if ((status != 0)); then
    failed+=("$t")
    echo "fuzz.sh: $t FAILED (exit $status); log: $out/log" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz invariant|.*runtime error)|Test unit written to' "$out/log" | head -5 >&2 || true
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: failures in: ${failed[*]}" >&2
  exit 1
fi
