#!/usr/bin/env bash
# Clang's thread-safety analysis over every torch-free C++ translation unit of the build, warnings as
# errors (common/thread_annotations.h, common/mutex.h). The default build uses GCC, which ignores the
# annotations; this pass is what checks them. It runs clang's front end only (-fsyntax-only) with
# each file's own flags from BUILD_DIR/compile_commands.json, so it costs a fraction of a build.
# First it proves it can fail: a file that reads a ZM_GUARDED_BY member without its lock must be
# rejected, else the check itself is broken.
#
# Usage: scripts/check_thread_safety.sh [BUILD_DIR]   (default: build; ctest runs it as thread_safety_clang)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
CLANG=${CLANGXX:-clang++}
DB="$BUILD_DIR/compile_commands.json"
[ -f "$DB" ] || { echo "check_thread_safety: $DB not found (configure the build first)" >&2; exit 2; }
command -v "$CLANG" > /dev/null || { echo "check_thread_safety: $CLANG not found (scripts/install_deps.sh installs clang)" >&2; exit 2; }
FLAGS=(-fsyntax-only -Wthread-safety -Wthread-safety-beta -Werror=thread-safety -Wno-unknown-warning-option)

# 1. The check must catch a violation.
probe=$(mktemp --suffix=.cc)
trap 'rm -f "$probe"' EXIT
cat > "$probe" <<'EOF'
#include "common/mutex.h"
struct Counter {
  zipmoe::Mutex mu;
  int n ZM_GUARDED_BY(mu) = 0;
  int Read() { return n; }  // no lock: must be an error
};
int main() { Counter c; return c.Read(); }
EOF
if "$CLANG" -std=c++17 -I. "${FLAGS[@]}" "$probe" 2> /dev/null; then
  echo "check_thread_safety: FAILED: clang accepted an unguarded read of a ZM_GUARDED_BY member" >&2
  exit 1
fi

# 2. Every torch-free translation unit (the executor is the one torch user: its flags are GCC's
#    and torch's headers triple the time), with its own flags.
/usr/bin/python3 - "$DB" > "$BUILD_DIR/thread_safety_commands.txt" <<'EOF'
import json, shlex, sys
for entry in json.load(open(sys.argv[1])):
    f = entry["file"]
    if not f.endswith(".cc") or "/services/executor/" in f:
        continue  # the executor's sources and tests (torch); its process entry (services/processes/) is torch-free
    args = entry.get("arguments") or shlex.split(entry["command"])
    keep, skip = [], False
    for a in args[1:]:  # the compiler, -o OUT, -c and the source itself go
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c" and a != f:
            keep.append(a)
    print(entry["directory"] + "\t" + f + "\t" + " ".join(shlex.quote(k) for k in keep))
EOF
n=$(wc -l < "$BUILD_DIR/thread_safety_commands.txt")
fail=0
export CLANG
xargs -P "$(nproc)" -d '\n' -n 1 bash -c '
  IFS=$'"'"'\t'"'"' read -r dir file flags <<< "$0"
  cd "$dir"
  eval "\"$CLANG\" $flags -fsyntax-only -Wno-everything -Wthread-safety -Werror=thread-safety \"$file\"" \
    || { echo "check_thread_safety: $file" >&2; exit 1; }' < "$BUILD_DIR/thread_safety_commands.txt" || fail=1
if [ "$fail" -ne 0 ]; then
  echo "check_thread_safety: FAILED (see the errors above)" >&2
  exit 1
fi
echo "check_thread_safety: $n translation units clean under clang -Wthread-safety -Werror"
