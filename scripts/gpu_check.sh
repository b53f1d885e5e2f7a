#!/usr/bin/env bash
# GPU check: builds zipmoe with CUDA (kernels for CMAKE_CUDA_ARCHITECTURES, default 90) against the
# CUDA libtorch of the machine's Python torch, then runs
#   1. the kernel tests on the device (recovery kernel and grouped expert MLP vs their CPU
#      references, host registration),
#   2. the recovery kernel's bandwidth next to a device-to-device copy (bench/recovery_bench.cc),
#   3. qwen2_moe mini: warm decode TPOT on CUDA (the GPU executor: every expert in device F slots;
#      host budgets and policies, where the runtime's pool F itself lives in the executor's device
#      slots; device budgets 25 % and 0 with the experts in host memory, the executor's own tier) next to
#      the CPU at 16 threads, logits compared, HBM and PCIe floors from bandwidths measured in the run,
#   4. `generate` on the CPU and on CUDA from the shipped checkpoint and its compressed directory,
#      compares token ids and logits (scripts/compare_logits.py), with and without DALI's greedy
#      CPU/GPU expert assignment,
#   5. every synthetic architecture on CUDA (checkpoint, compressed, under a budget) vs the CPU,
#   6. the executor's tests on the CUDA build,
#   7. the host's CPU on 6 and 12 cores: mini warm and cold at a 50 % budget (scripts/cpu_cores_check.sh),
#   8. `serve` vs `up` on CUDA (scripts/serve_up_check.sh): the same greedy tokens and logprobs byte for
#      byte at 25 % with zipmoe and lru, and with a 25 % device budget (pool F in the executor's slots).
# Results go to $OUT (default /tmp/gpu_check): summary.txt, and logs.tgz with one log per step.
# GPU_CHECK_STEPS (default "kernels cache recovery trained archs executor mini cores up") picks the sections to run;
# MINI_QUICK=1 runs only mini's CPU, all-resident CUDA and 25 % budget runs.
# GPU_CHECK_BUDGET_S (default 0: none): seconds of wall time (build included) after which the sections
# and mini runs not yet started are skipped, each with a line in the summary, so a run under a device
# time limit ends with its summary and logs.tgz instead of being cut (logs are also packed on SIGTERM).
#
# Usage: bash scripts/gpu_check.sh [DEBS_DIR]
#   DEBS_DIR (optional): Debian 12 .deb files of the build dependencies for a machine that cannot
#   reach a registry (scripts/gpu_debs.sh DIR downloads them); they are unpacked under
#   /tmp/zipmoe-deps and used from there (nothing is installed into /).
set -u -o pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${GPU_BUILD_DIR:-/tmp/zipmoe-gpu-build}
ARCH=${CMAKE_CUDA_ARCHITECTURES:-90}
DEBS=${1:-}
SUMMARY="$OUT/summary.txt"
# Logs and bandwidth figures live beside $OUT until the end, when they are packed into logs.tgz, so
# summary.txt is the one file in $OUT even if the run is cut short.
LOGS=${GPU_CHECK_LOGS:-/tmp/gpu_check_logs}
rm -rf "$LOGS" && mkdir -p "$LOGS"
STEPS=" ${GPU_CHECK_STEPS:-kernels cache recovery trained archs executor mini cores up} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
BUDGET=${GPU_CHECK_BUDGET_S:-0}
over_budget() { [ "$BUDGET" -gt 0 ] && [ "$SECONDS" -ge "$BUDGET" ]; }
# section NAME: whether to run a section now (asked for, and time left in the budget).
section() {
  want "$1" || return 1
  if over_budget; then
    say "$1: skipped, ${SECONDS} s of the ${BUDGET} s budget spent"
    return 1
  fi
}
pack_logs() { (cd "$LOGS" && tar czf "$OUT/logs.tgz" --exclude='*.f32' *.log *.json *.txt 2>/dev/null); }
trap pack_logs EXIT
trap 'say "stopped by a signal after ${SECONDS} s"; exit 143' TERM INT
: >"$SUMMARY"
say() { echo "== $*" | tee -a "$SUMMARY"; }
step() {  # step NAME CMD...: runs CMD, log in $LOGS/NAME.log, result line in the summary
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  say "$name: rc=$rc ($((SECONDS - t0)) s)"
  tail -n 25 "$LOGS/$name.log"
  return $rc
}

say "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
say "os: $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME"), $(g++ --version | head -1), $(cmake --version | head -1)"
say "nvcc: $(nvcc --version 2>&1 | tail -1), ninja $(ninja --version 2>&1)"
TORCH_DIR=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null)
say "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1) at $TORCH_DIR"

