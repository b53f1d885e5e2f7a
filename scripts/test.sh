#!/usr/bin/env bash
# README command 2: installs dependencies, builds, and runs the whole GoogleTest suite via ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
# A full disk fails npm ci, the build or a test model half-way with an error that names none of them: say it
# first. A clean run took about 2 GiB more at its peak than before it (build/, node_modules, the test models
# under $TMPDIR; a fresh clone's run, 2026-12-03); the shared model cache keeps one build's models
# (tests/test_util.h CachedSynth).
for dir in . "${TMPDIR:-/tmp}"; do
  free_kib=$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [[ -n "$free_kib" && "$free_kib" -lt $((4 * 1024 * 1024)) ]]; then
    echo "test.sh: warning: only $((free_kib / 1024)) MiB free on the file system of $dir; a build and test run" \
         "needs about 2 GiB; free some first, or it may stop with 'No space left on device' (ENOSPC)" >&2
  fi
done
bash scripts/install_deps.sh
bash scripts/build.sh
BUILD_DIR=${ZIPMOE_BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
