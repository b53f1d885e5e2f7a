#!/usr/bin/env bash
# Cross-compiles the CPU kernels' AArch64 build (Bf16Gemm's and GatedDeltaRecurrent's NEON variants,
# RecoverBf16Cpu's NEON path) with their GoogleTest suites and runs them under qemu-user; fails unless every NEON (and
# dispatched) test case ran and passed. The main suite runs it as ctest test kernels_aarch64_qemu.
#   tests/kernels/aarch64/run.sh [build dir]    default: ${ZIPMOE_BUILD_DIR:-build}/aarch64
# Incremental: configures once, then only rebuilds what changed. Needs the Debian packages
# g++-aarch64-linux-gnu, qemu-user-static, googletest, libfmt-dev, cmake, ninja-build
# (scripts/install_deps.sh installs them); a missing one is an error, not a skip.
set -euo pipefail
TAG=kernels_aarch64_qemu
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
MAIN_BUILD_DIR=${ZIPMOE_BUILD_DIR:-build}
[[ $MAIN_BUILD_DIR == /* ]] || MAIN_BUILD_DIR=$REPO/$MAIN_BUILD_DIR
BUILD_DIR=${1:-$MAIN_BUILD_DIR/aarch64}
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)

case "$(uname -m)" in
  aarch64 | arm64)
    # Nothing to emulate: the host suite (zipmoe_kernels_tests) runs the NEON variants natively.
    echo "$TAG: SKIPPED (the host is AArch64; zipmoe_kernels_tests runs the NEON variants natively)"
    exit 0
    ;;
esac

missing=()
need() {  # need <command or file> <Debian package>
  if [[ $1 == /* ]]; then [ -e "$1" ] || missing+=("$1 (package $2)")
  else command -v "$1" >/dev/null || missing+=("$1 (package $2)"); fi
}
need aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
need aarch64-linux-gnu-g++ g++-aarch64-linux-gnu
need qemu-aarch64-static qemu-user-static
need /usr/src/googletest/CMakeLists.txt googletest
need /usr/include/fmt/format.h libfmt-dev
need cmake cmake
need ninja ninja-build
if [ ${#missing[@]} -ne 0 ]; then
  echo "$TAG: FAILED: missing ${missing[*]}; run scripts/install_deps.sh" >&2
  exit 1
fi

start=$(date +%s)
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S "$REPO/tests/kernels/aarch64" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$REPO/cmake/aarch64-linux-gnu.cmake"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
built=$(date +%s)
echo "$TAG: build $((built - start)) s"

BIN=$BUILD_DIR/zipmoe_kernels_aarch64_tests
QEMU=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)
NEON_FILTER='*/neon:*/neonbf16:*/dispatched'  # the NEON and BFDOT instantiations and the dispatched path
# ZIPMOE_GEMM_ISA would override Bf16Gemm's dispatch (kernels/bf16_gemm.h): keep the default (NEON).
unset ZIPMOE_GEMM_ISA

# 1. The NEON cases: every one must run (a skip means NEON was not compiled in or not detected).
log=$BUILD_DIR/neon_tests.log
status=0
"${QEMU[@]}" "$BIN" --gtest_filter="$NEON_FILTER" --gtest_color=no >"$log" 2>&1 || status=$?
cat "$log"
listed=$("${QEMU[@]}" "$BIN" --gtest_filter="$NEON_FILTER" --gtest_list_tests | grep -c '^  ' || true)
passed=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) tests\?\.$/\1/p' "$log")
fail() { echo "$TAG: FAILED: $*" >&2; exit 1; }
[ "$status" -eq 0 ] || fail "NEON test cases failed under qemu (exit $status; output above)"
if grep -q '^\[  SKIPPED \]' "$log"; then fail "NEON test cases were skipped (NEON not compiled in or not detected)"; fi
grep -q '^\[       OK \] AllIsas/Bf16GemmIsaTest\..*/neon' "$log" || fail "no Bf16Gemm NEON test case ran"
grep -q '^\[       OK \] AllVariants/RecoveryCpuTest\..*/neon' "$log" || fail "no RecoverBf16Cpu NEON test case ran"
grep -q '^\[       OK \] DotIsas/Bf16DotTest\..*/neonbf16' "$log" || fail "no Bf16Gemm BFDOT (neonbf16) test case ran"
grep -q '^\[       OK \] AllIsas/Mxfp4GemmIsaTest\..*/neon' "$log" || fail "no MXFP4 Bf16Gemm NEON test case ran"
grep -q '^\[       OK \] AllIsas/GatedDeltaIsaTest\..*/neon' "$log" || fail "no GatedDeltaRecurrent NEON test case ran"
if [ -z "$passed" ] || [ "$passed" -ne "$listed" ]; then fail "$listed NEON test cases listed, ${passed:-0} passed"; fi

# 2. Everything else (scalar/portable variants, references, argument checks, dispatch); the x86
#    variants report as skipped here.
status=0
"${QEMU[@]}" "$BIN" --gtest_filter="-$NEON_FILTER" --gtest_color=no --gtest_brief=1 || status=$?
[ "$status" -eq 0 ] || fail "test cases failed under qemu (exit $status; output above)"

echo "$TAG: PASSED: $passed NEON/dispatched test cases ran and passed on AArch64 (qemu), the rest passed;" \
  "build $((built - start)) s, tests $(($(date +%s) - built)) s"
