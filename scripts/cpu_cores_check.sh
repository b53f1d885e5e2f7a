#!/usr/bin/env bash
# Many-core CPU numbers (issue 36 item 7): qwen2_moe on C of this host's cores (taskset -c 0..C-1,
# --threads C) for each C given, warm (the HF checkpoint, every weight read into the page cache
# first) and cold at a 50 % budget (the compressed directory; the page cache is dropped first when
# this user may write /proc/sys/vm/drop_caches, and the line says whether it was). Prints one line
# per core count: warm and cold TPOT, cold / warm, the runtime's hit rate and MiB read per decode
# step, and the warm TPOT against the DRAM floor on those cores (scripts/decode_bytes.py's bytes per
# token over membw_bench's best read at C threads, pinned alike; membw_bench beside ZIPMOE_BIN), after
# one line with the host's topology (lscpu: threads per core, cores, sockets, NUMA nodes). A C above
# nproc is skipped with a line saying so. scripts/gpu_check.sh runs it (step "cores") on the GPU
# host's CPU with C = 6 and 12.
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
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MEMBW=$(dirname "$Z")/membw_bench
BYTES=$(python3 "$ROOT/scripts/decode_bytes.py" "$HF/config.json" 2>"$LOGS/decode_bytes.err") || BYTES=
echo "cores: host $(lscpu 2>/dev/null | awk -F: '/^Model name|^Thread\(s\) per core|^Core\(s\) per socket|^Socket\(s\)|^NUMA node\(s\)/ {gsub(/^ +/, "", $2); printf "%s%s: %s", sep, $1, $2; sep="; "}'), nproc $(nproc)"
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
  gbps=
  if [ -x "$MEMBW" ]; then
    taskset -c "$cpus" "$MEMBW" --threads "$c" --reps 5 >"$LOGS/cores${c}_membw.log" 2>&1 &&
      gbps=$(grep -o '"gbps": [0-9.]*' "$LOGS/cores${c}_membw.log" | head -1 | awk '{print $2}')
  fi
  python3 - "$c" "$warm_log" "$cold_log" "$dropped" "$TOKENS" "${gbps:-}" "${BYTES:-}" <<'PY'
import json, re, sys
c, warm_log, cold_log, dropped, tokens = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
gbps, per_token = (float(sys.argv[6]) if sys.argv[6] else None), (int(sys.argv[7]) if sys.argv[7] else None)
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
if gbps and per_token:
    floor = per_token / (gbps * 1e9)
    line += (f"; warm TPOT / DRAM floor {warm['tpot_s'] / floor:.2f} ({per_token / 1e9:.2f} GB a token, "
             f"membw_bench {gbps:.1f} GB/s on these cores: floor {floor * 1e3:.1f} ms)")
else:
    line += "; no DRAM floor (membw_bench or decode_bytes.py missing)"
same = warm["generated_ids"] == cold["generated_ids"]
line += f"; same tokens: {'yes' if same else 'NO'}"
print(line)
sys.exit(0 if same else 1)
PY
  [ $? -eq 0 ] || rc=1
done
exit $rc
