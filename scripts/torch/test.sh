#!/usr/bin/env bash
# The PyTorch adapter's conformance run (ctest torch_adapter): one export of
# the canonical model (tiny, 4 layers, so interleaved has two stages per rank),
# then PyTorch trains it with every strategy of train.py at fp32 and
# bf16-mixed, and `parabench verify` must pass every trace (exit 0, JUnit
# written); the deliberately broken runs must each fail it (exit 1). A
# tiny-llama export beside it (the llama family, Hugging Face's names) trains
# with ddp, fsdp2 and tp at both precisions and one broken run (ddp
# no-divide); the strategies that do not take the family refuse it (exit 2).
#   scripts/torch/test.sh [PARABENCH [WORKDIR]]
# Exit 77 (ctest: skipped) when the adapter's environment is not installed
# (scripts/torch/setup.sh; scripts/test.sh installs it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pb="$(realpath "${1:-$here/../../build/parabench}")"
work="${2:-$here/../../build/torch-adapter}"
venv="${PARABENCH_TORCH_VENV:-$HOME/.cache/parabench/torch-venv}"
py="$venv/bin/python"
if [[ ! -x "$py" ]] || ! "$py" -c 'import torch' 2>/dev/null; then
  echo "torch adapter: skipped: no PyTorch environment at $venv (install it with scripts/torch/setup.sh)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/traces" "$work/broken"
"$pb" export --dir "$work/export" --set model.layers=4 --set train.steps=6 >/dev/null
mkdir -p "$work/llama/traces" "$work/llama/broken"
"$pb" export --dir "$work/llama/export" --set model.name=tiny-llama --set train.steps=6 >/dev/null

train() {  # name args...  (EXPORT: the export, the GPT-2 one unless set)
  local name="$1"
  shift
  local start=$SECONDS
  if ! "$py" "$here/train.py" --export "${EXPORT:-$work/export}" "$@" >"$work/$name.log" 2>&1; then
    echo "torch adapter: train.py $* FAILED:" >&2
    tail -20 "$work/$name.log" >&2
    exit 1
  fi
  echo "  trained $name in $((SECONDS - start)) s"
}
good=(
  "ddp --world 2" "fsdp2 --world 2" "hsdp --world 4" "pp-gpipe --world 2" "pp-1f1b --world 2"
  "pp-interleaved --world 2" "tp --world 2"
)
for precision in fp32 bf16-mixed; do
  for g in "${good[@]}"; do
    name="$(echo "$g" | tr -s ' ' '_' | tr -d -)_$precision"
    # shellcheck disable=SC2086
    train "$name" --strategy $g --precision "$precision" --out "$work/traces/$name.safetensors"
  done
done
broken=(
  "ddp --world 2 --fault no-divide"
  "ddp --world 2 --fault skip-allreduce"
  "pp-1f1b --world 2 --fault microbatch-order"
  "ddp --world 2 --fault no-divide --precision bf16-mixed"
)
for b in "${broken[@]}"; do
  name="$(echo "$b" | tr -s ' ' '_' | tr -d -)"
  # shellcheck disable=SC2086
  train "$name" --strategy $b --out "$work/broken/$name.safetensors"
done
llama_good=("ddp --world 2" "fsdp2 --world 2" "tp --world 2")
for precision in fp32 bf16-mixed; do
  for g in "${llama_good[@]}"; do
    name="llama_$(echo "$g" | tr -s ' ' '_' | tr -d -)_$precision"
    # shellcheck disable=SC2086
    EXPORT="$work/llama/export" train "$name" --strategy $g --precision "$precision" \
      --out "$work/llama/traces/$name.safetensors"
  done
done
EXPORT="$work/llama/export" train llama_ddp_nodivide --strategy ddp --world 2 --fault no-divide \
  --out "$work/llama/broken/llama_ddp_nodivide.safetensors"

# The adapter's own bad input: exit 2 naming what, before any process starts.
bad_input() {  # pattern args...
  local want="$1" rc=0 out
  shift
  out=$("$py" "$here/train.py" "$@" 2>&1) || rc=$?
  if ((rc != 2)) || ! grep -q -- "$want" <<<"$out"; then
    echo "torch adapter: FAIL: train.py $* gave exit $rc, expected 2 with '$want':" >&2
    echo "$out" | tail -5 >&2
    exit 1
  fi
}
bad_input "3 replicas x 1 microbatches do not divide the batch of 8" --export "$work/export" --strategy ddp --world 3 --out "$work/x"
bad_input "8 stages must divide the model's 4 layers" --export "$work/export" --strategy pp-interleaved --world 4 --out "$work/x"
bad_input "init.safetensors is missing" --export "$work/nowhere" --strategy ddp --out "$work/x"
bad_input "cannot write a file there" --export "$work/export" --strategy ddp --out "$work/no/such/x"
bad_input "applies to pp strategies" --export "$work/export" --strategy ddp --fault microbatch-order --out "$work/x"
bad_input "kv_heads 2 < tp 4" --export "$work/llama/export" --strategy tp --world 4 --out "$work/x"
bad_input "pp-1f1b on tiny-llama: the adapter trains the llama family with ddp, fsdp2, tp only" \
  --export "$work/llama/export" --strategy pp-1f1b --out "$work/x"
bad_input "hsdp on tiny-llama" --export "$work/llama/export" --strategy hsdp --world 4 --out "$work/x"

status=0
"$pb" verify --export "$work/export" --trace "$work"/traces/*.safetensors --run-dir "$work/verify" \
  --junit "$work/verify.xml" || status=$?
if ((status != 0)); then
  echo "torch adapter: FAIL: parabench verify rejected a correct PyTorch trace (exit $status)" >&2
  exit 1
fi
status=0
"$pb" verify --export "$work/llama/export" --trace "$work"/llama/traces/*.safetensors --run-dir "$work/llama/verify" \
  --junit "$work/llama/verify.xml" || status=$?
if ((status != 0)); then
  echo "torch adapter: FAIL: parabench verify rejected a correct PyTorch tiny-llama trace (exit $status)" >&2
  exit 1
fi
for t in "$work"/broken/*.safetensors "$work"/llama/broken/*.safetensors; do
  status=0
  ex="$work/export"
  [[ "$t" == "$work/llama/"* ]] && ex="$work/llama/export"
  "$pb" verify --export "$ex" --trace "$t" --run-dir "$work/verify-broken" >"$t.verify" 2>&1 || status=$?
  if ((status != 1)); then
    echo "torch adapter: FAIL: the broken trace $(basename "$t") got exit $status from verify, expected 1:" >&2
    cat "$t.verify" >&2
    exit 1
  fi
  grep -E "FAIL$" "$t.verify" | sed 's/^/  caught: /'
done
echo "torch adapter: ${#good[@]} strategies x 2 precisions pass verify on GPT-2, ${#llama_good[@]} x 2 on tiny-llama;" \
  "$((${#broken[@]} + 1)) broken runs fail it"
