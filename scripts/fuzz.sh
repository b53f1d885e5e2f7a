#!/usr/bin/env bash
# Builds and runs zipmoe's libFuzzer targets (tests/fuzz/: the parsers of untrusted bytes), each for
# N seconds on a fresh copy of its seed corpus (tests/fuzz/corpus/<target>/) under ASan + UBSan
# (any finding aborts: halt_on_error), and prints per target the executions, exec/s and coverage
# (libFuzzer's cov / ft at the end). Exits 0 iff no target crashed, leaked, hung or hit UB.
#   scripts/fuzz.sh [--seconds N] [--build-dir DIR] [--make-seeds] [TARGET...]
#     --seconds N     fuzzing time per target (default 5; the recorded long run is --seconds 600)
#     --build-dir DIR clang build of tests/fuzz (default build-fuzz/; incremental)
#     --make-seeds    rewrite the generated seeds (messages, small manifests and safetensors) first
#     TARGET          safetensors safetensors_index manifest message tokenizer_load tokenizer_encode
#                     tiktoken model_config chat_template openai_request chat_output json_grammar (default: all)
# Findings (the crashing input, minimized with -minimize_crash) are kept under
# <build-dir>/artifacts/<target>/; reproduce one with <build-dir>/<target>_fuzz FILE. Needs clang,
# libclang-rt-dev (libFuzzer) and llvm (llvm-symbolizer): scripts/install_deps.sh installs them.
# The ctest fuzz_regression runs this with --seconds 3.
set -euo pipefail
TAG=fuzz
REPO=$(cd "$(dirname "$0")/.." && pwd)
ALL_TARGETS=(safetensors safetensors_index manifest message tokenizer_load tokenizer_encode tiktoken model_config
             chat_template openai_request chat_output json_grammar)

seconds=5
build_dir=$REPO/build-fuzz
make_seeds=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --make-seeds) make_seeds=1; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "$TAG: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -eq 0 ] && targets=("${ALL_TARGETS[@]}")
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || { echo "$TAG: unknown target '$t' (${ALL_TARGETS[*]})" >&2; exit 2; }
done
[[ $seconds =~ ^[0-9]+$ ]] && [ "$seconds" -ge 1 ] || { echo "$TAG: --seconds wants a positive integer" >&2; exit 2; }

# Toolchain: clang with libFuzzer's runtime (Debian: clang + libclang-rt-dev), cmake, ninja. A missing
# piece is a failure, never a skip.
missing=()
command -v clang >/dev/null || missing+=("clang (package clang)")
command -v clang++ >/dev/null || missing+=("clang++ (package clang)")
command -v cmake >/dev/null || missing+=("cmake (package cmake)")
command -v ninja >/dev/null || missing+=("ninja (package ninja-build)")
if command -v clang >/dev/null; then
  fuzzer_rt=$(clang --print-file-name="libclang_rt.fuzzer-$(uname -m).a" 2>/dev/null || true)
  [ -f "$fuzzer_rt" ] || missing+=("libFuzzer runtime libclang_rt.fuzzer-$(uname -m).a (package libclang-rt-dev)")
fi
if [ ${#missing[@]} -ne 0 ]; then
  echo "$TAG: FAILED: missing ${missing[*]}; run scripts/install_deps.sh" >&2
  exit 1
fi

mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
start=$(date +%s)
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S "$REPO/tests/fuzz" -B "$build_dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("${t}_fuzz"); done
[ $make_seeds -eq 1 ] && build_targets+=(make_seeds)
cmake --build "$build_dir" -j "$(nproc)" --target "${build_targets[@]}"
echo "$TAG: build $(( $(date +%s) - start )) s"
if [ $make_seeds -eq 1 ]; then
  "$build_dir/make_seeds" "$REPO/tests/fuzz/corpus"
  echo "$TAG: wrote the generated seeds into tests/fuzz/corpus"
fi

symbolizer=$(command -v llvm-symbolizer || true)
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=1${symbolizer:+:external_symbolizer_path=$symbolizer}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1${symbolizer:+:external_symbolizer_path=$symbolizer}"

rows=()
failed=()
for t in "${targets[@]}"; do
  work=$build_dir/work/$t
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/tmp" "$build_dir/artifacts/$t"
  cp "$REPO/tests/fuzz/corpus/$t/"* "$work/corpus/"
  log=$work/fuzz.log
  rc=0
  # -timeout: one input running longer is a hang (a finding); -rss_limit_mb: a memory blow-up is too.
  TMPDIR=$work/tmp "$build_dir/${t}_fuzz" -max_total_time="$seconds" -print_final_stats=1 -timeout=25 \
    -rss_limit_mb=2048 -artifact_prefix="$build_dir/artifacts/$t/" "$work/corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  corp=$(grep -oE 'corp: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  crash=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/Test unit written to //' || true)
  if [ $rc -eq 0 ]; then
    result=ok
  else
    result="CRASH rc=$rc"
    failed+=("$t")
    echo "$TAG: $t FAILED (rc $rc); last lines of $log:" >&2
    grep -E 'ERROR|SUMMARY|runtime error|harness:|#[0-9]+ 0x' "$log" |
      grep -vE 'sanitizer|fuzzer::|__ubsan|__asan|libc\.so|nptl/|stdlib/|signal/' | head -25 >&2 || true
    [ -n "$crash" ] && echo "$TAG: $t: input saved as $crash (reproduce: $build_dir/${t}_fuzz $crash)" >&2
  fi
  rows+=("$(printf '%-18s %7s %12s %10s %7s %7s %7s  %s' "$t" "$seconds" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result")")
done

printf '%-18s %7s %12s %10s %7s %7s %7s  %s\n' target seconds execs exec/s cov ft corpus result
printf '%s\n' "${rows[@]}"
if [ ${#failed[@]} -ne 0 ]; then
  echo "$TAG: FAILED: ${failed[*]} (inputs under $build_dir/artifacts/)" >&2
  exit 1
fi
echo "$TAG: OK: ${#targets[@]} targets, ${seconds} s each, no crash"
