#!/usr/bin/env bash
# The llama family against PyTorch (ctest torch_llama): an fp64 export of
# tiny-llama, 10 AdamW steps; scripts/torch/llama.py, written from
# results/TRACE.md alone, must equal parabench's reference to 1e-12 (loss of
# every step, step-1 gradients, final parameters), and `parabench verify`
# must pass its trace.
#   scripts/torch/llama_test.sh [PARABENCH [WORKDIR]]
# Exit 77 (ctest: skipped) without the adapter's environment
# (scripts/torch/setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pb="$(realpath "${1:-$here/../../build/parabench}")"
work="${2:-$here/../../build/torch-llama}"
venv="${PARABENCH_TORCH_VENV:-$HOME/.cache/parabench/torch-venv}"
py="$venv/bin/python"
if [[ ! -x "$py" ]] || ! "$py" -c 'import torch' 2>/dev/null; then
  echo "torch llama: skipped: no PyTorch environment at $venv (install it with scripts/torch/setup.sh)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
"$pb" export --dir "$work/export" --set model.name=tiny-llama --set train.precision=fp64 --set train.steps=10 >/dev/null
"$py" "$here/llama.py" --export "$work/export" --out "$work/torch.safetensors" --tol 1e-12
"$pb" verify --export "$work/export" --trace "$work/torch.safetensors" --run-dir "$work/verify"
echo "torch llama: PyTorch equals the reference to 1e-12 over 10 AdamW steps; verify passes its trace"
