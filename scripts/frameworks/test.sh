#!/usr/bin/env bash
# One conformance case of the DeepSpeed / Megatron-Core adapters (a ctest of
# suites/frameworks.cmake): export the canonical model, train it with a
# framework adapter (2 processes over gloo), and have `parabench verify`
# judge the trace.
#   scripts/frameworks/test.sh PARABENCH WORKDIR EXPECT "EXPORT SETS" ADAPTER ARGS...
# EXPECT: `pass` (verify exits 0), or `fail:QUANTITY` (a deliberately broken
# run: verify must exit 1 and its row must show QUANTITY over the bound C,
# the quantity that caught the bug). EXPORT SETS: key=value pairs for
# `parabench export --set` ("" for none). ADAPTER: ds_train.py,
# mg_train.py or tt_train.py, run with the frameworks environment's python.
# Exit 77 (ctest: skipped) when that environment is not installed
# (scripts/frameworks/setup.sh; scripts/test.sh --full installs it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pb="$(realpath "$1")"
work="$2"
expect="$3"
sets="$4"
adapter="$5"
shift 5
. "$here/env.sh"
frameworks_python "$adapter"
rm -rf "$work"
mkdir -p "$work"
export_args=()
for kv in $sets; do export_args+=(--set "$kv"); done
"$pb" export --dir "$work/export" "${export_args[@]}" >/dev/null
start=$SECONDS
if ! "$py" "$here/$adapter" --export "$work/export" --out "$work/trace.safetensors" "$@" >"$work/train.log" 2>&1; then
  echo "frameworks: $adapter $* FAILED:" >&2
  grep -v -i "warn" "$work/train.log" | tail -30 >&2
  exit 1
fi
echo "trained: $adapter $* in $((SECONDS - start)) s"
status=0
"$pb" verify --export "$work/export" --trace "$work/trace.safetensors" --run-dir "$work/verify" \
  --junit "$work/verify.xml" >"$work/verify.txt" 2>&1 || status=$?
cat "$work/verify.txt"
if [[ "$expect" == pass ]]; then
  if ((status != 0)); then
    echo "frameworks: FAIL: verify rejected a correct trace (exit $status)" >&2
    exit 1
  fi
  exit 0
fi
quantity="${expect#fail:}"
if ((status != 1)); then
  echo "frameworks: FAIL: the broken run got exit $status from verify, expected 1" >&2
  exit 1
fi
# The quantity's column in verify's table (by its header) must be over C = 8.
ratio=$(awk -v q="$quantity" '
  $1 == "mesh" { for (i = 1; i <= NF; i++) if ($i == q) col = i; next }
  col && $NF == "FAIL" { print $col; exit }' "$work/verify.txt")
if [[ -z "$ratio" ]] || ! awk -v r="$ratio" 'BEGIN { exit !(r + 0 > 8) }'; then
  echo "frameworks: FAIL: verify failed the broken run, but not on '$quantity' (ratio '${ratio}')" >&2
  exit 1
fi
echo "frameworks: the broken run is caught: $quantity ratio $ratio > 8"
