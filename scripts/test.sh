#!/usr/bin/env bash
# README command 2: installs dependencies, builds, and runs the whole GoogleTest suite via ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
BUILD_DIR=${ZIPMOE_BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
