#!/usr/bin/env bash
# llama.cpp as a second reference of the forward pass, written by other people in another order and precision:
# for every architecture bench/gguf_writer.py converts (qwen2_moe, qwen3_moe, olmoe, mixtral, deepseek_v2 with
# and without q_lora_rank, deepseek_v3 in both MLA layouts, glm4_moe, gpt_oss, granitemoe, granitemoeshared, granitemoehybrid (llama.cpp's Mamba2),
# lfm2_moe (llama.cpp's lfm2moe), afmoe (llama.cpp's afmoe)), a tiny synthetic checkpoint with small embeddings (--embedding-std 0.02, so the layers,
# not the embedding row, make the logits) goes through bench/peer_check.py: zipmoe generate's logits against
# llama.cpp's (node-llama-cpp) on the same GGUF'd weights, four greedy steps, the same greedy tokens and every
# row's max |difference| <= 1e-2 of its max |logit| (llama.cpp multiplies BF16 activations; agreement is close,
# not bit-exact: 2.5-4.1e-3 on a Zen 5). A coarse check of structure, not of precision (the fp32 reference's job):
# zipmoe routing to top-(k-1) failed all five then checked (1.03e-2 to 3.0e-1), routing weights 3 % low only
# mixtral (1.26e-2; the others moved by < 1e-3); glm4_moe's GGUF without its selection bias 4.3e-2, with rotary
# over the whole head instead of its first half 3.1e-1; deepseek_v3's without its expert groups 1.5e-1, without
# its selection bias 8.6e-2, with softmax gating a split greedy choice; experts read in reverse order land at 3.5e-2, a mixtral without
# llama.cpp's q/k row order at 1.6e-2 (bench/peer_check.py's docstring). A greedy choice that parts at a near
# tie (the two tokens within 1e-2 of max |logit|) passes, with no later step compared.
# gpt_oss: llama.cpp multiplies its MXFP4 experts with activations rounded to 8 bits (Q8_0 blocks,
# ggml_vec_dot_mxfp4_q8_0), ~1e-2 of noise that flips a near-tie of the tiny model's top-4-of-16 routers somewhere
# in the prompt (half of 8 random prompts then failed, some by 6e-2; with the routers scaled by 16, one in five
# still did). So the gpt_oss checkpoint's router biases get +8 on four experts of each layer (decisive_routers):
# the selection is then the same for both, the weights among the four still per token, and the rest (sinks,
# sliding window, YaRN, MXFP4 experts and their biases, clamped SwiGLU) is compared against 2e-2. Experts'
# gate/up rows swapped, a sliding window one wider or the experts' down biases dropped fail it (8.4e-2, 3.9e-2,
# 1.4e-1); YaRN's factor halved does not (36 positions are too few to see it). Selection itself is checked
# against the fp32 reference (reference_logits).
# lfm2_moe: its gated short convolutions (C * conv(B * x), three BF16-rounded products) carry most of the residual
# stream, so llama.cpp's BF16 activations put it 0.7-1.5e-2 from zipmoe over five seeds (8.8e-3 for seed 7 on a
# Xeon with AMX; the shortconv weights alone widened to F32: 2.4e-3), too close to 1e-2 and too coarse to see a
# dropped selection bias (2.2e-2). So it runs twice: the BF16 GGUF against 2e-2, and "lfm2_moe f32"
# (bench/peer_check.py --f32: every matrix widened to F32, llama.cpp with an F32 KV cache and no flash attention,
# i.e. float32 throughout) against 1e-4: 4.3-5.2e-7 of max |logit| over five seeds (1.3-2.2e-6 with --embedding-std
# 0.001), while the GGUF with the selection bias dropped, the conv kernel reversed, B / C swapped, q/k norms
# swapped, the final norm or a conv layer's norm replaced by ones, softmax gating, rope base 1e4 or norm eps 1e-6
# fails it at 1.5e-3 to 1.1.
# afmoe: its sigmoid router picks the top 4 of 16 by score + expert_bias, and in the tiny checkpoint 4-9 of the 96
# prompt selections (32 tokens x 3 MoE layers) lie within 1e-3 of the 5th expert (numpy reference, seeds 1/3/4/7):
# llama.cpp's BF16 activations flip some of them, so the plain BF16 GGUF lands at 7.6e-3..6.2e-1 of max |logit| over
# eleven seeds (seven above 1e-2, three with other greedy tokens; seed 7: 6.2e-1) while the same GGUF in float32
# agrees to 5.1-8.7e-7. So the BF16 run gets decisive routers (each MoE layer's expert_bias + 8 on four experts of
# its own, as gpt_oss's router biases): 6.3e-3..1.13e-2 over the same eleven seeds (seed 7: 9.1e-3), checked against
# 2e-2; and "afmoe f32" (bench/peer_check.py --f32, the routers as written) against 1e-4: 5.1-8.7e-7, while the GGUF
# with the selection bias zeroed, a sliding window of 7 or 9 (the 32-token prompt crosses the tiny preset's 8),
# expert_weights_scale 1, expert_weights_norm false, the post-attention / post-MLP norms, the pre-attention /
# pre-MLP norms or q / k norms swapped, the output gate's rows rotated by half, the shared expert's gate / up
# swapped, rope base 1e6 or norm eps 1e-6 fails it at 2.7e-1 to 8.2e-1.
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
decisive_routers() {  # decisive_routers DIR: each layer's router bias (gpt_oss, BF16) or expert_bias (afmoe, F32) + 8
  # on four experts of its own (one set a layer)
  /usr/bin/python3 - "$1" <<'PY'
import glob, json, re, struct, sys
import numpy as np
for path in glob.glob(f"{sys.argv[1]}/*.safetensors"):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r+")
    for name, t in header.items():
        hit = re.search(r"layers\.(\d+)\.mlp\.(router\.bias|expert_bias)$", name)
        if hit and t["dtype"] == "F32":  # afmoe's expert_bias: F32 in the checkpoint, exact
            values = data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]].view(np.float32)
            layer = int(hit.group(1))
            values[[(5 * layer + 3 * j) % len(values) for j in range(4)]] += 8.0
        elif hit:
            assert t["dtype"] == "BF16", (name, t["dtype"])
            bits = data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]].view(np.uint16)
            values = (bits.astype(np.uint32) << 16).view(np.float32).copy()
            layer = int(hit.group(1))
            values[[(5 * layer + 3 * j) % len(values) for j in range(4)]] += 8.0
            bits[:] = (values.view(np.uint32) >> 16).astype(np.uint16)  # truncation: both systems read these bits
    data.flush()
