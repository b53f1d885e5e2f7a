#!/usr/bin/python3
"""Self-test of the Switch Transformers numpy reference (switch_reference.py), without zipmoe:
known answers of the relative-position buckets, the T5 layer norm and the top-1 router's capacity
drop; on small F32 checkpoints written here in Hugging Face layout: the vectorised pass against the
independent token-by-token pass, right padding against unpadded runs, teacher-forced against
incremental decoding, tied against an equivalent untied head, every tensor used, and the CLI file.

  /usr/bin/python3 switch_reference_selftest.py      exit 0 when every check passes
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import switch_reference as ref  # noqa: E402
from moe_reference_safetensors import write_safetensors  # noqa: E402

F32 = np.float32


class SelfTest:
    def __init__(self):
        self.n = 0
        self.failures = []

    def check(self, cond, what):
        self.n += 1
        if not cond:
            self.failures.append(what)
            print(f"  FAIL: {what}", flush=True)

    def close(self, got, want, what, rel=1e-5):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        ok = got.shape == want.shape
        err = float(np.max(np.abs(got - want))) if ok and got.size else 0.0
        scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
        if ok and err > rel * scale:
            ok = False
        self.check(ok, f"{what}: shapes {got.shape} {want.shape}, max err {err:.3g} vs {rel:g} * {scale:.3g}")


def tiny_config(**over):
    c = {
        "model_type": "switch_transformers",
        "architectures": ["SwitchTransformersForConditionalGeneration"],
        "vocab_size": 40, "d_model": 16, "d_kv": 4, "d_ff": 24, "num_heads": 3,
        "num_layers": 3, "num_decoder_layers": 2, "num_experts": 4, "expert_capacity": 3,
        "encoder_sparse_step": 2, "decoder_sparse_step": 1, "num_sparse_encoder_layers": 1,
        "num_sparse_decoder_layers": 2, "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 16, "layer_norm_epsilon": 1e-6, "router_bias": False,
        "router_dtype": "float32", "dense_act_fn": "relu", "feed_forward_proj": "relu",
        "is_encoder_decoder": True, "tie_word_embeddings": True, "decoder_start_token_id": 0,
        "pad_token_id": 0, "eos_token_id": 1,
    }
    c.update(over)
    return c


def write_checkpoint(d, cfg, seed, zero_routers=False, lm_head=None):
    """A Switch checkpoint in HF layout (config.json + model.safetensors, F32)."""
    rng = np.random.default_rng(seed)
    D, H, dk, F, E = cfg["d_model"], cfg["num_heads"], cfg["d_kv"], cfg["d_ff"], cfg["num_experts"]
    V, B = cfg["vocab_size"], cfg["relative_attention_num_buckets"]

    def w(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(F32)

    t = {"shared.weight": w(V, D, scale=1.0)}
    if lm_head is not None:
        t["lm_head.weight"] = lm_head
    for stack, n, step, ff_layer in (("encoder", cfg["num_layers"], cfg["encoder_sparse_step"], 1),
                                     ("decoder", cfg["num_decoder_layers"], cfg["decoder_sparse_step"], 2)):
        for i in range(n):
            p = f"{stack}.block.{i}.layer"
            attn = [(0, "SelfAttention")] + ([(1, "EncDecAttention")] if stack == "decoder" else [])
            for layer, kind in attn:
                for m in "qkv":
                    t[f"{p}.{layer}.{kind}.{m}.weight"] = w(H * dk, D)
                t[f"{p}.{layer}.{kind}.o.weight"] = w(D, H * dk)
                t[f"{p}.{layer}.layer_norm.weight"] = (1.0 + w(D, scale=0.1)).astype(F32)
            if i == 0:
                t[f"{p}.0.SelfAttention.relative_attention_bias.weight"] = w(B, H, scale=1.0)
            t[f"{p}.{ff_layer}.layer_norm.weight"] = (1.0 + w(D, scale=0.1)).astype(F32)
            if ref.block_is_sparse(i, step):
                t[f"{p}.{ff_layer}.mlp.router.classifier.weight"] = (np.zeros((E, D), F32) if zero_routers
                                                                     else w(E, D, scale=1.0))
                for e in range(E):
                    t[f"{p}.{ff_layer}.mlp.experts.expert_{e}.wi.weight"] = w(F, D)
                    t[f"{p}.{ff_layer}.mlp.experts.expert_{e}.wo.weight"] = w(D, F)
            else:
                t[f"{p}.{ff_layer}.mlp.wi.weight"] = w(F, D)
                t[f"{p}.{ff_layer}.mlp.wo.weight"] = w(D, F)
        t[f"{stack}.final_layer_norm.weight"] = (1.0 + w(D, scale=0.1)).astype(F32)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    write_safetensors(os.path.join(d, "model.safetensors"), t, dtype="F32")
    return t


def known_answers(t):
    print("known answers", flush=True)
    # Bidirectional, 32 buckets, max_distance 128: 16 per direction, max_exact 8; offsets >= 8 get
    # 8 + trunc(log(|rp| / 8) / log(16) * 8), capped at 15; a positive offset (key after the
    # query) adds 16. |rp| = 16, 32, 64 land exactly on 8 + 2, 4, 6 (log ratios 1/4, 1/2, 3/4);
    # |rp| = 20: log(2.5) / log(16) * 8 = 2.64 -> 10; 127: 7.98 -> 15; 128 and beyond: capped at 15.
    bi = {-1: 1, 1: 17, 0: 0, -7: 7, -8: 8, -15: 9, -16: 10, -31: 11, -32: 12, -63: 13, -64: 14, 64: 30,
          -127: 15, -128: 15, 20: 26, -1000: 15}
    got = ref.relative_position_bucket(np.array(list(bi)), True, 32, 128)
    for (rp, want), g in zip(bi.items(), got.tolist()):
        t.check(g == want, f"bidirectional bucket({rp}) = {g}, want {want}")
    # Causal, 32 buckets: future keys (rp > 0) -> 0; max_exact 16; |rp| >= 16:
    # 16 + trunc(log(|rp| / 16) / log(8) * 16): 32 -> 16 + 5 (5.33), 64 -> 16 + 10 (10.67), capped at 31.
    causal = {5: 0, 0: 0, -3: 3, -15: 15, -16: 16, -32: 21, -64: 26, -127: 31, -200: 31}
    got = ref.relative_position_bucket(np.array(list(causal)), False, 32, 128)
    for (rp, want), g in zip(causal.items(), got.tolist()):
        t.check(g == want, f"causal bucket({rp}) = {g}, want {want}")
    # T5 layer norm of [1, 2, 3, 4]: mean of squares 7.5, no mean subtraction.
    x = np.array([[1, 2, 3, 4]], F32)
    w = np.array([1, 2, 0.5, -1], F32)
    inv = 1 / math.sqrt(7.5 + 1e-6)
    t.close(ref.t5_layer_norm(x, w, 1e-6), [[inv, 4 * inv, 1.5 * inv, -4 * inv]], "t5_layer_norm [1,2,3,4]", 1e-6)
    t.check(ref.block_is_sparse(1, 2) and ref.block_is_sparse(3, 2) and not ref.block_is_sparse(0, 2)
            and not ref.block_is_sparse(2, 2) and ref.block_is_sparse(0, 1) and not ref.block_is_sparse(1, 0),
            "sparse blocks: i % step == 1, or every block for step 1, none for step 0")


def capacity_drop(t, work):
    print("top-1 router capacity", flush=True)
    cfg = tiny_config(expert_capacity=2)
    d = os.path.join(work, "zero_router")
    write_checkpoint(d, cfg, seed=3, zero_routers=True)
    m = ref.SwitchModel(d)
    # Zero router weights: uniform probabilities 1/E, argmax = expert 0 for every token; the first two
    # tokens of each sequence are computed by expert 0 (times 1/E), the rest are dropped: output 0.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, cfg["d_model"])).astype(F32)
    prefix = "encoder.block.1.layer.1.mlp"
    got = m._sparse_mlp(prefix, x)
    e0 = m._expert(prefix + ".experts.expert_0", x.reshape(-1, cfg["d_model"])).reshape(x.shape)
    want = np.concatenate([e0[:, :2] / F32(cfg["num_experts"]), np.zeros_like(x[:, 2:])], axis=1)
    t.close(got, want, "capacity 2: expert 0 * 1/E for tokens 1-2 of each row, 0 for the dropped rest", 1e-6)
    # Teacher-forced decoding counts capacity over the decoder positions, generation per token.
    enc = np.array([[5, 6, 7, 8]])
    dec = np.array([[0, 9, 10, 11, 12]])
    inc = m.forward(enc, dec, incremental=True)
    tf = m.forward(enc, dec, incremental=False)
    t.close(tf[:, :2], inc[:, :2], "teacher-forced == incremental while within capacity", 1e-6)
    t.check(float(np.max(np.abs(tf[:, 2:] - inc[:, 2:]))) > 1e-3,
            "teacher-forced differs from incremental once positions exceed the capacity")
    t.close(m.forward_naive(enc[0], dec[0]), inc[0], "naive == vectorised (all tokens on one expert)")


def model_checks(t, work):
    print("vectorised vs naive, padding, tied head, layout, CLI", flush=True)
    cfg = tiny_config()
    d = os.path.join(work, "tiny")
    tensors = write_checkpoint(d, cfg, seed=11)
    m = ref.SwitchModel(d)
    seqs = [([7, 3, 9, 22, 5, 1], [0, 4, 8, 15]), ([12, 30, 1], [0, 2, 6, 6])]
    singles = []
    for enc, dec in seqs:
        v = m.forward(np.array([enc]), np.array([dec]))[0]
        singles.append(v)
        t.close(m.forward_naive(enc, dec), v, f"naive == vectorised for encoder length {len(enc)}")
        t.check(np.all(np.isfinite(v)), "finite logits")
    unused = [n for n in m.ckpt.unused() if ".mlp.experts." not in n]  # unselected experts may stay unread
    t.check(unused == [], f"every non-expert tensor used (unused: {unused[:4]})")
    # One right-padded batch gives each sequence's unpadded logits.
    s = max(len(e) for e, _ in seqs)
    ids = np.array([e + [0] * (s - len(e)) for e, _ in seqs])
    mask = np.array([[1] * len(e) + [0] * (s - len(e)) for e, _ in seqs])
    batch = m.forward(ids, np.array([dc for _, dc in seqs]), mask)
    for i in range(len(seqs)):
        t.close(batch[i], singles[i], f"right-padded batch row {i} == its unpadded run")
    # Tied head (scale d_model^-0.5, shared) == untied head whose lm_head is shared * d_model^-0.5.
    d2 = os.path.join(work, "untied")
    scaled = (tensors["shared.weight"] * F32(cfg["d_model"] ** -0.5)).astype(F32)
    write_checkpoint(d2, tiny_config(tie_word_embeddings=False), seed=11, lm_head=scaled)
    m2 = ref.SwitchModel(d2)
    enc, dec = seqs[0]
    t.close(m2.forward(np.array([enc]), np.array([dec]))[0], singles[0], "untied lm_head = shared * d^-0.5 == tied")
    # The CLI writes [n_decoder_ids, vocab] float32.
    out = os.path.join(work, "cli.f32")
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "switch_reference.py"),
                    "--model", d, "--encoder-ids", ",".join(map(str, enc)), "--decoder-ids",
                    ",".join(map(str, dec)), "--out", out], check=True)
    got = np.fromfile(out, dtype="<f4").reshape(len(dec), cfg["vocab_size"])
    t.close(got, singles[0], "CLI output file", 0.0)


def main():
    t = SelfTest()
    work = tempfile.mkdtemp(prefix="switch_ref_")
    try:
        known_answers(t)
        capacity_drop(t, work)
        model_checks(t, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{t.n - len(t.failures)}/{t.n} checks passed", flush=True)
    return 1 if t.failures else 0


if __name__ == "__main__":
    sys.exit(main())
