#!/usr/bin/env bash
# Installs the PyTorch adapter's environment: a virtual environment with the
# pinned torch of requirements.txt (PyPI; about 5 GB with its CUDA libraries,
# which the adapter does not use: it runs on CPU with gloo). Installed once
# and reused: the environment lives outside the checkout, in
# $PARABENCH_TORCH_VENV (default ~/.cache/parabench/torch-venv), and a stamp
# of requirements.txt skips the install when nothing changed. Prints the
# environment's python on its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${PARABENCH_TORCH_VENV:-$HOME/.cache/parabench/torch-venv}"
stamp="$venv/.parabench-requirements"
if [[ -x "$venv/bin/python" && -f "$stamp" ]] && cmp -s "$stamp" "$here/requirements.txt"; then
  echo "torch setup: $venv is up to date" >&2
  echo "$venv/bin/python"
  exit 0
fi
if ! python3 -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  # Debian's python3 needs python3-venv for `python3 -m venv`; tomllib needs 3.11.
  SUDO=""
  [ "$(id -u)" != 0 ] && SUDO="sudo"
  echo "torch setup: installing python3-venv" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  python3 -c 'import sys; assert sys.version_info >= (3, 11), "the adapter needs Python 3.11 or later"'
fi
echo "torch setup: installing $(grep -v '^#' "$here/requirements.txt" | xargs) into $venv (once; about 5 GB)" >&2
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$here/requirements.txt" >&2
"$venv/bin/python" -c 'import torch, torch.distributed as d; assert d.is_gloo_available(), "torch without gloo"' >&2
cp "$here/requirements.txt" "$stamp"
echo "$venv/bin/python"
