#!/usr/bin/env bash
# README command 1: the main job end to end on a generated model, in embedded mode.
#   install deps -> build -> synthesize a Hugging Face-layout MoE checkpoint -> compress it into the
#   ZipMoE layout -> verify bit-exactness -> inspect sizes and the entropy bound.
# Settings (environment): ZIPMOE_ARCH (qwen2_moe), ZIPMOE_PRESET (tiny), ZIPMOE_CODEC (zstd),
# ZIPMOE_SHARDS (4), ZIPMOE_WORK_DIR (out). Idempotent: steps whose outputs exist are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${ZIPMOE_ARCH:-qwen2_moe}
PRESET=${ZIPMOE_PRESET:-tiny}
CODEC=${ZIPMOE_CODEC:-zstd}
SHARDS=${ZIPMOE_SHARDS:-4}
WORK=${ZIPMOE_WORK_DIR:-out}
BUILD_DIR=${ZIPMOE_BUILD_DIR:-build}

bash scripts/install_deps.sh
bash scripts/build.sh
ZIPMOE="$BUILD_DIR/bin/zipmoe"

MODEL="$WORK/$ARCH-$PRESET"
COMPRESSED="$WORK/$ARCH-$PRESET.$CODEC-k$SHARDS"
mkdir -p "$WORK"

echo "== 1/4 synthesize $ARCH ($PRESET) -> $MODEL"
if [ -f "$MODEL/config.json" ]; then
  echo "   (exists, skipped)"
else
  "$ZIPMOE" synth --arch "$ARCH" --preset "$PRESET" --seed 0 --out "$MODEL"
fi

echo "== 2/4 compress ($CODEC, K=$SHARDS) -> $COMPRESSED"
if [ -f "$COMPRESSED/manifest.bin" ]; then
  echo "   (exists, skipped)"
else
  "$ZIPMOE" compress "$MODEL" "$COMPRESSED" --codec "$CODEC" --shards "$SHARDS"
fi

echo "== 3/4 verify (every chunk hash, every tensor bit-exact against the checkpoint)"
"$ZIPMOE" verify "$MODEL" "$COMPRESSED"

echo "== 4/4 inspect"
"$ZIPMOE" inspect "$COMPRESSED"
"$ZIPMOE" inspect "$COMPRESSED" --json > "$COMPRESSED.inspect.json"
echo "done: model $MODEL, compressed $COMPRESSED, summary $COMPRESSED.inspect.json"
