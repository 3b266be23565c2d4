#!/usr/bin/env bash
# Sets up, builds and runs every test (the command .ci/run calls): the ctest
# suite, then the sanitizer runs (ASan+UBSan and TSan builds: harness tests and
# a reduced conformance matrix, scripts/sanitize.sh), then a bounded run of
# every fuzz target (10 s each, scripts/fuzz.sh). About 21 minutes on 2 cores
# with the dependencies installed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600)
bash scripts/sanitize.sh
bash scripts/fuzz.sh --time 10 --out build-fuzz/test-out
