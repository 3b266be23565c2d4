# Sourced by the frameworks ctests' scripts (seeds.sh, test.sh): the
# frameworks environment's python for ADAPTER, or exit 77 (ctest: skipped)
# when that environment is not installed (scripts/frameworks/setup.sh;
# scripts/test.sh --full installs it).
#   frameworks_python ADAPTER   sets venv and py
frameworks_python() {
  venv="${PARABENCH_FRAMEWORKS_VENV:-$HOME/.cache/parabench/frameworks-venv}"
  py="$venv/bin/python"
  local mods='import deepspeed, megatron.core'
  [[ "${1:-}" == tt_train.py ]] && mods='import torchtitan'
  if [[ ! -x "$py" ]] || ! "$py" -c "$mods" 2>/dev/null; then
    echo "frameworks: skipped: no frameworks environment at $venv (install it with scripts/frameworks/setup.sh)"
    exit 77
  fi
}