if [ -n "$DEBS" ]; then
  D=/tmp/zipmoe-deps
  mkdir -p $D
  for f in "$DEBS"/*.deb; do dpkg-deb -x "$f" $D; done
  U=$D/usr
  L=$U/lib/x86_64-linux-gnu
  # .pc files name /usr; pkg-config must see the unpacked prefix. libzmq's private requirements
  # (krb5, pgm, norm, sodium, bsd) only matter for static links.
  sed -i "s|=/usr|=$U|g" $L/pkgconfig/*.pc $U/share/pkgconfig/*.pc 2>/dev/null
  sed -i '/^Requires.private/d' $L/pkgconfig/libzmq.pc
  export PATH=$U/bin:$PATH
  export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$L/pkgconfig:$U/share/pkgconfig
  export CMAKE_PREFIX_PATH=$U
  say "dependencies unpacked from $DEBS into $D ($(ls "$DEBS"/*.deb | wc -l) packages)"
fi

step configure cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DTorch_DIR="$TORCH_DIR/share/cmake/Torch" \
  ${CMAKE_EXTRA_ARGS:-} || { cp "$B/CMakeFiles/CMakeError.log" "$LOGS/" 2>/dev/null; exit 1; }
grep -E "zipmoe: CUDA|Torch|CUDA" "$LOGS/configure.log" | head -5 >>"$SUMMARY"
[ -n "${CONFIGURE_ONLY:-}" ] && exit 0
# The environment of this build, for commands run after this script: `. $B/env.sh`.
declare -p PATH LD_LIBRARY_PATH 2>/dev/null | sed 's/^declare -x/export/' >"$B/env.sh"
TARGETS="zipmoe"
want kernels && TARGETS+=" zipmoe_kernels_tests"
want cache && TARGETS+=" zipmoe_cache_manager_tests"
want recovery && TARGETS+=" recovery_bench"
want executor && TARGETS+=" zipmoe_executor_tests"
want cores && TARGETS+=" membw_bench"
step build ninja -C "$B" -k 0 $TARGETS
say "build errors: $(grep -c 'error:' "$LOGS/build.log")"
grep -m 20 'error:' "$LOGS/build.log" >>"$SUMMARY"
BIN=$B/bin
Z=$BIN/zipmoe
[ -n "${BUILD_ONLY:-}" ] && exit 0

# 1. Kernel tests on the device: every GPU test must run, not skip.
if section kernels && [ -x $BIN/zipmoe_kernels_tests ]; then
  step kernels_tests $BIN/zipmoe_kernels_tests
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$LOGS/kernels_tests.log" >>"$SUMMARY"
  grep -E "SKIPPED|FAILED" "$LOGS/kernels_tests.log" | head -10 >>"$SUMMARY"
fi
if section cache && [ -x $BIN/zipmoe_cache_manager_tests ]; then
  step cache_manager_tests $BIN/zipmoe_cache_manager_tests
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$LOGS/cache_manager_tests.log" >>"$SUMMARY"
fi
# 2. The recovery kernel's bandwidth (bytes moved: n E + n SM read, 2n written) next to a D2D copy.
if section recovery && [ -x $BIN/recovery_bench ]; then
  step recovery_bench $BIN/recovery_bench --benchmark_filter='Gpu|D2D' --benchmark_min_time=0.2 \
    --benchmark_out="$LOGS/recovery_bench.json" --benchmark_out_format=json
  grep -E "Gpu|D2D" "$LOGS/recovery_bench.log" >>"$SUMMARY"
fi
# 3. qwen2_moe mini (hidden 1024, 24 layers, 60 experts, top-4, a shared expert; 6.2 GB of BF16 experts):
#    warm decode TPOT (32 tokens after a 16-token prompt; the executor's own timer) on CUDA next to the
#    CPU (float32, 16 threads): every weight on the device (device F slots), host budgets and policies,
#    device budgets of 25 % and 0 (staging only) with the experts in host memory; logits compared;
#    floors from the device-to-device and pinned host-to-device bandwidth measured in the same run.
if section mini && [ -x "$Z" ]; then
  d=/tmp/zipmoe-gpu-mini
  V=151936
  IDS=5,17,42,99,7,3,11,64,128,256,1000,31,77,500,900,12
  if [ ! -f "$d/zip/manifest.bin" ]; then
    step synth_mini $Z synth --arch qwen2_moe --preset mini --out "$d/ckpt" --router-skew 0.5
    step compress_mini $Z compress "$d/ckpt" "$d/zip" --force --threads "$(nproc)"
  fi
  python3 - >"$LOGS/bandwidth.txt" 2>&1 <<'PY'
import torch
def rate(fn, nbytes, reps=20):
    fn(); torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps): fn()
    e.record(); torch.cuda.synchronize()
    return nbytes * reps / (s.elapsed_time(e) / 1e3)
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
h = torch.empty(n, dtype=torch.uint8).pin_memory()
print(f"d2d {rate(lambda: b.copy_(a), 2 * n):.4e}")  # bytes read + written per second
print(f"h2d {rate(lambda: a.copy_(h, non_blocking=True), n):.4e}")  # pinned host -> device
PY
  cat "$LOGS/bandwidth.txt" | tee -a "$SUMMARY"
  # Runs whose decode steps are traced (--trace-events): the summary gets where a step's time went by
  # span name (bench/trace_plot.py --line; "router scores to the host" is the layer's wait for the
  # device, the other spans the host's own time), so a launch-bound step shows without a profiler.
  TRACED=" cpu16 cuda_ckpt cuda_zip cuda_zip_b25 cuda_zip_d0 "
  gen() {  # gen TAG ARGS...: one greedy run, logits in $d/TAG.f32, TPOT and device slots into the summary
    local tag=$1; shift
    if over_budget; then
      say "mini $tag: skipped, ${SECONDS} s of the ${BUDGET} s budget spent"
      return 0
    fi
    local trace=()
    [[ "$TRACED" == *" $tag "* ]] && trace=(--trace-events "$LOGS/trace_$tag.json")
    step "mini_$tag" timeout 120 $Z generate --prompt-ids $IDS --max-new-tokens 32 --ignore-eos --json \
      --logits-out "$d/$tag.f32" "${trace[@]}" "$@"
    echo "mini $tag: $(grep -o '"tpot_s":[0-9.e-]*' "$LOGS/mini_$tag.log" | head -1) $(grep -o '"ttft_s":[0-9.e-]*' "$LOGS/mini_$tag.log" | head -1) $(grep -o '"device_experts":{[^}]*}' "$LOGS/mini_$tag.log" | head -1)" | tee -a "$SUMMARY"
    if [ ${#trace[@]} -gt 0 ] && [ -f "$LOGS/trace_$tag.json" ]; then
      python3 "$ROOT/bench/trace_plot.py" "$LOGS/trace_$tag.json" --line "mini $tag trace" 2>&1 | tail -1 | tee -a "$SUMMARY"
    fi
  }
  gen cpu16 --model "$d/ckpt" --device cpu --threads 16
  gen cuda_ckpt --model "$d/ckpt" --device cuda
  if [ -n "${MINI_QUICK:-}" ]; then  # a baseline: CPU, CUDA all-resident, CUDA at 25 %
    gen cuda_zip_b25 --model "$d/zip" --device cuda --memory-budget 25% --policy zipmoe
    pairs="cpu16:cuda_ckpt cuda_ckpt:cuda_zip_b25"
  else
    gen cuda_zip --model "$d/zip" --device cuda
    for b in 50 25 10; do gen "cuda_zip_b$b" --model "$d/zip" --device cuda --memory-budget $b% --policy zipmoe; done
    gen cuda_zip_b25_lru --model "$d/zip" --device cuda --memory-budget 25% --policy lru
    gen cuda_zip_d0 --model "$d/zip" --device cuda --device-memory-budget 0
    gen cuda_zip_h100_d25 --model "$d/zip" --device cuda --memory-budget 100% --policy zipmoe --device-memory-budget 25%
    gen cuda_zip_h100_d25_lru --model "$d/zip" --device cuda --memory-budget 100% --policy lru --device-memory-budget 25%
    gen cuda_zip_b25_d25 --model "$d/zip" --device cuda --memory-budget 25% --policy zipmoe --device-memory-budget 25%
    gen cuda_zip_b25_d100 --model "$d/zip" --device cuda --memory-budget 25% --policy zipmoe --device-memory-budget 100%
    pairs="cuda_ckpt:cuda_zip cuda_zip:cuda_zip_b50 cuda_zip:cuda_zip_b25 cuda_zip:cuda_zip_b10 cuda_zip:cuda_zip_b25_lru"
    pairs+=" cuda_zip:cuda_zip_d0 cuda_zip:cuda_zip_h100_d25 cuda_zip:cuda_zip_h100_d25_lru cuda_zip:cuda_zip_b25_d25"
    pairs+=" cuda_zip:cuda_zip_b25_d100 cpu16:cuda_zip"
  fi
  for pair in $pairs; do
    echo "mini: ${pair%%:*} vs ${pair##*:}: $(python3 "$ROOT/scripts/compare_logits.py" "$d/${pair%%:*}.f32" "$d/${pair##*:}.f32" --vocab "$V" 2>&1)" \
      | tee -a "$SUMMARY"
  done
  # Floors: weights one decode token reads (BF16: attention, shared expert, top-k experts, lm_head;
  # the float32 router) over the device copy rate; host->device bytes per forward step (the prompt's
  # step included, so an upper bound for a decode step) over the pinned copy rate.
  python3 - "$d/ckpt/config.json" "$LOGS" "$ROOT" <<'PY' | tee -a "$SUMMARY"
import json, re, sys, glob, os
c = json.load(open(sys.argv[1])); out = sys.argv[2]
sys.path.insert(0, os.path.join(sys.argv[3], "scripts"))
from decode_bytes import decode_bytes
bw = dict(l.split() for l in open(os.path.join(out, "bandwidth.txt")) if re.match(r"^(d2d|h2d) ", l))
d2d, h2d = float(bw.get("d2d", "nan")), float(bw.get("h2d", "nan"))
per_token = decode_bytes(c)
hbm_floor = per_token / d2d
def field(tag, key):
    try:
        t = open(os.path.join(out, f"mini_{tag}.log")).read()
        m = re.search(r'"%s":([0-9.e+-]+)' % key, t)
        return float(m.group(1)) if m else None
    except OSError:
        return None
cpu = field("cpu16", "tpot_s")
print(f"mini floors: {per_token/1e6:.1f} MB of weights per token; HBM floor {hbm_floor*1e3:.3f} ms (d2d {d2d/1e12:.2f} TB/s); pinned h2d {h2d/1e9:.1f} GB/s")
for tag in ["cuda_ckpt", "cuda_zip", "cuda_zip_b25", "cuda_zip_d0", "cuda_zip_h100_d25", "cuda_zip_h100_d25_lru", "cuda_zip_b25_d25",
            "cuda_zip_b25_d100"]:
    t = field(tag, "tpot_s")
    if t is None: continue
    line = f"mini {tag}: TPOT {t*1e3:.2f} ms = {t/hbm_floor:.1f}x the HBM floor"
    if cpu: line += f", {t/cpu:.3f}x the CPU's at 16 threads ({cpu*1e3:.2f} ms)"
    b = field(tag, "bytes_in")
    if b:
        steps = 32  # the prompt's step + 31 decode steps
        floor = b / steps / h2d
        line += f"; {b/1e6:.0f} MB to the device ({b/steps/1e6:.1f} MB/step): PCIe floor {floor*1e3:.2f} ms, TPOT/floor {t/floor:.2f}"
    print(line)
PY
fi
# 4. generate: CPU (float32) vs CUDA (BF16), from the checkpoint and from its compressed directory.
if section trained && [ -x "$Z" ]; then
  M=$ROOT/models/qwen2moe-debian-18m
  C=/tmp/zipmoe-gpu-compressed
  step compress $Z compress "$M" "$C" --force
  step verify $Z verify "$M" "$C"
  P="The cat sat on the"
  V=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$M/config.json")
  for src in ckpt:$M zip:$C; do
    tag=${src%%:*} dir=${src#*:}
    for dev in cpu cuda; do
      step "gen_${tag}_$dev" $Z generate --model "$dir" --prompt "$P" --max-new-tokens 16 --ignore-eos --device $dev \
        --logits-out "$LOGS/logits_${tag}_$dev.f32" --json
    done
  done
  step gen_zip_cuda_budget $Z generate --model "$C" --prompt "$P" --max-new-tokens 16 --ignore-eos --device cuda \
    --memory-budget 50% --logits-out "$LOGS/logits_zipb_cuda.f32" --json
  step gen_zip_cuda_greedy $Z generate --model "$C" --prompt "$P" --max-new-tokens 16 --ignore-eos --device cuda \
    --device-assignment greedy --logits-out "$LOGS/logits_zipg_cuda.f32" --json
  for pair in "ckpt_cpu zip_cpu" "zip_cuda zipb_cuda" "ckpt_cuda zip_cuda" "zip_cpu zip_cuda" "zip_cuda zipg_cuda"; do
    set -- $pair
    echo "compare $1 vs $2: $(python3 "$ROOT/scripts/compare_logits.py" "$LOGS/logits_$1.f32" "$LOGS/logits_$2.f32" --vocab "$V" 2>&1)" \
      | tee -a "$SUMMARY"
  done
  for f in "$LOGS"/gen_*.log; do
    echo "$(basename "$f" .log): $(grep -o '"generated_ids":\[[0-9,]*\]' "$f" | head -1) $(grep -o '"tpot_s":[0-9.e-]*' "$f" | head -1)" >>"$SUMMARY"
  done
fi
# 5. Every architecture (synthetic tiny checkpoints, two of them FP8, gpt_oss with MXFP4 experts, granitemoeshared with its
#    multipliers and fused experts): CUDA from the checkpoint, from the compressed
#    directory and under a 30 % budget must give the same bytes; CUDA vs the CPU: same tokens.
if section archs && [ -x "$Z" ]; then
  for spec in qwen2_moe qwen3_moe olmoe mixtral deepseek_v2 glm4_moe deepseek_v3:fp8 glm4_moe:fp8 gpt_oss granitemoeshared; do
    arch=${spec/:/_}  # FP8 checkpoints (issue 40): dense weights dequantized at load, experts into their slots
    dtype_flag=""
    [ "${spec#*:}" = fp8 ] && dtype_flag="--dtype fp8"
    d=/tmp/zipmoe-gpu-$arch
    step "synth_$arch" $Z synth --arch ${spec%%:*} $dtype_flag --preset tiny --out "$d/ckpt" --router-skew 0.5 || continue
    step "compress_$arch" $Z compress "$d/ckpt" "$d/zip" --force || continue
    V=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$d/ckpt/config.json")
    for run in "ckpt cpu" "ckpt cuda" "zip cuda" "zip cuda 30%"; do
      set -- $run
      tag="$1_$2${3:+_b}"
      step "gen_${arch}_$tag" $Z generate --model "$d/$1" --prompt-ids 5,17,42,99,7,3 --max-new-tokens 12 \
        --ignore-eos --device $2 ${3:+--memory-budget $3} --logits-out "$d/$tag.f32" --json >/dev/null
    done
    for pair in "ckpt_cuda zip_cuda" "zip_cuda zip_cuda_b" "ckpt_cpu ckpt_cuda"; do
      set -- $pair
      echo "$arch: $1 vs $2: $(python3 "$ROOT/scripts/compare_logits.py" "$d/$1.f32" "$d/$2.f32" --vocab "$V" 2>&1)" \
        | tee -a "$SUMMARY"
    done
  done
fi
# 6. The executor's tests on a CUDA build.
if section executor && [ -x $BIN/zipmoe_executor_tests ]; then
  step executor_tests timeout ${EXECUTOR_TESTS_TIMEOUT:-150} $BIN/zipmoe_executor_tests
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$LOGS/executor_tests.log" | head -20 >>"$SUMMARY"
fi
# 7. The host's CPU on 6 and 12 of its cores (issue 36 item 7): mini warm, and cold at a 50 % budget.
if section cores && [ -x "$Z" ]; then
  d=/tmp/zipmoe-gpu-mini
  if [ ! -f "$d/zip/manifest.bin" ]; then
    step synth_mini $Z synth --arch qwen2_moe --preset mini --out "$d/ckpt" --router-skew 0.5
    step compress_mini $Z compress "$d/ckpt" "$d/zip" --force --threads "$(nproc)"
  fi
  step cores bash "$ROOT/scripts/cpu_cores_check.sh" "$Z" "$d/ckpt" "$d/zip" "$LOGS" ${CORES:-6 12}
  grep -E '^cores ' "$LOGS/cores.log" >>"$SUMMARY"
fi
# 8. serve vs up on CUDA (issue 36: byte-identical logits across serve and up): the trained model's
#    compressed directory, 25 % host budget with zipmoe and lru, then a 25 % device budget apart.
if section up && [ -x "$Z" ]; then
  C=/tmp/zipmoe-gpu-compressed
  [ -f "$C/manifest.bin" ] || step compress $Z compress "$ROOT/models/qwen2moe-debian-18m" "$C" --force
  for run in "25% zipmoe auto" "25% lru auto" "100% zipmoe 25%"; do
    set -- $run
    name="serve_up_${2}_b${1%\%}_d${3%\%}"
    step "$name" bash "$ROOT/scripts/serve_up_check.sh" "$Z" "$C" "$LOGS/$name" "${UP_DEVICE:-cuda}" "$@"
    grep -E '^serve-up ' "$LOGS/$name.log" >>"$SUMMARY"
    grep -ho 'pools [^,]*' "$LOGS/$name/up.log" | head -1 >>"$SUMMARY"
  done
fi
say "done in ${SECONDS} s"
