#!/usr/bin/env bash
# ctest serve_up_logprobs: scripts/serve_up_check.sh on the CPU with a tiny synthetic qwen2_moe (issue 36's
# serve == up check, which gpu_check.sh runs on CUDA): the same greedy tokens and top-5 logprobs byte for
# byte from `zipmoe serve` and `zipmoe up` at a 30 % budget with zipmoe and lru.
# Usage: tests/scripts/serve_up_check_test.sh ZIPMOE
set -eu -o pipefail
Z=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /tmp/zipmoe-serve-up-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
"$Z" synth --arch qwen2_moe --preset tiny --seed 5 --out "$T/ckpt" >"$T/synth.log" 2>&1
"$Z" compress "$T/ckpt" "$T/zip" --shards 4 >"$T/compress.log" 2>&1
for policy in zipmoe lru; do
  bash "$ROOT/scripts/serve_up_check.sh" "$Z" "$T/zip" "$T/out_$policy" cpu 30% "$policy" || {
    tail -n 20 "$T/out_$policy"/*.log; exit 1; }
done
