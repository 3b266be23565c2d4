#!/usr/bin/env bash
# No false alarm over 3 seeds (a ctest of suites/frameworks.cmake): every
# row given trained from exports of seeds 1-3 and judged by verify
# (scripts/frameworks/seeds.py, with the frameworks environment's python).
#   scripts/frameworks/seeds.sh PARABENCH WORKDIR ADAPTER "NAME|EXPORT SETS|ADAPTER ARGS"...
# Exit 77 (ctest: skipped) when that environment is not installed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${PARABENCH_FRAMEWORKS_VENV:-$HOME/.cache/parabench/frameworks-venv}"
py="$venv/bin/python"
mods='import deepspeed, megatron.core'
[[ "${3:-}" == tt_train.py ]] && mods='import torchtitan'
if [[ ! -x "$py" ]] || ! "$py" -c "$mods" 2>/dev/null; then
  echo "frameworks: skipped: no frameworks environment at $venv (install it with scripts/frameworks/setup.sh)"
  exit 77
fi
mkdir -p "$2"
exec "$py" "$here/seeds.py" "$@" 2> >(grep -v -i "warn\|scheduler.step()" >&2)
