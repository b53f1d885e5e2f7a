#!/usr/bin/env bash
# README command 1: the main job end to end, in embedded mode.
#   install deps -> build -> take the trained Qwen2-MoE shipped in models/ (a Hugging Face model
#   directory, exactly as downloaded models are laid out) -> compress it into the ZipMoE layout ->
#   verify bit-exactness -> inspect sizes and the entropy bound -> generate text from the compressed
#   directory with an English prompt (ZIPMOE_PROMPT), first with every expert resident, then with the
#   embedded ZipMoE runtime in a memory budget (ZIPMOE_BUDGET_PCT % of the expert bytes, policy
#   ZIPMOE_POLICY), checking that both give byte-equal logits.
# Settings (environment): ZIPMOE_MODEL_DIR (models/qwen2moe-debian-18m; any HF MoE directory), or
# ZIPMOE_ARCH / ZIPMOE_PRESET (qwen2_moe / tiny) to synthesize a random-weight model of another
# architecture instead; ZIPMOE_CODEC (zstd), ZIPMOE_SHARDS (4 synthetic, 1 shipped), ZIPMOE_WORK_DIR (out).
# Idempotent: steps whose outputs exist are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
SYNTHETIC=0
if [ -n "${ZIPMOE_ARCH:-}" ] || [ -n "${ZIPMOE_PRESET:-}" ]; then SYNTHETIC=1; fi
ARCH=${ZIPMOE_ARCH:-qwen2_moe}
PRESET=${ZIPMOE_PRESET:-tiny}
SHIPPED=models/qwen2moe-debian-18m
CODEC=${ZIPMOE_CODEC:-zstd}
# K E-chunks per tensor: 4 for the synthetic presets; 1 for the shipped model, whose expert tensors (16 K values)
# are too small to gain from parallel shard decoding and whose ~1.3 KB E-chunks would each be padded to 4 KiB.
if [ "$SYNTHETIC" = 1 ]; then SHARDS=${ZIPMOE_SHARDS:-4}; else SHARDS=${ZIPMOE_SHARDS:-1}; fi
WORK=${ZIPMOE_WORK_DIR:-out}
PROMPT=${ZIPMOE_PROMPT:-"The configuration file is read when the program starts. It"}
MAX_NEW_TOKENS=${ZIPMOE_MAX_NEW_TOKENS:-32}
BUILD_DIR=${ZIPMOE_BUILD_DIR:-build}
BUDGET_PCT=${ZIPMOE_BUDGET_PCT:-50}
POLICY=${ZIPMOE_POLICY:-zipmoe}

bash scripts/install_deps.sh
bash scripts/build.sh
ZIPMOE="$BUILD_DIR/bin/zipmoe"

if [ "$SYNTHETIC" = 1 ]; then
  MODEL="$WORK/$ARCH-$PRESET"
else
  MODEL=${ZIPMOE_MODEL_DIR:-$SHIPPED}
fi
COMPRESSED="$WORK/$(basename "$MODEL").$CODEC-k$SHARDS"
mkdir -p "$WORK"

if [ "$SYNTHETIC" = 1 ]; then
  echo "== 1/6 synthesize $ARCH ($PRESET, random weights: the text will be gibberish) -> $MODEL"
  if [ -f "$MODEL/config.json" ]; then
    echo "   (exists, skipped)"
  else
    "$ZIPMOE" synth --arch "$ARCH" --preset "$PRESET" --seed 0 --out "$MODEL"
  fi
else
  echo "== 1/6 model: $MODEL (Hugging Face layout$( [ "$MODEL" = "$SHIPPED" ] && echo "; trained here on English text that Debian ships, model card $MODEL/README.md"))"
  [ -f "$MODEL/config.json" ] || { echo "error: $MODEL/config.json not found (ZIPMOE_MODEL_DIR)" >&2; exit 1; }
fi

echo "== 2/6 compress ($CODEC, K=$SHARDS) -> $COMPRESSED"
if [ -f "$COMPRESSED/manifest.bin" ]; then
  echo "   (exists, skipped)"
else
  "$ZIPMOE" compress "$MODEL" "$COMPRESSED" --codec "$CODEC" --shards "$SHARDS"
fi

echo "== 3/6 verify (every chunk hash, every tensor bit-exact against the checkpoint)"
"$ZIPMOE" verify "$MODEL" "$COMPRESSED"

echo "== 4/6 inspect"
"$ZIPMOE" inspect "$COMPRESSED"
"$ZIPMOE" inspect "$COMPRESSED" --json > "$COMPRESSED.inspect.json"
EXPERT_BYTES=$(grep -o '"expert_bytes_raw":[0-9]*' "$COMPRESSED.inspect.json" | cut -d: -f2)
BUDGET=$((EXPERT_BYTES * BUDGET_PCT / 100))
echo "== 5/6 generate from $COMPRESSED with every expert resident (the reference; greedy, $MAX_NEW_TOKENS new tokens)"
echo "   prompt: $PROMPT"
"$ZIPMOE" generate --model "$COMPRESSED" --prompt "$PROMPT" --max-new-tokens "$MAX_NEW_TOKENS" --ignore-eos \
  --logits-out "$COMPRESSED.resident.logits"
echo "== 6/6 generate with the ZipMoE runtime in a memory budget of $BUDGET_PCT% of the expert bytes ($BUDGET bytes):"
echo "   cache pools F/C/S/E + experts in flight, SSD reads with O_DIRECT, $POLICY policy"
"$ZIPMOE" generate --model "$COMPRESSED" --prompt "$PROMPT" --max-new-tokens "$MAX_NEW_TOKENS" --ignore-eos \
  --memory-budget "$BUDGET" --policy "$POLICY" --stats-json "$COMPRESSED.runtime-stats.json" \
  --logits-out "$COMPRESSED.runtime.logits"
if cmp -s "$COMPRESSED.resident.logits" "$COMPRESSED.runtime.logits"; then
  echo "   logits of every position are byte-equal to the all-resident run"
else
  echo "error: the runtime's logits differ from the all-resident run" >&2
  exit 1
fi
echo
echo "done: model $MODEL, compressed $COMPRESSED, summary $COMPRESSED.inspect.json,"
echo "      runtime statistics $COMPRESSED.runtime-stats.json"
