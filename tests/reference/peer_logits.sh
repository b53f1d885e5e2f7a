#!/usr/bin/env bash
# llama.cpp as a second reference of the forward pass, written by other people in another order and precision:
# for every architecture bench/gguf_writer.py converts (qwen2_moe, qwen3_moe, mixtral, deepseek_v2 with and
# without q_lora_rank, glm4_moe), a tiny synthetic checkpoint with small embeddings (--embedding-std 0.02, so the layers,
# not the embedding row, make the logits) goes through bench/peer_check.py: zipmoe generate's logits against
# llama.cpp's (node-llama-cpp) on the same GGUF'd weights, four greedy steps, the same greedy tokens and every
# row's max |difference| <= 1e-2 of its max |logit| (llama.cpp multiplies BF16 activations; agreement is close,
# not bit-exact: 2.5-4.1e-3 on a Zen 5). A coarse check of structure, not of precision (the fp32 reference's job):
# zipmoe routing to top-(k-1) failed all five then checked (1.03e-2 to 3.0e-1), routing weights 3 % low only
# mixtral (1.26e-2; the others moved by < 1e-3); glm4_moe's GGUF without its selection bias 4.3e-2, with rotary
# over the whole head instead of its first half 3.1e-1; experts read in reverse order land at 3.5e-2, a mixtral without
# llama.cpp's q/k row order at 1.6e-2 (bench/peer_check.py's docstring). A greedy choice that parts at a near
# tie (the two tokens within 1e-2 of max |logit|) passes, with no later step compared.
# Usage: peer_logits.sh ZIPMOE_BINARY. Needs bench/node_modules (scripts/install_deps.sh runs
# bench/install_peer.sh) and Debian's python3-numpy; fails with that hint without them, never skips.
set -euo pipefail
ZIPMOE=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if ! (cd "$ROOT/bench" && node --input-type=module -e 'await import("node-llama-cpp")') >/dev/null 2>&1; then
  echo "E: node-llama-cpp does not load from bench/node_modules: run scripts/install_deps.sh (bench/install_peer.sh)" >&2
  exit 1
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failed=()
for spec in "qwen2_moe" "qwen3_moe" "mixtral" "deepseek_v2" "deepseek_v2 --q-lora-rank 48" "glm4_moe"; do
  read -r -a words <<<"$spec"
  name=$(echo "$spec" | tr ' ' '_')
  "$ZIPMOE" synth --arch "${words[@]}" --preset tiny --embedding-std 0.02 --seed 7 --out "$TMP/$name" >"$TMP/$name.synth.log" 2>&1 ||
    { cat "$TMP/$name.synth.log" >&2; failed+=("$spec (synth)"); continue; }
  echo "== $spec"
  if ! /usr/bin/python3 "$ROOT/bench/peer_check.py" --model "$TMP/$name" --zipmoe "$ZIPMOE" --steps 4 \
      --tolerance 1e-2 >"$TMP/$name.json"; then
    failed+=("$spec")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAIL: zipmoe's logits differ from llama.cpp's for: ${failed[*]}" >&2
  exit 1
fi
echo "PASS: zipmoe's logits within 1e-2 of llama.cpp's, the same greedy tokens (or a near tie), on 6 checkpoints"
