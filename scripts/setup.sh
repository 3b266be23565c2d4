#!/usr/bin/env bash
# Installs every dependency of parabench from Debian packages. Idempotent:
# packages already present are skipped, so a second run costs a dpkg query.
set -euo pipefail

PKGS=(
  cmake g++ make git
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfccp-dev librandom123-dev
  python3 python3-matplotlib python3-numpy
  clang-14 libclang-rt-14-dev
  iproute2 ccache
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all dependencies present"
fi
