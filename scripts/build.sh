#!/usr/bin/env bash
# Configures (once) and builds zipmoe into ${ZIPMOE_BUILD_DIR:-build}. CUDA kernels are compiled when
# nvcc is found (CMAKE_CUDA_ARCHITECTURES defaults to "87;90"). Incremental on a second run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ZIPMOE_BUILD_DIR:-build}
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
