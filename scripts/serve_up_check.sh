#!/usr/bin/env bash
# serve vs up: one greedy completion (prompt ids, ignore_eos, logprobs with the top 5) from `zipmoe serve`
# (embedded runtime) and from `zipmoe up` (every service its own process) on the same compressed model,
# device, budget and policy; the token ids and every logprob must be byte-identical (issue 36: "the GPU
# path's logits byte-identical across ... serve and up"; on CUDA both keep pool F in the executor's
# device slots). Prints one line per run and a verdict line starting with "serve-up".
#
# Usage: scripts/serve_up_check.sh ZIPMOE MODEL_DIR OUT_DIR [DEVICE] [BUDGET] [POLICY] [DEVICE_BUDGET]
#   DEVICE cpu (default) or cuda; BUDGET e.g. 50% (default); POLICY zipmoe (default) or lru;
#   DEVICE_BUDGET auto (default), N% or a size (--device-memory-budget / device_memory_budget).
# Exit status: 0 identical, 1 different, 2 a run failed (its log is in OUT_DIR).
set -u -o pipefail
Z=$1 M=$2 O=$3
DEV=${4:-cpu} BUDGET=${5:-50%} POLICY=${6:-zipmoe} DBUDGET=${7:-auto}
TOKENS=${SERVE_UP_TOKENS:-16}
mkdir -p "$O"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
BODY=$(python3 -c 'import json,sys; print(json.dumps({"prompt":[5,17,42,99,7,3,11,64],"max_tokens":int(sys.argv[1]),
  "temperature":0,"ignore_eos":True,"logprobs":5}))' "$TOKENS")
# ask NAME PORT PID: waits for /health (up to 300 s while PID lives), then one completion into O/NAME.json.
ask() {
  local name=$1 port=$2 pid=$3 i
  for i in $(seq 1 3000); do
    kill -0 "$pid" 2>/dev/null || { echo "$name: exited before it was healthy (see $O/$name.log)"; return 2; }
    http "$port" /health >/dev/null 2>&1 && break
    sleep 0.1
  done
  http "$port" /v1/completions "$BODY" >"$O/$name.json" || { echo "$name: the completion failed (see $O/$name.log)"; return 2; }
}
# http PORT PATH [BODY]: GET (or POST the JSON body) on 127.0.0.1:PORT; the reply on stdout; fails unless 200.
http() {
  python3 - "$@" <<'PY'
import sys, urllib.request
port, path = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=300) as r:
    sys.stdout.write(r.read().decode())
PY
}
stop() { kill -TERM "$1" 2>/dev/null; for _ in $(seq 1 200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done; kill -KILL "$1" 2>/dev/null; }

rc=0
P=$(free_port)
"$Z" serve --model "$M" --port "$P" --device "$DEV" --memory-budget "$BUDGET" --policy "$POLICY" \
  --device-memory-budget "$DBUDGET" >"$O/serve.log" 2>&1 &
S=$!
ask serve "$P" "$S" || rc=2
stop "$S"

P=$(free_port)
R=$(mktemp -d /tmp/zipmoe-serve-up.XXXXXX)
"$Z" up --model "$M" --port "$P" --run-dir "$R" --memory-budget "$BUDGET" --policy "$POLICY" --set device="$DEV" \
  --set device_memory_budget="$DBUDGET" --set metrics.port.storage=0 --set metrics.port.decompressor=0 \
  --set metrics.port.scheduler=0 --set metrics.port.executor=0 --set metrics.port.cache_manager=0 \
  --set metrics.port.front=0 --set metrics.port.up=0 >"$O/up.log" 2>&1 &
U=$!
ask up "$P" "$U" || rc=2
stop "$U"
rm -rf "$R"
[ $rc -ne 0 ] && { echo "serve-up $DEV $BUDGET $POLICY device budget $DBUDGET: a run failed"; exit $rc; }

python3 - "$O/serve.json" "$O/up.json" "$DEV $BUDGET $POLICY device budget $DBUDGET" <<'PY'
import json, sys
a, b = (json.load(open(p))["choices"][0]["logprobs"] for p in sys.argv[1:3])
what = sys.argv[3]
same = a["tokens"] == b["tokens"] and a["token_logprobs"] == b["token_logprobs"] and a["top_logprobs"] == b["top_logprobs"]
diff = max((abs(x - y) for x, y in zip(a["token_logprobs"], b["token_logprobs"])), default=float("nan"))
print(f"serve-up {what}: {'identical' if same else 'DIFFERENT'} ({len(a['tokens'])} tokens, "
      f"max |logprob serve - up| {diff:.3g}; first tokens {a['tokens'][:4]} vs {b['tokens'][:4]})")
sys.exit(0 if same else 1)
PY
