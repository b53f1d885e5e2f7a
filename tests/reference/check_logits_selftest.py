"""The self-test of the numpy reference (check_logits.py --self-test): known answers of its helpers and,
on small checkpoints written here in exact HF layout, the vectorised pass against the independent slow
pass, causality, sharded == single file, and the CLI output file.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import moe_reference as ref
from check_logits_compare import CheckError, fed_sequence, log

# ====================================================================================================
# self-test
# ====================================================================================================

class SelfTest:
    def __init__(self):
        self.n = 0
        self.failures = []

    def check(self, cond, what):
        self.n += 1
        if not cond:
            self.failures.append(what)
            log(f"  FAIL: {what}")

    def close(self, got, want, what, rtol=1e-6, atol=1e-7):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        ok = got.shape == want.shape and bool(np.all(np.abs(got - want) <= atol + rtol * np.abs(want)))
        if not ok:
            what = f"{what}: got {np.array2string(got.ravel()[:8], precision=9)} want " \
                   f"{np.array2string(want.ravel()[:8], precision=9)}"
        self.check(ok, what)


def known_answer_tests(t):
    log("known-answer checks of the helpers")
    # RMSNorm: x=[1,2,3,4]: mean(x^2) = 30/4 = 7.5.
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    w = np.array([1, 2, 0.5, -1], dtype=np.float32)
    inv = 1 / math.sqrt(7.5 + 1e-6)
    t.close(ref.rms_norm(x, w, 1e-6), [[1 * inv, 4 * inv, 1.5 * inv, -4 * inv]], "rms_norm [1,2,3,4]")
    t.check(ref.rms_norm(x, w, 1e-6).dtype == np.float32, "rms_norm returns float32")

    # inv_freq, d=4, theta=10000: [1, 1/100].
    t.close(ref.rope_inv_freq(4, 10000.0), [1.0, 0.01], "rope_inv_freq(4, 1e4)")
    t.close(ref.rope_inv_freq(8, 1e6), [1.0, 1e-1 * 10 ** (-0.5), 1e-3, 1e-3 * 10 ** (-1.5)],
            "rope_inv_freq(8, 1e6)")
    # rotate_half([1,2,3,4]) = [-3,-4,1,2].
    t.close(ref.rotate_half(np.array([1, 2, 3, 4], dtype=np.float32)), [-3, -4, 1, 2], "rotate_half")
    # NeoX rope at position 1 of x=[1,0,0,0] (pair (0,2), angle 1): [cos1, 0, sin1, 0];
    # of x=[0,1,0,0] (pair (1,3), angle 0.01): [0, cos.01, 0, sin.01].
    cos, sin = ref.rope_cos_sin([0, 1], ref.rope_inv_freq(4, 10000.0))
    c1, s1 = 0.5403023058681398, 0.8414709848078965
    c01, s01 = 0.9999500004166653, 0.009999833334166664
    t.close(cos[1], [c1, c01, c1, c01], "rope cos table pos 1")
    t.close(sin[0], [0, 0, 0, 0], "rope sin table pos 0")
    xr = np.array([[1, 0, 0, 0], [0, 1, 0, 0]], dtype=np.float32)
    t.close(ref.apply_rope(xr[:, None, :], cos[1:2], sin[1:2])[:, 0, :],
            [[c1, 0, s1, 0], [0, c01, 0, s01]], "apply_rope pos 1")
    # DeepSeek de-interleave: [a0 b0 a1 b1] -> [a0 a1 b0 b1].
    t.close(ref.deinterleave(np.array([[10, 11, 20, 21, 30, 31]], dtype=np.float32)), [[10, 20, 30, 11, 21, 31]],
            "deinterleave")
    # YaRN (DeepSeek-V2 / -Lite constants: factor 40, mscale = mscale_all_dim = 0.707, beta 32/1, orig 4096).
    t.close(ref.yarn_get_mscale(40, 0.707), 1 + 0.0707 * math.log(40), "yarn_get_mscale(40, .707)", rtol=1e-12)
    t.close(ref.yarn_get_mscale(40, 0.707), 1.2608037774, "yarn_get_mscale(40, .707) value", rtol=1e-9)
    t.close(ref.yarn_get_mscale(1.0, 0.707), 1.0, "yarn_get_mscale(scale<=1) = 1")
    t.close(ref.yarn_get_mscale(40, 0), 1.0, "yarn_get_mscale(mscale=0) = 1")
    # correction dim: dim * ln(orig / (rot * 2pi)) / (2 ln base); dim 64: rot 32 -> 10.3..., rot 1 -> 22.5...
    t.close(ref.yarn_find_correction_dim(32, 64, 10000, 4096), 64 * math.log(4096 / (64 * math.pi)) / (2 * math.log(1e4)),
            "yarn_find_correction_dim", rtol=1e-12)
    t.check(ref.yarn_find_correction_range(32, 1, 64, 10000, 4096) == (10, 23), "yarn correction range dim 64 = (10, 23)")
    t.check(ref.yarn_find_correction_range(32, 1, 16, 10000, 4096) == (2, 6), "yarn correction range dim 16 = (2, 6)")
    t.close(ref.yarn_linear_ramp_mask(2, 6, 8), [0, 0, 0, 0.25, 0.5, 0.75, 1, 1], "yarn_linear_ramp_mask(2, 6, 8)")
    t.close(ref.yarn_linear_ramp_mask(3, 3, 5), [0, 0, 0, 0, 1], "yarn_linear_ramp_mask(min == max)")
    rs = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
          "original_max_position_embeddings": 4096, "type": "yarn"}
    inv, m = ref.deepseek_yarn_inv_freq_and_mscale(16, 10000, rs)
    # i < 2: extrapolation (unscaled); i >= 6: interpolation (/40); i = 4: halfway: (0.01 + 0.01/40) / 2.
    want = [10000 ** (-2 * i / 16) for i in range(8)]
    ramp = [0, 0, 0, 0.25, 0.5, 0.75, 1, 1]
    want = [f * (1 - r) + f / 40 * r for f, r in zip(want, ramp)]
    t.close(inv, want, "deepseek yarn inv_freq dim 16", rtol=2e-7)
    t.close(inv[4], 0.005125, "deepseek yarn inv_freq[4] = 0.005125", rtol=2e-7)
    t.close(inv[7], 10 ** -3.5 / 40, "deepseek yarn inv_freq[7]", rtol=2e-7)
    t.close(m, 1.0, "deepseek yarn cos/sin mscale (mscale == mscale_all_dim) = 1")
    _, m2 = ref.deepseek_yarn_inv_freq_and_mscale(16, 10000, dict(rs, mscale=1.0, mscale_all_dim=0))
    t.close(m2, 1 + 0.1 * math.log(40), "deepseek yarn cos/sin mscale (mscale 1, all_dim 0)", rtol=1e-7)
    # BF16 <-> F32.
    bits = np.array([0x3F80, 0xC000, 0x3EAA, 0x0000, 0x8000, 0x7F80], dtype=np.uint16)
    got = ref.bf16_bits_to_f32(bits)
    t.check(got.dtype == np.float32 and got.tolist() == [1.0, -2.0, 0.33203125, 0.0, -0.0, float("inf")]
            and bool(np.signbit(got[4])), f"bf16 -> f32: {got.tolist()}")
    t.check(ref.f32_to_bf16_bits(np.array([1.0, 1.00390625, 1.01171875], dtype=np.float32)).tolist()
            == [0x3F80, 0x3F80, 0x3F82], "f32 -> bf16 round-to-nearest-even")
    # Softmax/top-k routing with probs [.1 .2 .3 .4].
    probs = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    idx, w = ref.select_experts("qwen2_moe", probs, 2, False)
    t.check(idx.tolist() == [[3, 2]], "routing: top-2 indices in descending order")
    t.close(w, [[0.4, 0.3]], "qwen2_moe norm_topk_prob=false keeps raw probs")
    t.close(ref.select_experts("qwen3_moe", probs, 2, True)[1], [[4 / 7, 3 / 7]], "qwen3_moe norm_topk_prob=true")
    t.close(ref.select_experts("mixtral", probs, 2, False)[1], [[4 / 7, 3 / 7]], "mixtral always renormalises")
    t.close(ref.select_experts("olmoe", probs, 2, False)[1], [[0.4, 0.3]], "olmoe norm_topk_prob=false")
    t.close(ref.select_experts("deepseek_v2", probs, 2, False, routed_scale=2.5)[1], [[1.0, 0.75]],
            "deepseek: no norm -> x routed_scaling_factor")
    t.close(ref.select_experts("deepseek_v2", probs, 2, True, routed_scale=2.5)[1], [[4 / 7, 3 / 7]],
            "deepseek: norm (top_k > 1) -> / (sum + 1e-20), no scaling")
    t.close(ref.select_experts("deepseek_v2", probs, 1, True, routed_scale=2.5)[1], [[1.0]],
            "deepseek: top_k == 1 -> x routed_scaling_factor even with norm_topk_prob")
    # group_limited_greedy: 4 experts in 2 groups {0,1}, {2,3}; probs [.35 .05 .3 .3]: group maxima .35/.3,
    # topk_group 1 keeps group 0 only -> experts 0 then 1 (not 2, 3).
    p2 = np.array([[0.35, 0.05, 0.3, 0.3]], dtype=np.float32)
    idx, w = ref.select_experts("deepseek_v2", p2, 2, False, topk_method="group_limited_greedy", n_group=2,
                                topk_group=1)
    t.check(idx.tolist() == [[0, 1]], f"group_limited_greedy keeps the best group only (got {idx.tolist()})")
    t.close(w, [[0.35, 0.05]], "group_limited_greedy weights")
    idx, _ = ref.select_experts("deepseek_v2", p2, 2, False, topk_method="greedy")
    t.check(idx.tolist() == [[0, 2]], "greedy ignores groups")
    # Attention: two tokens, one head, the second query attends equally to both keys when scores tie.
    q = np.array([[[0.0, 0.0], [0.0, 0.0]]], dtype=np.float32)
    k = np.array([[[1.0, 0.0], [0.0, 1.0]]], dtype=np.float32)
    v = np.array([[[2.0, 4.0], [6.0, 8.0]]], dtype=np.float32)
    t.close(ref.attention(q, k, v, 1.0), [[2, 4], [4, 6]], "causal attention")
    t.close(ref.attention(q, k, v, 1.0, sliding_window=1), [[2, 4], [6, 8]], "sliding window 1 attends to self")
    # GQA: query head h reads kv head h // 2.
    q4 = np.zeros((4, 1, 2), dtype=np.float32)
    k2 = np.zeros((2, 1, 2), dtype=np.float32)
    v2 = np.array([[[1.0, 1.0]], [[5.0, 5.0]]], dtype=np.float32)
    t.close(ref.attention(q4, k2, v2, 1.0), [[1, 1, 1, 1, 5, 5, 5, 5]], "GQA head mapping")


# --- synthetic checkpoints for the self-test, in exact HF layout ---

def _cfg_common(model_type, **kw):
    c = {"model_type": model_type, "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 96, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
         "hidden_act": "silu", "torch_dtype": "bfloat16"}
    c.update(kw)
    return c


def selftest_configs():
    yarn = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 4096, "type": "yarn"}
    ds = dict(intermediate_size=48, moe_intermediate_size=16, kv_lora_rank=24, qk_nope_head_dim=8,
              qk_rope_head_dim=16, v_head_dim=12, n_routed_experts=8, n_shared_experts=2, first_k_dense_replace=1,
              moe_layer_freq=1, norm_topk_prob=False, routed_scaling_factor=1.0, scoring_func="softmax",
              topk_method="greedy", n_group=1, topk_group=1, q_lora_rank=None, attention_bias=False,
              rope_scaling=yarn, num_key_value_heads=4, num_experts_per_tok=3)
    return [
        ("qwen2_moe", _cfg_common("qwen2_moe", num_key_value_heads=4, intermediate_size=48, moe_intermediate_size=16,
                                  shared_expert_intermediate_size=40, num_experts=8, norm_topk_prob=False,
                                  decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1e6)),
        ("qwen2_moe/sparse_step2+mlp_only+norm+gqa",
         _cfg_common("qwen2_moe", intermediate_size=48, moe_intermediate_size=16, shared_expert_intermediate_size=40,
                     num_experts=8, norm_topk_prob=True, decoder_sparse_step=2, mlp_only_layers=[0],
                     num_hidden_layers=4)),
        ("mixtral", _cfg_common("mixtral", intermediate_size=40, num_local_experts=6, sliding_window=None,
                                rms_norm_eps=1e-5, rope_theta=1e6)),
        ("mixtral/sliding_window5", _cfg_common("mixtral", intermediate_size=40, num_local_experts=6, sliding_window=5)),
        ("qwen3_moe", _cfg_common("qwen3_moe", head_dim=16, intermediate_size=48, moe_intermediate_size=16,
                                  num_experts=8, num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1,
                                  mlp_only_layers=[], attention_bias=False, rope_theta=1e6)),
        ("qwen3_moe/attention_bias+tied",
         _cfg_common("qwen3_moe", head_dim=8, intermediate_size=48, moe_intermediate_size=16, num_experts=8,
                     norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1], attention_bias=True,
                     tie_word_embeddings=True)),
        ("olmoe", _cfg_common("olmoe", num_key_value_heads=4, intermediate_size=16, num_experts=8, norm_topk_prob=False,
                              clip_qkv=None, attention_bias=False, rms_norm_eps=1e-5)),
        ("olmoe/clip_qkv+gqa+norm+tied",
         _cfg_common("olmoe", intermediate_size=16, num_experts=8, norm_topk_prob=True, clip_qkv=0.3,
                     attention_bias=False, tie_word_embeddings=True)),
        ("deepseek_v2", _cfg_common("deepseek_v2", **ds)),
        ("deepseek_v2/q_lora+group_limited+norm+bias+freq2",
         _cfg_common("deepseek_v2", **dict(ds, q_lora_rank=20, topk_method="group_limited_greedy", n_group=4,
                                          topk_group=2, norm_topk_prob=True, attention_bias=True, moe_layer_freq=2,
                                          num_hidden_layers=4, first_k_dense_replace=0))),
        ("deepseek_v2/no_norm+scaling2.5+mscale_ne",
         _cfg_common("deepseek_v2", **dict(ds, routed_scaling_factor=2.5, n_shared_experts=0,
                                          rope_scaling=dict(yarn, mscale=1.0, mscale_all_dim=0.5)))),
        ("deepseek_v2/no_rope_scaling", _cfg_common("deepseek_v2", **dict(ds, rope_scaling=None))),
    ]


def synth_tensors(cfg, rng):
    """Random float32 tensors with the HF state-dict names/shapes of cfg (via Model.expected_names on a
    shape oracle)."""
    t = cfg["model_type"]
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or H // nh

    def shape_of(name):
        base = name.rsplit(".", 2)
        leaf = name.split(".")[-2] if name.endswith((".weight", ".bias")) else name
        is_bias = name.endswith(".bias")
        if name == "model.embed_tokens.weight" or name == "lm_head.weight":
            return (V, H)
        if name == "model.norm.weight" or leaf in ("input_layernorm", "post_attention_layernorm"):
            return (H,)
        if t == "deepseek_v2":
            qh = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
            shapes = {"q_proj": (nh * qh, H), "q_a_proj": (cfg.get("q_lora_rank") or 0, H),
                      "q_a_layernorm": (cfg.get("q_lora_rank") or 0,),
                      "q_b_proj": (nh * qh, cfg.get("q_lora_rank") or 0),
                      "kv_a_proj_with_mqa": (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], H),
                      "kv_a_layernorm": (cfg["kv_lora_rank"],),
                      "kv_b_proj": (nh * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"]),
                      "o_proj": (H, nh * cfg["v_head_dim"])}
        else:
            shapes = {"q_proj": (nh * hd, H), "k_proj": (nkv * hd, H), "v_proj": (nkv * hd, H),
                      "o_proj": (H, nh * hd)}
            if t == "qwen3_moe":
                shapes.update({"q_norm": (hd,), "k_norm": (hd,)})
            if t == "olmoe":
                shapes.update({"q_norm": (nh * hd,), "k_norm": (nkv * hd,)})
        if leaf in shapes:
            s = shapes[leaf]
            return (s[0],) if is_bias else s
        # MLPs
        if leaf == "gate":
            n = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
            return (n, H)
        if leaf == "shared_expert_gate":
            return (1, H)
        if ".experts." in name:
            inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
        elif ".shared_expert." in name:
            inter = cfg["shared_expert_intermediate_size"]
        elif ".shared_experts." in name:
            inter = cfg["moe_intermediate_size"] * cfg["n_shared_experts"]
        else:
            inter = cfg["intermediate_size"]
        if leaf in ("gate_proj", "up_proj", "w1", "w3"):
            return (inter, H)
        if leaf in ("down_proj", "w2"):
            return (H, inter)
        raise KeyError(f"no shape rule for {name} ({base})")

    # Names come from a throw-away Model built on a config-only directory.
    tmp = tempfile.mkdtemp(prefix="reflayout_")
    try:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        ref.write_safetensors(os.path.join(tmp, "model.safetensors"), {})
        names = ref.Model(tmp).expected_names()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {}
    for name in names:
        s = shape_of(name)
        leaf = name.split(".")[-2]
        if "norm" in leaf:
            a = 1.0 + 0.2 * rng.standard_normal(s)
        elif name.endswith(".bias"):
            a = 0.2 * rng.standard_normal(s)
        elif name == "model.embed_tokens.weight":
            a = rng.standard_normal(s)
        elif leaf == "gate":
            a = 3.0 * rng.standard_normal(s) / math.sqrt(s[1])
        else:
            a = rng.standard_normal(s) / math.sqrt(s[1])
        out[name] = a.astype(np.float32)
    return out


def write_checkpoint(d, cfg, tensors, shards=1):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if shards == 1:
        ref.write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        return
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        ref.write_safetensors(os.path.join(d, fn), part)
        for n in part:
            weight_map[n] = fn
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)


def model_tests(t, archs, work):
    log("model checks on self-written HF-layout checkpoints")
    rng = np.random.default_rng(1234)
    ids = [int(v) for v in rng.integers(0, 96, size=12)]
    for label, cfg in selftest_configs():
        if cfg["model_type"] not in archs:
            continue
        t0 = time.time()
        tensors = synth_tensors(cfg, rng)
        d1 = os.path.join(work, label.replace("/", "__"))
        d2 = d1 + "__sharded"
        write_checkpoint(d1, cfg, tensors, shards=1)
        write_checkpoint(d2, cfg, tensors, shards=3)
        m = ref.Model(d1)
        try:
            m.check_layout()
            t.check(True, "layout")
        except ValueError as e:
            t.check(False, f"{label}: {e}")
        full = m.forward(ids)
        scale = float(np.max(np.abs(full)))
        t.check(full.shape == (len(ids), cfg["vocab_size"]) and full.dtype == np.float32, f"{label}: logits shape/dtype")
        t.check(bool(np.all(np.isfinite(full))), f"{label}: finite logits")
        # Every tensor except the routed experts must have been read; routed experts: most of them.
        unused = [n for n in m.ckpt.unused() if ".experts." not in n]
        t.check(not unused, f"{label}: tensors never read by the forward: {unused[:6]}")
        # vectorised == slow independent loop
        naive = m.forward(ids, naive=True)
        err = float(np.max(np.abs(naive - full)))
        t.check(err <= 2e-5 * scale, f"{label}: vectorised vs token-by-token max err {err:.3e} (scale {scale:.3g})")
        # causality: a prefix gives the first rows
        pre = m.forward(ids[:7])
        perr = float(np.max(np.abs(pre - full[:7])))
        t.check(perr <= 1e-6 * scale, f"{label}: prefix logits differ from the first rows by {perr:.3e}")
        # a change of the last token does not change earlier rows
        alt = list(ids)
        alt[-1] = (alt[-1] + 1) % cfg["vocab_size"]
        aerr = float(np.max(np.abs(m.forward(alt)[:-1] - full[:-1])))
        t.check(aerr <= 1e-6 * scale, f"{label}: changing the last token changed earlier rows by {aerr:.3e}")
        # sharded checkpoint gives identical logits
        sh = ref.Model(d2).forward(ids)
        t.check(np.array_equal(sh, full), f"{label}: sharded checkpoint logits differ")
        # the weights were rounded to bf16 exactly: a re-read tensor is bf16-representable
        emb = m.ckpt["model.embed_tokens.weight"]
        t.check(np.all((emb.view(np.uint32) & 0xFFFF) == 0), f"{label}: upcast bf16 has nonzero low bits")
        log(f"  {label:<48} max|logit| {scale:7.3f}  naive err {err:.2e}  prefix err {perr:.1e}  "
            f"({time.time() - t0:.1f}s)")
    # CLI
    label, cfg = selftest_configs()[0]
    if cfg["model_type"] in archs:
        d1 = os.path.join(work, label.replace("/", "__"))
        out = os.path.join(work, "cli.f32")
        p = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "moe_reference.py"),
                            "--model", d1, "--ids", ",".join(map(str, ids)), "--out", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        t.check(p.returncode == 0, f"CLI exit {p.returncode}: {p.stdout.decode()[-1000:]}")
        if p.returncode == 0:
            got = np.fromfile(out, dtype="<f4").reshape(len(ids), -1)
            t.check(np.array_equal(got, ref.Model(d1).forward(ids)), "CLI output equals Model.forward")
    # fed-sequence reconstruction of check_logits itself
    rows = np.zeros((5, 8), dtype=np.float32)
    rows[2, 5] = 1
    rows[3, 6] = 1
    rows[4, 1] = 1
    t.check(fed_sequence(rows, [1, 2, 3], 3, set()) == [1, 2, 3, 5, 6], "fed_sequence reconstruction")
    t.check(fed_sequence(rows[:4], [1, 2, 3], 3, {6}) == [1, 2, 3, 5], "fed_sequence with EOS stop")
    for bad_rows, eos, why in ((rows[:4], set(), "early stop without EOS"), (rows[:2], set(), "too few rows")):
        try:
            fed_sequence(bad_rows, [1, 2, 3], 3, eos)
            t.check(False, f"fed_sequence accepts {why}")
        except CheckError:
            t.check(True, why)


def run_self_test(args):
    t = SelfTest()
    t0 = time.time()
    known_answer_tests(t)
    work = tempfile.mkdtemp(prefix="zipmoe_refselftest_")
    try:
        model_tests(t, args.archs, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    if t.failures:
        log(f"\nself-test FAILED: {len(t.failures)} of {t.n} checks ({time.time() - t0:.1f}s)")
        for f in t.failures:
            log("  " + f)
        return 1
    log(f"\nself-test passed: {t.n} checks ({time.time() - t0:.1f}s)")
    return 0
