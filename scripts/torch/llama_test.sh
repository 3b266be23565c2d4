#!/usr/bin/env bash
# The llama family against PyTorch (ctests torch_llama, torch_mixtral): fp64
# exports, 10 AdamW steps each; scripts/torch/llama.py, written from
# results/TRACE.md and docs/strategies/moe-expert-parallel.md alone, must
# equal parabench's reference to 1e-12 (loss and gradient norm of every step,
# step-1 gradients, final parameters; for tiny-mixtral also every step's
# tokens per expert and load-balancing loss), and `parabench verify` must pass
# its trace.
#   scripts/torch/llama_test.sh [PARABENCH [WORKDIR [MODEL]]]
# MODEL: tiny-llama (the default), or tiny-mixtral: its own export (capacity
# factor 2 = E / k, nothing dropped) and one where capacity drops choices
# (capacity factor 1, two microbatches: two capacity scopes a step, aux loss
# coefficient 0.1), which must drop some.
# Exit 77 (ctest: skipped) without the adapter's environment
# (scripts/torch/setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pb="$(realpath "${1:-$here/../../build/parabench}")"
work="${2:-$here/../../build/torch-llama}"
model="${3:-tiny-llama}"
venv="${PARABENCH_TORCH_VENV:-$HOME/.cache/parabench/torch-venv}"
py="$venv/bin/python"
if [[ ! -x "$py" ]] || ! "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null; then
  echo "torch llama: skipped: no PyTorch environment at $venv (install it with scripts/torch/setup.sh)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
# one export: NAME, then its config's --set's; llama.py trains them all in
# one process (importing torch is most of its time)
train=()
export_case() {
  local name="$1" sets=()
  shift
  for s in "$@"; do sets+=(--set "$s"); done
  "$pb" export --dir "$work/$name/export" --set "model.name=$model" --set train.precision=fp64 \
    --set train.steps=10 ${sets[@]+"${sets[@]}"} >/dev/null
  train+=(--export "$work/$name/export" --out "$work/$name/torch.safetensors")
  names+=("$name")
}
names=()
case "$model" in
  tiny-llama) export_case llama ;;
  tiny-mixtral)
    export_case mixtral
    export_case mixtral-drops moe.capacity_factor=1.0 train.microbatches=2 moe.aux_loss_coef=0.1
    train+=(--expect-drops "$work/mixtral-drops/export") ;;
  *) echo "torch llama: model $model: expected tiny-llama or tiny-mixtral" >&2; exit 2 ;;
esac
"$py" "$here/llama.py" --tol 1e-12 "${train[@]}"
for name in "${names[@]}"; do
  "$pb" verify --export "$work/$name/export" --trace "$work/$name/torch.safetensors" --run-dir "$work/$name/verify"
done
echo "torch llama: PyTorch equals the reference on $model to 1e-12 over 10 AdamW steps; verify passes its traces"
