#!/usr/bin/env bash
# bench/run.sh [--quick|--full] [--out DIR] [--models DIR] [--only c,r,a,b,g,f,d,e,deepseek,h,l,m,t,s,q,i] [--no-build]
#
# The benchmark suite (issue 6; ZipMoE §5): builds zipmoe + bench binaries, synthesizes and compresses
# the mini presets, runs every experiment under one cgroup memory cap with the page cache dropped
# before each cold run, writes OUT/*.json (default out/bench, --full: out/bench-full), and generates
# the report with its PNG figures: docs/benchmarks.md + docs/bench/ (--full: docs/benchmarks-full.md +
# docs/bench-full/). Not part of CI. Needs root for the cgroup and drop_caches (it says so in the
# report and continues without them otherwise) and ~25 GB free disk under --models. Experiment (m) also
# needs Node >= 20 (the suite runs bench/install_peer.sh; without it (m) reports zipmoe's side only) and
# writes a BF16 GGUF of the mini model next to it under --models once (~7 GB, ~40 s).
#   --quick (default)  ~12 min on a quiet 2-core VM after the build (target ≤ 15), + ~5 min for (m):
#                      qwen2_moe mini, 2 budgets, 8 tokens, batch 1/2, a short replay, deepseek_v2 tiny for
#                      the bit-exactness sweep, zipmoe vs llama.cpp warm and at 4 caps (llama.cpp at 3)
#   --full             ~1 h: 5 budgets, 32 tokens, lengths to 256, batch 16, deepseek_v2 mini
# Environment: ZIPMOE_BENCH_BUILD_DIR (default build-bench), PYTHON (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=quick
OUT=""
MODELS=${ZIPMOE_BENCH_MODELS:-/var/tmp/zipmoe-bench-models}
ONLY=""
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    --out) OUT=$2; shift ;;
    --models) MODELS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "bench/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$OUT" ]; then OUT=out/bench; [ "$MODE" = full ] && OUT=out/bench-full; fi
BUILD_DIR=${ZIPMOE_BENCH_BUILD_DIR:-build-bench}
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import matplotlib, numpy' 2>/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-matplotlib python3-numpy >/dev/null || true
fi
if ! "$PY" -c 'import matplotlib' 2>/dev/null; then
  echo "W: $PY has no matplotlib (apt-get install python3-matplotlib): the report will have tables only" >&2
fi
if [ "$BUILD" = 1 ]; then
  echo "I: building into $BUILD_DIR" >&2
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target zipmoe codec_bench executor_bench membw_bench
fi
START=$(date +%s)
ARGS=(--mode "$MODE" --bin "$BUILD_DIR/bin" --out "$OUT" --models "$MODELS")
[ -n "$ONLY" ] && ARGS+=(--only "$ONLY")
STATUS=0
"$PY" bench/suite.py "${ARGS[@]}" || STATUS=$?
# Each mode has its own report: docs/benchmarks.md + docs/bench/ (quick), docs/benchmarks-full.md + docs/bench-full/.
DOCS=docs/benchmarks.md
FIGURES=docs/bench
if [ "$MODE" = full ]; then DOCS=docs/benchmarks-full.md; FIGURES=docs/bench-full; fi
"$PY" bench/report.py --out "$OUT" --docs "$DOCS" --figures "$FIGURES" \
  --command "bench/run.sh --$MODE${ONLY:+ --only $ONLY}"
echo "I: bench/run.sh --$MODE: $(( $(date +%s) - START )) s after the build; report in $DOCS" >&2
exit $STATUS
