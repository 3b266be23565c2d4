#!/usr/bin/env bash
# The DeepSpeed / Megatron-Core / torchtitan adapters' bad input (ctest frameworks_bad_input):
# each case must exit 2 with a message naming what is wrong, before any
# process starts; and `parabench verify` must refuse (exit 2) a framework's
# trace judged against another export.
#   scripts/frameworks/bad_input.sh PARABENCH WORKDIR
# Exit 77 (ctest: skipped) without the frameworks environment.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pb="$(realpath "$1")"
work="$2"
venv="${PARABENCH_FRAMEWORKS_VENV:-$HOME/.cache/parabench/frameworks-venv}"
torch_venv="${PARABENCH_TORCH_VENV:-$HOME/.cache/parabench/torch-venv}"
py="$venv/bin/python"
if [[ ! -x "$py" || ! -x "$torch_venv/bin/python" ]] || ! "$py" -c 'import deepspeed, megatron.core' 2>/dev/null; then
  echo "frameworks: skipped: no frameworks environment at $venv (install it with scripts/frameworks/setup.sh)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
"$pb" export --dir "$work/export" --set model.layers=2 --set train.steps=2 >/dev/null
"$pb" export --dir "$work/other" --set model.layers=2 --set train.steps=2 --set train.seed=99 >/dev/null

expect2() {  # pattern python args...
  local want="$1" python="$2" rc=0 out
  shift 2
  out=$("$python" "$@" 2>&1) || rc=$?
  if ((rc != 2)) || ! grep -q -- "$want" <<<"$out"; then
    echo "frameworks: FAIL: $* gave exit $rc, expected 2 with '$want':" >&2
    echo "$out" | tail -5 >&2
    exit 1
  fi
  echo "  exit 2: $want"
}
ds=("$here/ds_train.py" --export "$work/export" --out "$work/t.safetensors")
mg=("$here/mg_train.py" --export "$work/export" --out "$work/t.safetensors")
# A python without the framework: the PyTorch adapter's environment.
expect2 "deepspeed is not installed" "$torch_venv/bin/python" "${ds[@]}" --strategy zero1
expect2 "megatron-core is not installed" "$torch_venv/bin/python" "${mg[@]}" --strategy tp
# A version outside the pin: a distribution 0.18.0 found first on the path.
mkdir -p "$work/old/deepspeed-0.18.0.dist-info"
printf 'Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.18.0\n' >"$work/old/deepspeed-0.18.0.dist-info/METADATA"
PYTHONPATH="$work/old" expect2 "deepspeed 0.18.0 is outside the pinned version 0.19.8" "$py" "${ds[@]}" --strategy zero1
tt=("$here/tt_train.py" --export "$work/llama" --out "$work/t.safetensors")
"$pb" export --dir "$work/llama" --set model.name=tiny-llama --set train.steps=2 >/dev/null
expect2 "torchtitan is not installed" "$torch_venv/bin/python" "${tt[@]}" --strategy fsdp2
mkdir -p "$work/old/torchtitan-0.2.0.dist-info"
printf 'Metadata-Version: 2.1\nName: torchtitan\nVersion: 0.2.0\n' >"$work/old/torchtitan-0.2.0.dist-info/METADATA"
PYTHONPATH="$work/old" expect2 "torchtitan 0.2.0 is outside the pinned version 0.3.0" "$py" "${tt[@]}" --strategy fsdp2
expect2 "torchtitan builds only Llama" "$py" "$here/tt_train.py" --export "$work/export" --strategy fsdp2 --out "$work/t"
expect2 "applies to --strategy fsdp2" "$py" "${tt[@]}" --strategy tp-sp --fault local-mean
expect2 "must divide model.layers 2" "$py" "${tt[@]}" --strategy pp-interleaved
expect2 "runs with --driver trainer only" "$py" "${tt[@]}" --strategy cp --driver loop
"$pb" export --dir "$work/llama_warmup" --set model.name=tiny-llama --set optim.warmup=2 >/dev/null
expect2 "cosine after a warmup (optim.warmup > 0) has no torchtitan config" "$py" "$here/tt_train.py" \
  --export "$work/llama_warmup" --strategy fsdp2 --out "$work/t.safetensors"
# The export, the output, the shape and the fault.
expect2 "init.safetensors is missing" "$py" "$here/ds_train.py" --export "$work/nowhere" --strategy zero1 --out "$work/t"
expect2 "cannot write a file there" "$py" "$here/mg_train.py" --export "$work/export" --strategy tp --out "$work/no/t"
expect2 "3 replicas x 1 microbatches do not divide the batch of 8" "$py" "${ds[@]}" --strategy zero2 --world 3
expect2 "4 stages must divide the model's 2 layers" "$py" "${mg[@]}" --strategy pp --world 4
expect2 "applies to --strategy tp-sp" "$py" "${mg[@]}" --strategy tp --fault no-finalize
expect2 "needs an export with train.microbatches >= 2" "$py" "${ds[@]}" --strategy zero1 --fault no-ga-scale
expect2 "needs an export with optim.clip = 0" "$py" "${ds[@]}" --strategy zero1 --fault clip-default
expect2 "needs a --strategy ulysses-zero0 .. ulysses-zero3" "$py" "${ds[@]}" --strategy zero1 --fault ulysses-scale
expect2 "the world must divide train.seq (16) and model.heads (2)" "$py" "${ds[@]}" --strategy ulysses-zero2 --world 3
expect2 "train.microbatches >= 2 (the pipeline's microbatches; export has 1)" "$py" "${ds[@]}" --strategy pipe
# Megatron MoE (moe-ep): a dense export, an MoE export under a dense
# strategy, one that drops tokens or balances over the replicas jointly.
expect2 "moe-ep needs a mixture-of-experts export" "$py" "${mg[@]}" --strategy moe-ep
"$pb" export --dir "$work/moe" --set model.layers=2 --set train.steps=2 --set moe.experts=4 --set moe.top_k=2 \
  --set moe.capacity_factor=2 --set moe.capacity=local >/dev/null
"$pb" export --dir "$work/moe_cf1" --set model.layers=2 --set train.steps=2 --set moe.experts=4 --set moe.top_k=2 \
  --set moe.capacity=local >/dev/null
mgm=("$here/mg_train.py" --out "$work/t.safetensors")
expect2 "use --strategy moe-ep" "$py" "${mgm[@]}" --export "$work/moe" --strategy dp
expect2 "drops tokens" "$py" "${mgm[@]}" --export "$work/moe_cf1" --strategy moe-ep
expect2 "the world must divide the 4 experts" "$py" "${mgm[@]}" --export "$work/moe" --strategy moe-ep --world 3
expect2 "applies to --strategy moe-ep" "$py" "${mg[@]}" --strategy dp --fault expert-grads-ep

# A trace judged against another export: verify refuses it by name.
"$py" "${ds[@]}" --strategy zero1 >"$work/train.log" 2>&1 || { tail -20 "$work/train.log" >&2; exit 1; }
expect2 "trained from another export" "$pb" verify --export "$work/other" --trace "$work/t.safetensors" \
  --run-dir "$work/verify"
echo "frameworks: every bad input exits 2, named"
