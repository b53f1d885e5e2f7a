#!/usr/bin/env bash
# tests/tokenizer_reference/run.sh CHECK_BIN PROMPTS_JSON
#
# zipmoe's Unigram tokenizer against transformers.js (npm @huggingface/transformers), on the ShareGPT
# prompts. Registered in ctest as tokenizer_unigram_reference (tests/CMakeLists.txt). For each of two
# T5-style tokenizers (plain, and with byte_fallback):
#  1. make_t5_tokenizer.py writes tokenizer.json, tokenizer_config.json and inputs.json (the prompts,
#     the prompts with <extra_id_N> sentinels, edge cases) into a temp dir;
#  2. reference_encode.mjs encodes and decodes every input with transformers.js (reference.jsonl);
#  3. CHECK_BIN (check_reference.cc) requires zipmoe's ids and decodings to be equal, printing the first
#     mismatch with both id lists.
# Exit 0 iff every input matched in both. Needs node >= 20, /usr/bin/python3 and
# tests/tokenizer_reference/node_modules (scripts/install_deps.sh runs `npm ci --ignore-scripts` there);
# fails with that hint without them. ZIPMOE_TOKENIZER_KEEP=1 keeps the temp dir.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 CHECK_BIN PROMPTS_JSON" >&2
  exit 2
fi
BIN=$(readlink -f "$1")
PROMPTS=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
say() { echo "tokenizer_unigram_reference: $*" >&2; }

if [ ! -d "$HERE/node_modules/@huggingface/transformers" ]; then
  say "tests/tokenizer_reference/node_modules is missing: run scripts/install_deps.sh (it runs 'npm ci --ignore-scripts' there)"
  exit 1
fi
command -v node >/dev/null || { say "node not found (Node >= 20 needed)"; exit 1; }
[ -x "$BIN" ] || { say "$BIN is not an executable"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zipmoe-tokenizer-ref.XXXXXX")
cleanup() {
  local rc=$?
  if [ "${ZIPMOE_TOKENIZER_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
  exit "$rc"
}
trap cleanup EXIT

n_prompts=$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$PROMPTS") || exit 1
status=0
for variant in t5 t5-byte-fallback; do
  dir="$TMP/$variant"
  flag=()
  [ "$variant" = t5-byte-fallback ] && flag=(--byte-fallback)
  /usr/bin/python3 "$HERE/make_t5_tokenizer.py" --prompts "$PROMPTS" --out "$dir" "${flag[@]}" || { say "$variant: generator failed"; exit 1; }
  (cd "$HERE" && node reference_encode.mjs "$dir") || { say "$variant: transformers.js failed"; exit 1; }
  "$BIN" "$dir" --prompts "$n_prompts" || { say "$variant: MISMATCH"; status=1; }
done
exit $status
