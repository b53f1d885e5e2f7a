#!/usr/bin/env bash
# tests/openai/run.sh ZIPMOE_BIN MODE [scripted | scripted-harmony]   (MODE: serve | up)
#
# With `scripted`, the model is tests/openai/make_scripted_model.py's (a tiny qwen2_moe whose greedy
# answer is a known reasoning block and tool call, with a tool-aware chat template) and the tests are
# tests/openai/scripted_tools.mjs (ctest openai_sdk_tools_serve / openai_sdk_tools_up); steps 4-5 are
# skipped. `scripted-harmony` (issue 41) does the same with a tiny gpt_oss whose answer is a Harmony
# analysis message and a call in the commentary channel, under gpt-oss's published chat template
# (openai-gpt-oss-120b.jinja of llama.cpp's models/templates, unpacked from the llama.cpp source bundle
# in tests/chat_template_reference/node_modules, as that test does): tests/openai/scripted_harmony.mjs
# (ctest openai_sdk_harmony_serve), which also needs python3-jinja2 (the template's jinja2 rendering).
#
# The OpenAI API compatibility suite, through the official `openai` npm package (tests/openai/*.test.mjs,
# node:test). Registered in ctest as openai_sdk_serve / openai_sdk_up (tests/CMakeLists.txt).
#  1. synthesizes a tiny qwen2_moe model in a temp dir (`up`: and its compressed copy, which it serves);
#  2. starts the server on a free port in its own process group, --max-batch 4, with the API key in the
#     environment (ZIPMOE_API_KEY), and waits up to 120 s for GET /health == 200;
#  3. runs `node --test` on the test files, one file at a time, with ZIPMOE_BASE_URL, ZIPMOE_MODEL_ID,
#     ZIPMOE_MODE, ZIPMOE_API_KEY and ZIPMOE_MAX_BATCH in the environment;
#  4. (spec point 18) starts 2 long non-streaming requests (no max_tokens, ignore_eos) with curl, sends SIGTERM and
#     requires the server to exit within 5 s;
# and cleans up on any exit (the process group is SIGKILLed if still there). Exit 0 iff every step passed;
# on failure the server's stderr is printed.
# Needs node >= 20 and tests/openai/node_modules (scripts/install_deps.sh runs `npm ci` there), curl,
# /usr/bin/python3 (free port), promtool (optional: the promtool check is skipped without it).
# Environment: ZIPMOE_OPENAI_THREADS (torch threads of the server, default 1), ZIPMOE_OPENAI_KEEP=1
# keeps the temp dir, ZIPMOE_OPENAI_TESTS (file glob under tests/openai, default *.test.mjs), and
# ZIPMOE_OPENAI_TEST_ARGS (more `node --test` arguments, e.g. --test-name-pattern=...).
set -uo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ] || { [ "$2" != serve ] && [ "$2" != up ]; } ||
   { [ $# -eq 3 ] && [ "$3" != scripted ] && [ "$3" != scripted-harmony ]; }; then
  echo "usage: $0 ZIPMOE_BIN serve|up [scripted|scripted-harmony]" >&2
  exit 2
fi
BIN=$(readlink -f "$1")
MODE=$2
SCRIPTED=0
HARMONY=0
[ "${3:-}" = scripted ] && SCRIPTED=1
[ "${3:-}" = scripted-harmony ] && SCRIPTED=1 && HARMONY=1
HERE=$(cd "$(dirname "$0")" && pwd)
API_KEY=some-key
MAX_BATCH=4
THREADS=${ZIPMOE_OPENAI_THREADS:-1}
say() { echo "openai_sdk_$MODE: $*" >&2; }

if [ ! -d "$HERE/node_modules/openai" ]; then
  say "tests/openai/node_modules is missing: run scripts/install_deps.sh (it runs 'npm ci' in tests/openai)"
  exit 1
fi
command -v node >/dev/null || { say "node not found (Node >= 20 needed)"; exit 1; }
command -v curl >/dev/null || { say "curl not found"; exit 1; }
for _ in $(seq 1 60); do [ -x "$BIN" ] && break; sleep 1; done  # the binary may be being relinked
[ -x "$BIN" ] || { say "$BIN is not an executable"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zipmoe-openai-$MODE.XXXXXX")
SERVER_PID=  # also its process group id (setsid)
CURL_PIDS=()
# A child that exited stays a zombie until waited for, and kill -0 still finds it: read its state.
alive() {
  local state
  state=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
cleanup() {
  local rc=$?
  for p in "${CURL_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  # Whatever is left of the server's process group (`up`'s services too).
  if [ -n "$SERVER_PID" ]; then kill -KILL -- "-$SERVER_PID" 2>/dev/null; fi
  if [ "${ZIPMOE_OPENAI_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

print_log() {
  echo "----- server stderr ($MODE, last 200 lines) -----" >&2
  tail -n 200 "$TMP/server.err" >&2 2>/dev/null
  echo "----- end of server stderr -----" >&2
}

# 1. The model. The directory's basename is the id GET /v1/models lists.
HF="$TMP/tiny-qwen2-moe"
ARCH=qwen2_moe
if [ "$HARMONY" = 1 ]; then
  HF="$TMP/tiny-gpt-oss"
  ARCH=gpt_oss
fi
"$BIN" synth --arch "$ARCH" --preset tiny --seed 7 --out "$HF" > "$TMP/synth.log" 2>&1 || {
  cat "$TMP/synth.log" >&2; say "synth failed"; exit 1; }
HARMONY_TEMPLATE=
if [ "$HARMONY" = 1 ]; then
  BUNDLE="$HERE/../chat_template_reference/node_modules/.zipmoe-llama-cpp/gitRelease.bundle"
  [ -f "$BUNDLE" ] || { say "$BUNDLE is missing: run scripts/install_deps.sh"; exit 1; }
  /usr/bin/python3 -c "import jinja2" 2>/dev/null || {
    say "python3-jinja2 is missing: run scripts/install_deps.sh (Debian's python3-jinja2)"; exit 1; }
  git init -q --bare "$TMP/llama.git" &&
    head=$(git -C "$TMP/llama.git" bundle unbundle "$BUNDLE" 2>/dev/null | awk 'NR == 1 { print $1 }') &&
    [ -n "$head" ] && mkdir -p "$TMP/llama" &&
    git -C "$TMP/llama.git" archive "$head" models/templates/openai-gpt-oss-120b.jinja | tar -x -C "$TMP/llama" ||
    { say "cannot unpack models/templates/openai-gpt-oss-120b.jinja from $BUNDLE"; exit 1; }
  HARMONY_TEMPLATE="$TMP/llama/models/templates/openai-gpt-oss-120b.jinja"
  /usr/bin/python3 "$HERE/make_scripted_model.py" --base "$HF" --harmony "$HARMONY_TEMPLATE" \
    --out "$TMP/scripted-gpt-oss" > "$TMP/scripted.log" 2>&1 || {
    cat "$TMP/scripted.log" >&2; say "make_scripted_model.py --harmony failed"; exit 1; }
  HF="$TMP/scripted-gpt-oss"
elif [ "$SCRIPTED" = 1 ]; then
  /usr/bin/python3 "$HERE/make_scripted_model.py" --base "$HF" --out "$TMP/scripted-qwen2-moe" > "$TMP/scripted.log" 2>&1 || {
    cat "$TMP/scripted.log" >&2; say "make_scripted_model.py failed"; exit 1; }
  HF="$TMP/scripted-qwen2-moe"
fi
MODEL_DIR=$HF
if [ "$MODE" = up ]; then
  MODEL_DIR="$HF.z"
  "$BIN" compress "$HF" "$MODEL_DIR" --shards 4 > "$TMP/compress.log" 2>&1 || {
    cat "$TMP/compress.log" >&2; say "compress failed"; exit 1; }
fi
MODEL_ID=$(basename "$MODEL_DIR")

# 2. The server, in its own process group (setsid) so a failure can SIGKILL everything it started.
PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ "$MODE" = serve ]; then
  CMD=("$BIN" serve --model "$MODEL_DIR" --port "$PORT" --max-batch "$MAX_BATCH" --threads "$THREADS")
else
  # Metrics endpoints of the services off (0): other servers may run on this machine; the API's own
  # /metrics is on the API port.
  CMD=("$BIN" up --model "$MODEL_DIR" --port "$PORT" --run-dir "$TMP/run" --memory-budget 50%
       --set "http.max_batch=$MAX_BATCH" --set "threads=$THREADS"
       --set metrics.port.storage=0 --set metrics.port.decompressor=0 --set metrics.port.scheduler=0
       --set metrics.port.executor=0 --set metrics.port.cache_manager=0)
fi
say "starting: ZIPMOE_API_KEY=$API_KEY ${CMD[*]}"
ZIPMOE_API_KEY=$API_KEY setsid "${CMD[@]}" > "$TMP/server.out" 2> "$TMP/server.err" < /dev/null &
SERVER_PID=$!

BASE_URL="http://127.0.0.1:$PORT"
healthy=0
for _ in $(seq 1 240); do
  if ! alive "$SERVER_PID"; then
    wait "$SERVER_PID"; say "the server exited (status $?) before it was healthy"; print_log; exit 1
  fi
  if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$BASE_URL/health")" = 200 ]; then healthy=1; break; fi
  sleep 0.5
done
if [ "$healthy" != 1 ]; then say "GET /health not 200 within 120 s"; print_log; exit 1; fi
say "server pid $SERVER_PID healthy on $BASE_URL (model id $MODEL_ID)"

# 3. The SDK tests: one file at a time (they share the server's batch slots; 09_probes runs last).
cd "$HERE"
shopt -s nullglob
# shellcheck disable=SC2206
DEFAULT_TESTS='*.test.mjs'
[ "$SCRIPTED" = 1 ] && DEFAULT_TESTS=scripted_tools.mjs
[ "$HARMONY" = 1 ] && DEFAULT_TESTS=scripted_harmony.mjs
FILES=(${ZIPMOE_OPENAI_TESTS:-$DEFAULT_TESTS})
if [ ${#FILES[@]} -eq 0 ]; then say "no test files match ${ZIPMOE_OPENAI_TESTS:-*.test.mjs}"; exit 1; fi
# shellcheck disable=SC2086
ZIPMOE_BASE_URL=$BASE_URL ZIPMOE_MODEL_ID=$MODEL_ID ZIPMOE_MODE=$MODE ZIPMOE_API_KEY=$API_KEY \
ZIPMOE_MAX_BATCH=$MAX_BATCH ZIPMOE_HARMONY_TEMPLATE=$HARMONY_TEMPLATE \
  node --test --test-concurrency=1 --test-reporter=spec ${ZIPMOE_OPENAI_TEST_ARGS:-} "${FILES[@]}"
node_rc=$?
if ! alive "$SERVER_PID"; then say "the server died during the tests"; node_rc=1; fi
if [ "$SCRIPTED" = 1 ]; then  # the scripted model's tests only; the SIGTERM check is the main suite's
  [ "$node_rc" = 0 ] || { say "FAILED (node --test exit $node_rc)"; print_log; exit 1; }
  say "all passed"
  exit 0
fi

# 4. SIGTERM with 2 long non-streaming requests in flight (no max_tokens: the whole context; ignore_eos,
# vLLM's extension, so that an early EOS cannot end them): the server must exit within 5 s.
sigterm_ok=0
for i in 1 2; do
  curl -s -o "$TMP/long$i.out" --max-time 120 "$BASE_URL/v1/completions" -H "Authorization: Bearer $API_KEY" \
    -H 'Content-Type: application/json' -d "{\"prompt\": \"A very long story, part $i\", \"temperature\": 0, \"ignore_eos\": true}" &
  CURL_PIDS+=($!)
done
sleep 1.5  # both admitted and decoding
t0=$(date +%s%N)
kill -TERM "$SERVER_PID" 2>/dev/null
for _ in $(seq 1 50); do
  alive "$SERVER_PID" || { sigterm_ok=1; break; }
  sleep 0.1
done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ "$sigterm_ok" = 1 ]; then
  wait "$SERVER_PID"; exit_status=$?
  say "ok - SIGTERM with 2 long requests in flight: the server exited (status $exit_status) after $ms ms"
else
  say "not ok - SIGTERM with 2 long requests in flight: the server is still running $ms ms later"
  for _ in $(seq 1 250); do alive "$SERVER_PID" || break; sleep 0.1; done
  alive "$SERVER_PID" && say "still running 30 s after SIGTERM: SIGKILL"
fi
kill -KILL -- "-$SERVER_PID" 2>/dev/null  # what is left of the group
SERVER_PID=

if [ "$node_rc" != 0 ] || [ "$sigterm_ok" != 1 ]; then
  say "FAILED (node --test exit $node_rc, sigterm $([ "$sigterm_ok" = 1 ] && echo ok || echo 'not ok'))"
  print_log
  exit 1
fi
say "all passed"
