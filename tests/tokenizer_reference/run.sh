#!/usr/bin/env bash
# tests/tokenizer_reference/run.sh [--sentencepiece | --tiktoken] CHECK_BIN PROMPTS_JSON
#
# zipmoe's tokenizer against a reference implementation, on the ShareGPT prompts plus edge cases.
# Registered in ctest (tests/CMakeLists.txt) as
#   tokenizer_unigram_reference (default): the Unigram model of a plain and a byte_fallback T5-style
#   tokenizer each, against transformers.js (npm @huggingface/transformers)
#  1. make_t5_tokenizer.py writes tokenizer.json, tokenizer_config.json and inputs.json (the prompts,
#     the prompts with <extra_id_N> sentinels, edge cases) into a temp dir;
#  2. reference_encode.mjs encodes and decodes every input with transformers.js (reference.jsonl);
#  3. CHECK_BIN (check_reference.cc) requires zipmoe's ids and decodings to be equal, printing the first
#     mismatch with both id lists.
#   tokenizer_precompiled_reference (--sentencepiece): SentencePiece itself, the library that produced
#   every T5 / Switch Transformers tokenizer, through a real nmt_nfkc Precompiled charsmap
#  1. spm_reference.py trains a unigram model with the nmt_nfkc rules on the prompts and writes the
#     tokenizer.json transformers' converter makes of it, inputs.json and SentencePiece's ids;
#  2. CHECK_BIN encodes every input with zipmoe (zipmoe_ids.jsonl);
#  3. spm_reference.py --compare requires SentencePiece's ids, or a segmentation exactly tied with
#     them (float vs double score sums; see spm_reference.py).
#   tokenizer_tiktoken_reference (--tiktoken): a directory as Moonlight / Kimi-K2 ship it (tiktoken.model
#   with o200k_base's ranks, a tokenization_*.py setting Moonshot's split pattern, special tokens in
#   tokenizer_config.json), no tokenizer.json, against tiktoken's own Rust core (npm tiktoken, WebAssembly)
#  1. tiktoken_reference.mjs writes the directory, inputs.json and tiktoken's ids and decodings;
#  2. CHECK_BIN requires zipmoe's ids and decodings to be equal.
# Exit 0 iff every input matched in every variant. Needs /usr/bin/python3; transformers.js and tiktoken:
# node >= 20 and tests/tokenizer_reference/node_modules (scripts/install_deps.sh runs `npm ci
# --ignore-scripts` there); SentencePiece: python3-sentencepiece (install_deps.sh). Fails with that hint
# without them. ZIPMOE_TOKENIZER_KEEP=1 keeps the temp dir.
set -uo pipefail

REFERENCE=transformers
if [ "${1:-}" = --sentencepiece ]; then
  REFERENCE=sentencepiece
  shift
elif [ "${1:-}" = --tiktoken ]; then
  REFERENCE=tiktoken
  shift
fi
if [ $# -ne 2 ]; then
  echo "usage: $0 [--sentencepiece | --tiktoken] CHECK_BIN PROMPTS_JSON" >&2
  exit 2
fi
BIN=$(readlink -f "$1")
PROMPTS=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
NAME=tokenizer_unigram_reference
[ $REFERENCE = sentencepiece ] && NAME=tokenizer_precompiled_reference
[ $REFERENCE = tiktoken ] && NAME=tokenizer_tiktoken_reference
say() { echo "$NAME: $*" >&2; }

if [ $REFERENCE = tiktoken ]; then
  if [ ! -d "$HERE/node_modules/tiktoken" ]; then
    say "tests/tokenizer_reference/node_modules/tiktoken is missing: run scripts/install_deps.sh (it runs 'npm ci --ignore-scripts' there)"
    exit 1
  fi
  command -v node >/dev/null || { say "node not found (Node >= 20 needed)"; exit 1; }
elif [ $REFERENCE = transformers ]; then
  if [ ! -d "$HERE/node_modules/@huggingface/transformers" ]; then
    say "tests/tokenizer_reference/node_modules is missing: run scripts/install_deps.sh (it runs 'npm ci --ignore-scripts' there)"
    exit 1
  fi
  command -v node >/dev/null || { say "node not found (Node >= 20 needed)"; exit 1; }
else
  /usr/bin/python3 -c 'import sentencepiece, google.protobuf' 2>/dev/null || {
    say "/usr/bin/python3 lacks python3-sentencepiece or python3-protobuf: run scripts/install_deps.sh"
    exit 1
  }
fi
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
if [ $REFERENCE = tiktoken ]; then
  dir="$TMP/tiktoken"
  (cd "$HERE" && node tiktoken_reference.mjs "$PROMPTS" "$dir") || { say "tiktoken failed"; exit 1; }
  "$BIN" "$dir" --prompts "$n_prompts" || { say "MISMATCH"; exit 1; }
  exit 0
fi
for variant in plain byte-fallback; do
  dir="$TMP/$variant"
  flag=()
  [ $variant = byte-fallback ] && flag=(--byte-fallback)
  if [ $REFERENCE = transformers ]; then
    /usr/bin/python3 "$HERE/make_t5_tokenizer.py" --prompts "$PROMPTS" --out "$dir" "${flag[@]}" || { say "$variant: generator failed"; exit 1; }
    (cd "$HERE" && node reference_encode.mjs "$dir") || { say "$variant: transformers.js failed"; exit 1; }
    "$BIN" "$dir" --prompts "$n_prompts" || { say "$variant: MISMATCH"; status=1; }
  else
    /usr/bin/python3 "$HERE/spm_reference.py" --prompts "$PROMPTS" --out "$dir" "${flag[@]}" || { say "$variant: generator failed"; exit 1; }
    "$BIN" "$dir" --prompts "$n_prompts"
    rc=$?
    [ $rc -le 1 ] || { say "$variant: check failed (exit $rc)"; exit 1; }  # 1: some ids differ; --compare judges them
    /usr/bin/python3 "$HERE/spm_reference.py" --compare "$dir" || { say "$variant: MISMATCH"; status=1; }
  fi
done
exit $status
