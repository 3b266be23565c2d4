#!/usr/bin/env bash
# No false alarm over 3 seeds (a ctest of suites/frameworks.cmake): every
# row given trained from exports of seeds 1-3 and judged by verify
# (scripts/frameworks/seeds.py, with the frameworks environment's python).
#   scripts/frameworks/seeds.sh PARABENCH WORKDIR ADAPTER "NAME|EXPORT SETS|ADAPTER ARGS"...
# Exit 77 (ctest: skipped) when that environment is not installed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/env.sh"
frameworks_python "${3:-}"
mkdir -p "$2"
exec "$py" "$here/seeds.py" "$@" 2> >(grep -v -i "warn\|scheduler.step()" >&2)
