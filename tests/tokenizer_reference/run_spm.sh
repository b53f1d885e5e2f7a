#!/usr/bin/env bash
# tests/tokenizer_reference/run_spm.sh CHECK_BIN PROMPTS_JSON
#
# zipmoe's Precompiled normalizer + Unigram model against SentencePiece itself, the library that
# produced every T5 / Switch Transformers tokenizer: ctest tokenizer_precompiled_reference
# (tests/CMakeLists.txt). For a plain and a byte_fallback model:
#  1. spm_reference.py trains a unigram model with the nmt_nfkc rules on the ShareGPT prompts and writes
#     the tokenizer.json transformers' converter makes of it (a real precompiled_charsmap), inputs.json
#     and SentencePiece's ids (reference.jsonl);
#  2. CHECK_BIN (check_reference.cc) encodes every input with zipmoe (zipmoe_ids.jsonl);
#  3. spm_reference.py --compare requires every input to give SentencePiece's ids, or a segmentation
#     exactly tied with it (float vs double score sums; see spm_reference.py).
# Exit 0 iff there is no real difference. Needs /usr/bin/python3 with python3-sentencepiece
# (scripts/install_deps.sh). ZIPMOE_TOKENIZER_KEEP=1 keeps the temp dir.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 CHECK_BIN PROMPTS_JSON" >&2
  exit 2
fi
BIN=$(readlink -f "$1")
PROMPTS=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
say() { echo "tokenizer_precompiled_reference: $*" >&2; }

/usr/bin/python3 -c 'import sentencepiece, google.protobuf' 2>/dev/null || {
  say "/usr/bin/python3 lacks python3-sentencepiece or python3-protobuf: run scripts/install_deps.sh"
  exit 1
}
[ -x "$BIN" ] || { say "$BIN is not an executable"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zipmoe-spm-ref.XXXXXX")
cleanup() {
  local rc=$?
  if [ "${ZIPMOE_TOKENIZER_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
  exit "$rc"
}
trap cleanup EXIT

n_prompts=$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$PROMPTS") || exit 1
status=0
for variant in spm spm-byte-fallback; do
  dir="$TMP/$variant"
  flag=()
  [ "$variant" = spm-byte-fallback ] && flag=(--byte-fallback)
  /usr/bin/python3 "$HERE/spm_reference.py" --prompts "$PROMPTS" --out "$dir" "${flag[@]}" || { say "$variant: generator failed"; exit 1; }
  "$BIN" "$dir" --prompts "$n_prompts"
  rc=$?
  [ $rc -le 1 ] || { say "$variant: check failed (exit $rc)"; exit 1; }  # 1: some ids differ; --compare judges them
  /usr/bin/python3 "$HERE/spm_reference.py" --compare "$dir" || { say "$variant: MISMATCH"; status=1; }
done
exit $status
