#!/usr/bin/python3
"""Bytes of weights one decode token reads in a qwen2_moe checkpoint (the mini the device and many-core
checks run): BF16 attention projections (q/k/v/o; q/k/v biases left out, a few KiB), the top-k routed
experts and the shared expert (gate, up, down) and its 1-row gate per layer, the lm_head; the float32
router. It is the numerator of the memory floors of scripts/gpu_check.sh (HBM) and
scripts/cpu_cores_check.sh (DRAM): floor = bytes / bandwidth measured in the same run.

Usage: scripts/decode_bytes.py CONFIG_JSON      prints the byte count
Errors: exit 2 naming the file and the missing field, or a model_type other than qwen2_moe."""
import json
import sys


def decode_bytes(c):
    H, L = c["hidden_size"], c["num_hidden_layers"]
    hd = c.get("head_dim") or H // c["num_attention_heads"]
    attn = H * hd * (2 * c["num_attention_heads"] + 2 * c["num_key_value_heads"])
    moe = (c["num_experts_per_tok"] * 3 * H * c["moe_intermediate_size"]
           + 3 * H * c["shared_expert_intermediate_size"] + H)
    return 2 * (L * (attn + moe) + c["vocab_size"] * H) + 4 * L * c["num_experts"] * H


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    try:
        c = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        sys.exit(2)
    if c.get("model_type") != "qwen2_moe":
        print(f"{path}: model_type {c.get('model_type')!r}: only qwen2_moe is counted", file=sys.stderr)
        sys.exit(2)
    try:
        print(decode_bytes(c))
    except KeyError as e:
        print(f"{path}: no field {e.args[0]}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
