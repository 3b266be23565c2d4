#!/usr/bin/env bash
# Installs the DeepSpeed, Megatron-Core and torchtitan adapters' environment: a virtual
# environment outside the checkout ($PARABENCH_FRAMEWORKS_VENV, default
# ~/.cache/parabench/frameworks-venv) holding the pinned packages of
# requirements.txt, on top of the PyTorch adapter's environment
# (scripts/torch/setup.sh, installed first if missing). torch is not
# installed twice (about 5 GB): a .pth file puts the torch environment's
# site-packages on this one's path, after its own, so the frameworks see
# torch 2.15.0 while the torch environment stays exactly what its own
# requirements say (nothing is installed into it). A stamp of both
# requirements files skips the install when nothing changed. Prints the
# environment's python on its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
torch_py="$(bash "$here/../torch/setup.sh")"
venv="${PARABENCH_FRAMEWORKS_VENV:-$HOME/.cache/parabench/frameworks-venv}"
stamp="$venv/.parabench-requirements"
want="$(cat "$here/../torch/requirements.txt" "$here/requirements.txt"; echo "torch python: $torch_py")"
if [[ -x "$venv/bin/python" && -f "$stamp" ]] && [[ "$(cat "$stamp")" == "$want" ]]; then
  echo "frameworks setup: $venv is up to date" >&2
  echo "$venv/bin/python"
  exit 0
fi
echo "frameworks setup: installing $(grep -v '^#' "$here/requirements.txt" | head -2 | xargs) into $venv (once)" >&2
python3 -m venv "$venv"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
torch_site="$("$torch_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$torch_site" >"$site/parabench-torch-venv.pth"
# DS_BUILD_OPS=0: DeepSpeed's C++/CUDA ops are not built (there is no CUDA
# here; the adapter needs none of them).
DS_BUILD_OPS=0 "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$here/requirements.txt" >&2
"$venv/bin/python" - >&2 <<'PY'
import torch.distributed as d
assert d.is_gloo_available(), "torch without gloo"
import deepspeed, megatron.core
assert deepspeed.__version__ == "0.19.8", deepspeed.__version__
assert megatron.core.__version__ == "0.16.1", megatron.core.__version__
import importlib.metadata, torchtitan.models.llama3
assert importlib.metadata.version("torchtitan") == "0.3.0", importlib.metadata.version("torchtitan")
PY
echo "$want" >"$stamp"
echo "$venv/bin/python"
