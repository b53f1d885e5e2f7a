#!/usr/bin/env bash
# README command 1: the main job end to end on a generated model, in embedded mode.
#   install deps -> build -> synthesize a Hugging Face-layout MoE checkpoint -> compress it into the
#   ZipMoE layout -> verify bit-exactness -> inspect sizes and the entropy bound -> generate text from
#   the compressed directory with an English prompt (ZIPMOE_PROMPT).
# Settings (environment): ZIPMOE_ARCH (qwen2_moe), ZIPMOE_PRESET (tiny), ZIPMOE_CODEC (zstd),
# ZIPMOE_SHARDS (4), ZIPMOE_WORK_DIR (out). Idempotent: steps whose outputs exist are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${ZIPMOE_ARCH:-qwen2_moe}
PRESET=${ZIPMOE_PRESET:-tiny}
CODEC=${ZIPMOE_CODEC:-zstd}
SHARDS=${ZIPMOE_SHARDS:-4}
WORK=${ZIPMOE_WORK_DIR:-out}
PROMPT=${ZIPMOE_PROMPT:-"Explain in one paragraph why the sky is blue during the day and red at sunset."}
MAX_NEW_TOKENS=${ZIPMOE_MAX_NEW_TOKENS:-32}
BUILD_DIR=${ZIPMOE_BUILD_DIR:-build}

bash scripts/install_deps.sh
bash scripts/build.sh
ZIPMOE="$BUILD_DIR/bin/zipmoe"

MODEL="$WORK/$ARCH-$PRESET"
COMPRESSED="$WORK/$ARCH-$PRESET.$CODEC-k$SHARDS"
mkdir -p "$WORK"

echo "== 1/5 synthesize $ARCH ($PRESET) -> $MODEL"
if [ -f "$MODEL/config.json" ]; then
  echo "   (exists, skipped)"
else
  "$ZIPMOE" synth --arch "$ARCH" --preset "$PRESET" --seed 0 --out "$MODEL"
fi

echo "== 2/5 compress ($CODEC, K=$SHARDS) -> $COMPRESSED"
if [ -f "$COMPRESSED/manifest.bin" ]; then
  echo "   (exists, skipped)"
else
  "$ZIPMOE" compress "$MODEL" "$COMPRESSED" --codec "$CODEC" --shards "$SHARDS"
fi

echo "== 3/5 verify (every chunk hash, every tensor bit-exact against the checkpoint)"
"$ZIPMOE" verify "$MODEL" "$COMPRESSED"

echo "== 4/5 inspect"
"$ZIPMOE" inspect "$COMPRESSED"
"$ZIPMOE" inspect "$COMPRESSED" --json > "$COMPRESSED.inspect.json"
echo "== 5/5 generate from $COMPRESSED (greedy, $MAX_NEW_TOKENS new tokens; synthetic weights give gibberish)"
echo "   prompt: $PROMPT"
"$ZIPMOE" generate --model "$COMPRESSED" --prompt "$PROMPT" --max-new-tokens "$MAX_NEW_TOKENS" --ignore-eos --json \
  > "$COMPRESSED.generate.json"
"$ZIPMOE" generate --model "$COMPRESSED" --prompt "$PROMPT" --max-new-tokens "$MAX_NEW_TOKENS" --ignore-eos
echo
echo "done: model $MODEL, compressed $COMPRESSED, summary $COMPRESSED.inspect.json, generation $COMPRESSED.generate.json"
