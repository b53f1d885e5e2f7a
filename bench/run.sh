#!/usr/bin/env bash
# bench/run.sh [--quick|--full] [--out DIR] [--models DIR] [--only LETTERS] [--no-build]
#
# The one entry of the benchmark suite (issue 6; ZipMoE §5): builds zipmoe + the bench binaries, then
# bench/suite.py synthesizes and compresses the mini presets (cached under --models) and runs the experiments
# under one cgroup memory cap, dropping the page cache before each cold run, writing OUT/*.json (default
# out/bench, --full: out/bench-full; OUT/meta.json has the seconds each experiment took), then bench/report.py
# writes the report with its PNG figures: docs/benchmarks.md + docs/bench/ (--full: docs/benchmarks-full.md +
# docs/bench-full/). Not part of CI. Needs root for the cgroup and drop_caches (it says so in the report and
# continues without them otherwise) and ~25 GB free disk under --models. Experiment (m) also needs Node >= 20
# (the suite runs bench/install_peer.sh; without it (m) reports zipmoe's side only) and writes a BF16 GGUF of the
# mini model next to it under --models once (~7 GB, ~40 s).
#
# Layout: bench/experiments/<letter>_<name>.py is one experiment (its settings per mode, its run, its section of
# the report); bench/experiments/__init__.py lists them in run order and page order. bench/suite.py holds the
# runs they share (models, reference, cap calibration, capped cold generations, servers), bench/report.py the
# page's header and assembly, bench/benchlib.py what the suite and the standalone tools share, and
# bench/benchmarks_template.md the page's prose that does not change between runs (the "Background:" sections).
# The other bench/*.py, *.sh, *.mjs are standalone tools (load.py, soak.sh, hostile.py, ...).
#
#   --only LETTERS     comma-separated, default all, in this order: c r a b g f d e deepseek switch h l m t s q i
#                      (bench/suite.py's docstring and docs/benchmarks.md say what each measures)
#   --quick (default)  ≤ 15 min after the build on the 2-core VM (12 min 49 s on 2026-11-29, the models already
#                      under --models): qwen2_moe mini, 2 budgets, 8 tokens, batch 1/2, a short replay,
#                      deepseek_v2 tiny for the bit-exactness sweep, zipmoe vs llama.cpp warm and at 4 caps
#                      (llama.cpp at 3); fewer rounds or points than --full in r f deepseek switch h m t s q,
#                      listed in the report's header
#   --full             ~1 h (+ 5-12 min: (m)'s held-out architectures): 5 budgets, 32 tokens, lengths to 256, batch 16, deepseek_v2 mini, every round
#   --no-build         use the binaries already in the build directory
# Environment: ZIPMOE_BENCH_BUILD_DIR (default build-bench), PYTHON (default /usr/bin/python3),
# ZIPMOE_BENCH_MODELS (the default of --models, /var/tmp/zipmoe-bench-models).
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
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
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
