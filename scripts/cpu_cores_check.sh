#!/usr/bin/env bash
# Many-core CPU numbers (issue 36 item 7): qwen2_moe on C of this host's cores (taskset -c 0..C-1,
# --threads C) for each C given, warm (the HF checkpoint, every weight read into the page cache
# first) and cold at a 50 % budget (the compressed directory; the page cache is dropped first when
# this user may write /proc/sys/vm/drop_caches, and the line says whether it was). Prints one line
# per core count: warm and cold TPOT, cold / warm, the runtime's hit rate and MiB read per decode
# step. A C above nproc is skipped with a line saying so. scripts/gpu_check.sh runs it (step "cores")
# on the GPU host's CPU with C = 6 and 12.
#
# Usage: scripts/cpu_cores_check.sh ZIPMOE_BIN HF_DIR COMPRESSED_DIR LOG_DIR C...
set -u -o pipefail
if [ $# -lt 5 ]; then
  echo "usage: $0 ZIPMOE_BIN HF_DIR COMPRESSED_DIR LOG_DIR C..." >&2
  exit 2
fi
Z=$1 HF=$2 ZIP=$3 LOGS=$4
shift 4
IDS=${CORES_PROMPT_IDS:-5,17,42,99,7,3,11,64,128,256,1000,31,77,500,900,12}
TOKENS=${CORES_TOKENS:-32}
mkdir -p "$LOGS"
rc=0
for c in "$@"; do
  if [ "$(nproc)" -lt "$c" ]; then
    echo "cores $c: skipped (this host shows $(nproc) cores)"
    continue
  fi
  cpus=0-$((c - 1))
  cat "$HF"/*.safetensors >/dev/null
  warm_log=$LOGS/cores${c}_warm.log cold_log=$LOGS/cores${c}_cold50.log
  timeout 300 taskset -c "$cpus" "$Z" generate --model "$HF" --prompt-ids "$IDS" --max-new-tokens "$TOKENS" \
    --ignore-eos --threads "$c" --json >"$warm_log" 2>&1 || { echo "cores $c: warm run failed ($warm_log)"; rc=1; continue; }
  dropped=no
  if sync && (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then dropped=yes; fi
  timeout 600 taskset -c "$cpus" "$Z" generate --model "$ZIP" --prompt-ids "$IDS" --max-new-tokens "$TOKENS" \
    --ignore-eos --threads "$c" --memory-budget 50% --json >"$cold_log" 2>&1 || { echo "cores $c: cold run failed ($cold_log)"; rc=1; continue; }
  python3 - "$c" "$warm_log" "$cold_log" "$dropped" "$TOKENS" <<'PY'
import json, re, sys
c, warm_log, cold_log, dropped, tokens = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
def last_json(path):
    for line in reversed(open(path, errors="replace").read().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"cores {c}: no JSON result in {path}")
warm, cold = last_json(warm_log), last_json(cold_log)
stats = re.search(r"hit rate ([0-9.]+)%, read ([0-9.]+) MiB", open(cold_log, errors="replace").read())
line = (f"cores {c}: warm TPOT {warm['tpot_s'] * 1e3:.1f} ms, cold 50 % TPOT {cold['tpot_s'] * 1e3:.1f} ms "
        f"(page cache dropped: {dropped}), cold / warm {cold['tpot_s'] / warm['tpot_s']:.2f}")
if stats:
    line += (f"; hit rate {stats.group(1)} %, {float(stats.group(2)):.0f} MiB read "
             f"({float(stats.group(2)) / tokens:.1f} MiB per step, prompt included)")
same = warm["generated_ids"] == cold["generated_ids"]
line += f"; same tokens: {'yes' if same else 'NO'}"
print(line)
sys.exit(0 if same else 1)
PY
  [ $? -eq 0 ] || rc=1
done
exit $rc