PY
}
# "mla-latent": the GGUF with kv_b split into attn_k_b / attn_v_b (bench/gguf_writer.py --mla latent, the layout
# of llama.cpp's own converter), over which llama.cpp caches MLA's latent form as zipmoe's CPU executor does.
# "f32": bench/peer_check.py --f32 (llama.cpp in float32 throughout), against 1e-4.
for spec in "qwen2_moe" "qwen3_moe" "olmoe" "mixtral" "deepseek_v2" "deepseek_v2 --q-lora-rank 48" "deepseek_v3" \
    "deepseek_v3 mla-latent" "glm4_moe" "gpt_oss" "granitemoe" "granitemoeshared" "granitemoehybrid" "lfm2_moe" \
    "lfm2_moe f32" "afmoe" "afmoe f32"; do
  mla=heads
  precision=()
  if [[ "$spec" == *" mla-latent" ]]; then
    mla=latent
  fi
  if [[ "$spec" == *" f32" ]]; then
    precision=(--f32)
  fi
  base=${spec% mla-latent}
  read -r -a words <<<"${base% f32}"
  name=$(echo "$spec" | tr ' ' '_')
  "$ZIPMOE" synth --arch "${words[@]}" --preset tiny --embedding-std 0.02 --seed 7 --out "$TMP/$name" >"$TMP/$name.synth.log" 2>&1 ||
    { cat "$TMP/$name.synth.log" >&2; failed+=("$spec (synth)"); continue; }
  tolerance=1e-2
  if [ "${words[0]}" = gpt_oss ]; then
    decisive_routers "$TMP/$name"
    tolerance=2e-2
  fi
  if [ "${words[0]}" = lfm2_moe ]; then
    tolerance=2e-2
  fi
  if [ "${words[0]}" = afmoe ] && [ ${#precision[@]} -eq 0 ]; then
    decisive_routers "$TMP/$name"
    tolerance=2e-2
  fi
  if [ ${#precision[@]} -gt 0 ]; then
    tolerance=1e-4
  fi
  echo "== $spec (tolerance $tolerance)"
  if ! /usr/bin/python3 "$ROOT/bench/peer_check.py" --model "$TMP/$name" --zipmoe "$ZIPMOE" --steps 4 \
      --tolerance "$tolerance" --mla "$mla" ${precision[@]+"${precision[@]}"} >"$TMP/$name.json"; then
    failed+=("$spec")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAIL: zipmoe's logits differ from llama.cpp's for: ${failed[*]}" >&2
  exit 1
fi
echo "PASS: zipmoe's logits as close to llama.cpp's as its precision allows, the same greedy tokens (or a near tie), on 17 checkpoints"
