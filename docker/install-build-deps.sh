#!/usr/bin/env bash
# Installs zipmoe's build dependencies inside the Dockerfile's build stage.
#   Debian 12 (debian:bookworm, zipmoe-base:bookworm): exactly scripts/install_deps.sh.
#   Ubuntu 22.04 (L4T r36 / JetPack 6 images, nvidia/cuda:*-ubuntu22.04) — ASSUMED, NOT TESTED here:
#     the same package list where apt has a candidate (libtorch-dev excepted), CMake >= 3.25 from pip,
#     and torch from the wheel index TORCH_INDEX_URL (Jetson: https://pypi.jetson-ai-lab.io/jp6/cu126)
#     or the wheel file/URL TORCH_WHEEL; its libtorch*.so and TorchConfig.cmake are used by the build
#     (TORCH_CMAKE_PREFIX is written to /opt/zipmoe-build.env).
# Usage: install-build-deps.sh SCRIPTS_INSTALL_DEPS   (path of scripts/install_deps.sh)
set -euo pipefail

INSTALL_DEPS=${1:?usage: install-build-deps.sh path/to/scripts/install_deps.sh}
export DEBIAN_FRONTEND=noninteractive
. /etc/os-release
echo "install-build-deps: ${PRETTY_NAME:-unknown distribution} ($(uname -m))"

if [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ]; then
  bash "$INSTALL_DEPS"
  echo "TORCH_CMAKE_PREFIX=" > /opt/zipmoe-build.env
  exit 0
fi

# Package names from scripts/install_deps.sh's PACKAGES=( ... ) array (comments stripped).
mapfile -t WANTED < <(sed -n '/^PACKAGES=(/,/^)/p' "$INSTALL_DEPS" | sed -e '1d;$d' -e 's/#.*//' | tr ' ' '\n' | sed '/^$/d')
apt-get update -qq
AVAILABLE=() MISSING=()
for p in "${WANTED[@]}"; do
  case "$p" in libtorch-dev|libgtest-dev|libgmock-dev|libbenchmark-dev|prometheus) continue ;; esac
  if apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]'; then AVAILABLE+=("$p"); else MISSING+=("$p"); fi
done
apt-get install -y -qq --no-install-recommends "${AVAILABLE[@]}" python3-pip
if [ ${#MISSING[@]} -gt 0 ]; then
  echo "install-build-deps: WARNING: no apt candidate for: ${MISSING[*]} (the CMake step names what it misses)" >&2
fi
if ! cmake --version 2>/dev/null | awk 'NR==1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 25)) }'; then
  pip3 install --no-cache-dir 'cmake>=3.25,<4'
fi
if [ -n "${TORCH_WHEEL:-}" ]; then
  pip3 install --no-cache-dir "$TORCH_WHEEL"
else
  pip3 install --no-cache-dir --index-url "${TORCH_INDEX_URL:?set TORCH_INDEX_URL or TORCH_WHEEL}" torch
fi
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
echo "TORCH_CMAKE_PREFIX=$prefix" > /opt/zipmoe-build.env
echo "install-build-deps: torch $(python3 -c 'import torch; print(torch.__version__)') at $prefix"
