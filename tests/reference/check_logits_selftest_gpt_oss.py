"""The gpt_oss part of the reference self-test (check_logits.py --self-test): known answers of the MXFP4
decoder, the clamped SwiGLU, attention sinks, the router and gpt-oss's YaRN; config parsing on published-style
config.json files; and small gpt_oss checkpoints written here in the exact HF layout (MXFP4 experts as
`*_blocks` / `*_scales` + BF16 biases, sinks, router bias, BF16 elsewhere) on which the vectorised pass is
checked against the slow one, causality, the sliding window, sharding, and the MXFP4 reader against an
independent dequantization.
"""

import copy
import math
import os
import time

import numpy as np

import moe_reference as ref
from check_logits_compare import config_only_model, log

VOCAB = 200
SEQ = 20   # > every sliding_window used below

# The published openai/gpt-oss-20b config.json (transformers 4.55.0.dev0); gpt-oss-120b differs in
# num_hidden_layers 36 and num_local_experts 128 (and layer_types of 36 entries).
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0, "eos_token_id": 200002,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
    "initializer_range": 0.02, "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": False,
    "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True, "vocab_size": 201088,
}


def small_config(**kw):
    """gpt-oss-20b's config.json shrunk: hidden 64, 4 layers, 8 experts top-4, heads 4/2 of 16, window 8."""
    c = copy.deepcopy(GPT_OSS_20B)
    c.update(hidden_size=64, num_hidden_layers=4, num_local_experts=8, num_experts_per_tok=4, experts_per_token=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=32, sliding_window=8,
             vocab_size=VOCAB, layer_types=["sliding_attention", "full_attention"] * 2, eos_token_id=VOCAB - 2,
             pad_token_id=VOCAB - 1)
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


# --- independent decoders (math.ldexp, loops), for the known answers and the reader check ---

def e2m1_by_ldexp(code):
    """FP4 E2M1 from its definition: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0; exponent 0 is
    subnormal (m * 2^-1)."""
    sign = -1.0 if code & 8 else 1.0
    e, mant = (code >> 1) & 3, code & 1
    if e == 0:
        return sign * math.ldexp(mant, -1)
    return sign * math.ldexp(2 + mant, e - 2)      # (1 + m/2) * 2^(e-1)


def dequantize_mxfp4_runtime(blocks, scales):
    """blocks [E, out, G, 16], scales [E, out, G] -> float32 [E, in = G*32, out], transformers' runtime layout,
    written position by position: input index g*32 + 2j is the low nibble of byte j of block g, g*32 + 2j + 1
    the high one, each times 2^(scale - 127) (float64 ldexp, then rounded once to float32)."""
    e, o, g, _ = blocks.shape
    lut = np.array([e2m1_by_ldexp(c) for c in range(16)], dtype=np.float64)
    out = np.zeros((e, g * 32, o), dtype=np.float32)
    for gi in range(g):
        mult = np.ldexp(1.0, scales[:, :, gi].astype(np.int64) - 127)   # [E, out]
        for j in range(16):
            out[:, gi * 32 + 2 * j, :] = (lut[blocks[:, :, gi, j] & 0x0F] * mult).astype(np.float32)
            out[:, gi * 32 + 2 * j + 1, :] = (lut[blocks[:, :, gi, j] >> 4] * mult).astype(np.float32)
    return out


def known_answer_tests_gpt_oss(t):
    """MXFP4 decoding, the clamped SwiGLU, attention sinks, the router, gpt-oss's YaRN."""
    # E2M1: the 16 codes against the definition, -0.0 at code 8, +-6 at 7 / 15.
    got = ref.E2M1_TO_F32
    want = [e2m1_by_ldexp(c) for c in range(16)]
    t.check(got.dtype == np.float32 and got.tolist() == want
            and [bool(np.signbit(v)) for v in got] == [math.copysign(1, w) < 0 for w in want],
            f"e2m1 table equals the definition incl. signed zeros: {got.tolist()}")
    t.check(float(got[7]) == 6.0 and float(got[15]) == -6.0 and bool(np.signbit(got[8])) and float(got[8]) == 0.0,
            "e2m1: code 7 = 6, code 15 = -6, code 8 = -0.0")
    # E8M0: 2^(code - 127); 0 gives the float32 subnormal 2^-127, 254 gives 2^127, 0xFF is NaN.
    sc = ref.e8m0_to_f32(np.array([127, 128, 126, 0, 254, 255], dtype=np.uint8))
    t.check(sc[:5].tolist() == [1.0, 2.0, 0.5, math.ldexp(1, -127), math.ldexp(1, 127)] and bool(np.isnan(sc[5])),
            f"e8m0 scales (bias 127): {sc.tolist()}")
    # One block of 32: byte 0 = 0x21 -> elements 0, 1 = 0.5, 1.0 (low nibble first); byte 1 = 0x8F -> -6, -0.0;
    # byte 15 = 0x7F -> elements 30, 31 = -6, 6; the rest 0; scale 128 doubles them.
    blk = np.zeros((1, 1, 16), dtype=np.uint8)
    blk[0, 0, 0], blk[0, 0, 1], blk[0, 0, 15] = 0x21, 0x8F, 0x7F
    w = ref.mxfp4_dequantize(blk, np.array([[128]], dtype=np.uint8))
    want = [0.0] * 32
    want[0:4], want[30:32] = [1.0, 2.0, -12.0, -0.0], [-12.0, 12.0]
    t.check(w.shape == (1, 32) and w.dtype == np.float32 and w[0].tolist() == want and bool(np.signbit(w[0, 3])),
            f"mxfp4 block: low nibble first, x 2 at scale 128: {w[0, :4].tolist()} .. {w[0, 30:].tolist()}")
    # Extremes: scale 0 gives 0.5 * 2^-127 = 2^-128 exactly; scale 254 keeps 1.5 * 2^127; 6 * 2^127 overflows.
    w = ref.mxfp4_dequantize(np.full((1, 16), 0x31, dtype=np.uint8), np.array([0], dtype=np.uint8))
    t.check(float(w[0]) == math.ldexp(1, -128) and float(w[1]) == 1.5 * math.ldexp(1, -127),
            "mxfp4 at scale 0: exact float32 subnormals")
    w = ref.mxfp4_dequantize(np.full((1, 16), 0x03, dtype=np.uint8), np.array([254], dtype=np.uint8))
    t.check(float(w[0]) == 1.5 * math.ldexp(1, 127), "mxfp4 at scale 254: 1.5 * 2^127")
    for what, b, s, text in (("0xFF scale", 0x11, 255, "0xFF"), ("overflow", 0x07, 254, "overflows")):
        try:
            ref.mxfp4_dequantize(np.full((1, 16), b, dtype=np.uint8), np.array([s], dtype=np.uint8), "hand")
            t.check(False, f"mxfp4 {what}: no error")
        except ValueError as e:
            t.check(text in str(e), f"mxfp4 {what}: error {e!r} lacks {text!r}")

    # Clamped SwiGLU on gate_up [g0 u0 g1 u1 g2 u2 g3 u3] = [1 0 10 -10 -10 20 0 5]: gate = even columns,
    # up = odd ones; gate <= 7 (not below), |up| <= 7; (up + 1) * gate * sigmoid(1.702 gate).
    gu = np.array([[1, 0, 10, -10, -10, 20, 0, 5]], dtype=np.float32)
    sig = lambda z: 1.0 / (1.0 + math.exp(-z))  # noqa: E731
    want = [1 * sig(1.702), -6 * 7 * sig(7 * 1.702), 8 * -10 * sig(-17.02), 0.0]
    t.close(ref.gpt_oss_swiglu(gu), [want], "gpt-oss swiglu on hand values", rtol=1e-6, atol=1e-12)
    t.close(ref.gpt_oss_swiglu(gu)[0, :3], [0.8457957659328212, -41.99971876981991, -3.2463690358842494e-06],
            "gpt-oss swiglu values", rtol=1e-6)
    t.close(ref.gpt_oss_swiglu(gu, alpha=1.0, limit=0.5), [[0.5 * sig(0.5), 0.5 * 0.5 * sig(0.5),
                                                            1.5 * -10 * sig(-10), 0.0]], "swiglu alpha 1, limit .5",
            rtol=1e-6, atol=1e-12)

    # Sinks: one head, q = 0, two keys, v = [[2 4] [6 8]]. A sink of -inf is the plain softmax; a sink 0 is one
    # more equal logit: row 0 keeps 1/2 of v0, row 1 1/3 of each; a sink ln 2 on row 0 keeps 1/3; a huge sink
    # drives the output to 0. With GQA each query head has its own sink.
    q = np.zeros((1, 2, 2), dtype=np.float32)
    k = np.array([[[1.0, 0.0], [0.0, 1.0]]], dtype=np.float32)
    v = np.array([[[2.0, 4.0], [6.0, 8.0]]], dtype=np.float32)
    t.close(ref.attention(q, k, v, 1.0, sinks=np.array([-np.inf], dtype=np.float32)), [[2, 4], [4, 6]],
            "sink -inf = plain softmax")
    t.close(ref.attention(q, k, v, 1.0, sinks=np.zeros(1, dtype=np.float32)), [[1, 2], [8 / 3, 4]], "sink 0")
    t.close(ref.attention(q, k, v, 1.0, sinks=np.array([math.log(2)], dtype=np.float32))[0], [2 / 3, 4 / 3],
            "sink ln 2 keeps 1/3")
    t.check(float(np.max(np.abs(ref.attention(q, k, v, 1.0, sinks=np.array([1e4], dtype=np.float32))))) < 1e-30,
            "a huge sink drives the attention output to 0")
    q2 = np.zeros((2, 1, 2), dtype=np.float32)
    got = ref.attention(q2, k[:, :1], v[:, :1], 1.0, sinks=np.array([-np.inf, 0.0], dtype=np.float32))
    t.close(got, [[2, 4, 1, 2]], "GQA: the sink is per query head")

    # Router: logits [1 3 2 0], top-2: experts 1, 2, weights softmax([3, 2]) (sum 1), not the full-softmax
    # probabilities; a router bias +2.5 on expert 3 makes it [1 3 2 2.5]: experts 1, 3.
    e1 = math.e / (1 + math.e)
    idx, w = ref.select_experts_gpt_oss(np.array([[1, 3, 2, 0]], dtype=np.float32), 2)
    t.check(idx.tolist() == [[1, 2]], f"gpt-oss router: top-2 of the logits (got {idx.tolist()})")
    t.close(w, [[e1, 1 - e1]], "gpt-oss router: softmax over the 2 chosen logits only")
    x = np.array([[1.0, 0.0]], dtype=np.float32)
    wr = np.array([[1, 0], [3, 0], [2, 0], [0, 0]], dtype=np.float32)
    idx, w = ref.select_experts_gpt_oss(ref.linear(x, wr, np.array([0, 0, 0, 2.5], dtype=np.float32)), 2)
    t.check(idx.tolist() == [[1, 3]], f"gpt-oss router: the bias changes the choice to [1, 3] (got {idx.tolist()})")
    t.close(w, [[1 / (1 + math.exp(-0.5)), 1 - 1 / (1 + math.exp(-0.5))]], "gpt-oss router: biased logits weigh")
    t.close(ref.select_experts_gpt_oss(np.array([[0.3, 0.6]], dtype=np.float32), 1)[1], [[1.0]], "top-1 weight 1")

    # YaRN with gpt-oss-20b's parameters (head_dim 64, theta 150000, factor 32, beta 32/1, original 4096,
    # truncate false): the fractional correction range (8.0928, 17.3980); computed here in float64 python.
    rp = GPT_OSS_20B["rope_scaling"]
    inv, af = ref.hf_yarn_inv_freq_and_attention_factor(64, 150000.0, rp, 131072)
    lo = 64 * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(150000))
    hi = 64 * math.log(4096 / (1 * 2 * math.pi)) / (2 * math.log(150000))
    t.close([lo, hi], [8.092779115512402, 17.39802450158856], "gpt-oss yarn correction range", rtol=1e-12)
    want = []
    for i in range(32):
        f = 150000.0 ** (-2 * i / 64)
        r = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        want.append(f / 32 * r + f * (1 - r))
    t.close(inv, want, "gpt-oss yarn inv_freq (truncate false) two ways", rtol=1e-6)
    t.close([inv[0], inv[8], inv[12], inv[31]], [1.0, 0.050813274815461475, 0.006794959489732219,
                                                 3.0235114281192144e-07], "gpt-oss yarn inv_freq landmarks", rtol=1e-6)
    t.close(af, 1.3465735902799727, "gpt-oss yarn attention factor 1 + 0.1 ln 32", rtol=1e-12)
    inv_t, _ = ref.hf_yarn_inv_freq_and_attention_factor(64, 150000.0, dict(rp, truncate=True), 131072)
    t.check(abs(float(inv_t[12]) / float(inv[12]) - 1) > 1e-2, "gpt-oss yarn: truncate true (range 8, 18) differs")


def _config_model(work, name, cfg):
    return config_only_model(work, "gptoss_cfg_" + name, cfg)


def gpt_oss_config_tests(t, work):
    """Published configs, GptOssConfig defaults, aliases, and the refused configs."""
    log("gpt_oss config checks")
    m = _config_model(work, "20b", GPT_OSS_20B)
    got = (m.n_layers, m.n_experts, m.top_k, m.hidden, m.inter, m.n_heads, m.n_kv, m.head_dim, m.vocab, m.eps, m.tie,
           m.swiglu_limit, m.swiglu_alpha, m.theta, m.rope_type, m.layer_windows[:3])
    t.check(got == (24, 32, 4, 2880, 2880, 64, 8, 64, 201088, 1e-5, False, 7.0, 1.702, 150000.0, "yarn",
                    [128, None, 128]), f"gpt-oss-20b config: {got}")
    inv, af = ref.hf_yarn_inv_freq_and_attention_factor(64, 150000.0, GPT_OSS_20B["rope_scaling"], 131072)
    t.check(np.array_equal(m.inv_freq, inv) and m.rope_mscale == af and m.scale == 0.125,
            "gpt-oss-20b: yarn inv_freq and attention factor, scale 1/8")
    names = set(m.expected_names())
    t.check({"model.layers.23.mlp.experts.down_proj_blocks", "model.layers.0.mlp.experts.gate_up_proj_scales",
             "model.layers.0.mlp.experts.gate_up_proj_bias", "model.layers.5.self_attn.sinks", "lm_head.weight",
             "model.layers.5.mlp.router.bias", "model.layers.5.self_attn.o_proj.bias"} <= names
            and "model.layers.0.mlp.experts.gate_up_proj" not in names and len(names) == 3 + 24 * 19,
            "gpt-oss-20b tensor names (MXFP4 experts, sinks, router bias, q/k/v/o biases)")
    m = _config_model(work, "120b", dict(GPT_OSS_20B, num_hidden_layers=36, num_local_experts=128,
                                         layer_types=["sliding_attention", "full_attention"] * 18))
    t.check((m.n_layers, m.n_experts, m.layer_windows[-2:]) == (36, 128, [128, None]), "gpt-oss-120b config")
    # GptOssConfig defaults for every missing key (gpt-oss-120b's shape, YaRN, window 128 alternating).
    m = _config_model(work, "defaults", {"model_type": "gpt_oss"})
    inv, af = ref.hf_yarn_inv_freq_and_attention_factor(64, 150000.0, {"rope_type": "yarn", "factor": 32.0,
                                                                       "beta_fast": 32.0, "beta_slow": 1.0,
                                                                       "truncate": False,
                                                                       "original_max_position_embeddings": 4096},
                                                        131072)
    got = (m.n_layers, m.n_experts, m.top_k, m.hidden, m.inter, m.n_heads, m.n_kv, m.head_dim, m.vocab, m.eps, m.tie,
           m.theta, m.layer_windows[:2], m.swiglu_limit)
    t.check(got == (36, 128, 4, 2880, 2880, 64, 8, 64, 201088, 1e-5, False, 150000.0, [128, None], 7.0)
            and np.array_equal(m.inv_freq, inv) and m.rope_mscale == af, f"GptOssConfig defaults: {got}")
    t.check("model.layers.0.mlp.experts.gate_up_proj" in m.expected_names(), "no quantization_config: dense experts")
    m = _config_model(work, "nulls", dict(small_config(), num_key_value_heads=None, head_dim=None, hidden_size=96))
    t.check((m.n_kv, m.head_dim) == (4, 24), "explicit nulls: num_key_value_heads = heads, head_dim = hidden // heads")
    m = _config_model(work, "rope_parameters", dict(small_config(rope_scaling=None, rope_theta=None),
                                                    rope_parameters=dict(GPT_OSS_20B["rope_scaling"], rope_theta=5e4)))
    t.check(m.theta == 5e4 and m.rope_type == "yarn", "transformers-5 rope_parameters with rope_theta inside")
    m = _config_model(work, "alias", small_config(num_local_experts=None, num_experts=6))
    t.check(m.n_experts == 6, "num_experts aliases num_local_experts")
    q = dict(GPT_OSS_20B["quantization_config"])
    q["modules_to_not_convert"] = q["modules_to_not_convert"] + ["model.layers.*.mlp.experts"]
    m = _config_model(work, "not_converted", small_config(quantization_config=q))
    t.check("model.layers.3.mlp.experts.down_proj" in m.expected_names(),
            "modules_to_not_convert 'model.layers.*.mlp.experts' (a regex): dense experts")
    bad = [
        ("awq", dict(quantization_config={"quant_method": "awq"}), NotImplementedError, "'awq'"),
        ("dynamic", dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), NotImplementedError, "'dynamic'"),
        ("llama3", dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), NotImplementedError, "'llama3'"),
        ("types_len", dict(layer_types=["full_attention"] * 3), ValueError, "layer_types"),
        ("types_kind", dict(layer_types=["chunked_attention"] * 4), ValueError, "chunked_attention"),
        ("window_null", dict(sliding_window=None), ValueError, "sliding_window"),
        ("no_bias", dict(attention_bias=False), NotImplementedError, "attention_bias"),
        ("partial", dict(partial_rotary_factor=0.5), NotImplementedError, "partial_rotary_factor"),
        ("k_gt_e", dict(num_experts_per_tok=9), ValueError, "num_experts_per_tok"),
        ("alias_conflict", dict(num_experts=6), ValueError, "num_experts"),
    ]
    for name, kw, exc, text in bad:
        cfg = small_config(**kw)
        if name == "window_null":
            cfg["sliding_window"] = None
        try:
            _config_model(work, "bad_" + name, cfg)
            t.check(False, f"gpt_oss config {name}: no error")
        except exc as e:
            t.check(text in str(e), f"gpt_oss config {name}: error {e!r} lacks {text!r}")
    m = _config_model(work, "full_only", dict(small_config(layer_types=["full_attention"] * 4)))
    t.check(m.layer_windows == [None] * 4, "full_attention layers have no window")


# --- checkpoints ---

def synth_gpt_oss(cfg, rng, mxfp4=True, f32=()):
    """(tensors, dtypes) of a gpt_oss checkpoint in the HF layout: BF16 tensors, the experts as MXFP4
    `*_blocks` / `*_scales` (U8; random nibbles, scale codes 120..123, i.e. 2^-7..2^-4) when `mxfp4`, else the
    dense runtime `gate_up_proj` [E, H, 2I] / `down_proj` [E, I, H]; names ending with a suffix in `f32`
    are written F32."""
    m = _config_model(os.path.dirname(cfg["_dir"]), "shape_oracle_" + os.path.basename(cfg["_dir"]),
                      {k: v for k, v in cfg.items() if k != "_dir"})
    H, V, E, I = m.hidden, m.vocab, m.n_experts, m.inter
    nh, nkv, hd = m.n_heads, m.n_kv, m.head_dim
    shapes = {"q_proj": (nh * hd, H), "k_proj": (nkv * hd, H), "v_proj": (nkv * hd, H), "o_proj": (H, nh * hd)}
    tensors, dtypes = {}, {}
    for name in m.expected_names():
        leaf = name.split(".")[-2] if name.endswith((".weight", ".bias")) else name.split(".")[-1]
        if name == "model.embed_tokens.weight":
            a = rng.standard_normal((V, H))
        elif name == "lm_head.weight":
            a = rng.standard_normal((V, H)) / math.sqrt(H)
        elif "norm" in leaf:
            a = 1.0 + 0.2 * rng.standard_normal(H)
        elif leaf == "sinks":
            a = rng.standard_normal(nh)
        elif leaf in shapes:
            s = shapes[leaf]
            a = 0.2 * rng.standard_normal(s[0]) if name.endswith(".bias") else rng.standard_normal(s) / math.sqrt(s[1])
        elif leaf == "router":
            a = rng.standard_normal(E) if name.endswith(".bias") else 3.0 * rng.standard_normal((E, H)) / math.sqrt(H)
        elif leaf.endswith("_bias"):
            a = 0.2 * rng.standard_normal((E, 2 * I) if leaf.startswith("gate_up") else (E, H))
        elif leaf.endswith(("_blocks", "_scales")):
            continue
        else:   # dense experts in the runtime layout
            a = (rng.standard_normal((E, H, 2 * I)) / math.sqrt(H) if leaf == "gate_up_proj"
                 else rng.standard_normal((E, I, H)) / math.sqrt(I))
        tensors[name] = a.astype(np.float32)
        dtypes[name] = "F32" if name.endswith(tuple(f32)) else "BF16"
    if mxfp4:
        for i in range(m.n_layers):
            p = f"model.layers.{i}.mlp.experts."
            for w, (o, n) in (("gate_up_proj", (2 * I, H)), ("down_proj", (H, I))):
                tensors[p + w + "_blocks"] = rng.integers(0, 256, (E, o, n // 32, 16), dtype=np.uint8)
                tensors[p + w + "_scales"] = rng.integers(120, 124, (E, o, n // 32), dtype=np.uint8)
                dtypes[p + w + "_blocks"] = dtypes[p + w + "_scales"] = "U8"
    return tensors, dtypes


def _write(d, cfg, tensors, dtypes, shards=1):
    from check_logits_selftest import write_checkpoint   # imported here: check_logits_selftest imports this module
    write_checkpoint(d, {k: v for k, v in cfg.items() if k != "_dir"}, tensors, shards=shards, dtypes=dtypes)
    return ref.Model(d)


def gpt_oss_model_configs():
    """(label, config, writer options)."""
    params5 = dict(GPT_OSS_20B["rope_scaling"], truncate=True, rope_theta=1e4)
    return [
        ("gpt_oss/mxfp4 (gpt-oss-20b shrunk: top-4, window 8, yarn)", small_config(), dict(mxfp4=True)),
        ("gpt_oss/dense bf16 experts+top-2+window 4+limit .5+rope_parameters+f32 norms, sinks",
         small_config(quantization_config=None, num_experts_per_tok=2, sliding_window=4, swiglu_limit=0.5,
                      layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                      rope_scaling=None, rope_theta=None, rope_parameters=params5, num_key_value_heads=1),
         dict(mxfp4=False, f32=("norm.weight", "layernorm.weight", "sinks"))),
    ]


def _max_err(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def gpt_oss_model_tests(t, work):
    log("gpt_oss model checks on self-written HF-layout checkpoints")
    rng = np.random.default_rng(4321)
    ids = [int(v) for v in rng.integers(0, VOCAB, size=SEQ)]
    for label, cfg, opts in gpt_oss_model_configs():
        t0 = time.time()
        d1 = os.path.join(work, label.split(" ")[0].replace("/", "__"))
        cfg = dict(cfg, _dir=d1)
        tensors, dtypes = synth_gpt_oss(cfg, rng, **opts)
        m = _write(d1, cfg, tensors, dtypes)
        try:
            m.check_layout()
            t.check(True, "layout")
        except ValueError as e:
            t.check(False, f"{label}: {e}")
        full = m.forward(ids)
        scale = float(np.max(np.abs(full)))
        t.check(full.shape == (SEQ, VOCAB) and full.dtype == np.float32 and bool(np.all(np.isfinite(full))),
                f"{label}: logits shape/dtype/finite")
        t.check(not m.ckpt.unused(), f"{label}: tensors never read: {m.ckpt.unused()[:6]}")
        naive = m.forward(ids, naive=True)
        err = _max_err(naive, full)
        t.check(err <= 1e-5 * scale, f"{label}: vectorised vs token-by-token max err {err:.3e} (scale {scale:.3g})")
        perr = _max_err(m.forward(ids[:9]), full[:9])
        t.check(perr <= 1e-6 * scale, f"{label}: prefix logits differ from the first rows by {perr:.3e}")
        alt = ids[:-1] + [(ids[-1] + 1) % VOCAB]
        aerr = _max_err(m.forward(alt)[:-1], full[:-1])
        t.check(aerr <= 1e-6 * scale, f"{label}: changing the last token changed earlier rows by {aerr:.3e}")
        sh = _write(d1 + "__sharded", cfg, tensors, dtypes, shards=3)
        t.check(np.array_equal(sh.forward(ids), full), f"{label}: sharded checkpoint logits differ")
        emb = m.ckpt["model.embed_tokens.weight"]
        t.check(np.all((emb.view(np.uint32) & 0xFFFF) == 0), f"{label}: upcast bf16 has nonzero low bits")
        for what, key, value in (("zero router bias", "mlp.router.bias", 0.0),
                                 ("no sinks (-inf)", "self_attn.sinks", -np.inf)):
            m2 = ref.Model(d1)
            for i in range(m.n_layers):
                n = f"model.layers.{i}.{key}"
                m2.ckpt._cache[n] = np.full_like(m.ckpt[n], value)
            diff = _max_err(m2.forward(ids), full)
            t.check(diff > 1e-3 * scale, f"{label}: {what} changes the logits by only {diff:.2e}")
        if m.swiglu_limit < 7:
            m3 = ref.Model(d1)
            m3.swiglu_limit = 7.0
            diff = _max_err(m3.forward(ids), full)
            t.check(diff > 1e-3 * scale, f"{label}: swiglu_limit {m.swiglu_limit} vs 7 changes the logits by {diff:.2e}")
        if opts.get("mxfp4"):
            mxfp4_vs_dense(t, label, cfg, m, tensors, dtypes, ids, full)
        log(f"  {label[:72]:<72} max|logit| {scale:7.3f}  naive err {err:.2e}  ({time.time() - t0:.1f}s)")
    sliding_window_tests(t, work, rng)
    mxfp4_error_tests(t, work, rng)


def mxfp4_vs_dense(t, label, cfg, m, tensors, dtypes, ids, full):
    """The MXFP4 reader against dequantize_mxfp4_runtime: the runtime tensors equal, and a checkpoint holding
    them dense (F32 `gate_up_proj` / `down_proj`, the experts listed in modules_to_not_convert) gives the
    same logits bit for bit."""
    t.check(any(dtypes[n] == "U8" and m.ckpt.dtype(n) == "U8" for n in tensors), f"{label}: blocks stored U8")
    dense, ddt = {}, {}
    for n, a in tensors.items():
        if n.endswith("_scales"):
            continue
        if n.endswith("_blocks"):
            base = n[:-len("_blocks")]
            dense[base] = dequantize_mxfp4_runtime(a, tensors[base + "_scales"])
            ddt[base] = "F32"
        else:
            dense[n], ddt[n] = a, dtypes[n]
    for i in (0, m.n_layers - 1):
        gu, _, dn, _ = ref.gpt_oss.expert_weights(m, i)
        p = f"model.layers.{i}.mlp.experts."
        t.check(np.array_equal(gu, dense[p + "gate_up_proj"]) and np.array_equal(dn, dense[p + "down_proj"]),
                f"{label}: layer {i} experts differ from the independent dequantization to [E, in, out]")
    q = dict(cfg["quantization_config"])
    q["modules_to_not_convert"] = list(q["modules_to_not_convert"]) + ["model.layers.*.mlp.experts"]
    md = _write(cfg["_dir"] + "__dense", dict(cfg, quantization_config=q), dense, ddt)
    md.check_layout()
    t.check(np.array_equal(md.forward(ids), full), f"{label}: MXFP4 logits differ from those of the dense "
                                                   f"checkpoint of the independently dequantized experts")


def sliding_window_tests(t, work, rng):
    """One sliding layer (window 4) on 16 tokens: changing token 2 changes rows 2..5 only (query i sees key j
    iff 0 <= i - j < 4), in the vectorised and the slow pass; the same model with full attention changes every
    row from 2 on."""
    ids = [int(v) for v in rng.integers(0, VOCAB, size=16)]
    alt = list(ids)
    alt[2] = (alt[2] + 7) % VOCAB
    for kind in ("sliding_attention", "full_attention"):
        cfg = small_config(num_hidden_layers=1, layer_types=[kind], sliding_window=4,
                           _dir=os.path.join(work, "gpt_oss_one_" + kind))
        tensors, dtypes = synth_gpt_oss(cfg, rng)
        m = _write(cfg["_dir"], cfg, tensors, dtypes)
        for naive in (False, True):
            a, b = m.forward(ids, naive=naive), m.forward(alt, naive=naive)
            scale = float(np.max(np.abs(a)))
            changed = [r for r in range(16) if _max_err(a[r], b[r]) > 1e-4 * scale]
            want = [2, 3, 4, 5] if kind == "sliding_attention" else list(range(2, 16))
            t.check(changed == want, f"{kind} (naive={naive}): token 2 changes rows {changed}, want {want}")
            if kind == "sliding_attention":
                same = max(_max_err(a[r], b[r]) for r in list(range(2)) + list(range(6, 16)))
                t.check(same <= 1e-6 * scale, f"sliding window (naive={naive}): rows outside moved by {same:.2e}")


def mxfp4_error_tests(t, work, rng):
    """MXFP4 checkpoint errors, named when the checkpoint is opened (or the bad scale read)."""
    cfg = small_config(num_hidden_layers=1, layer_types=["full_attention"], _dir=os.path.join(work, "gpt_oss_err"))
    tensors, dtypes = synth_gpt_oss(cfg, rng)
    p = "model.layers.0.mlp.experts."
    q = dict(cfg["quantization_config"])
    cases = [
        ("no_scales", {}, [p + "down_proj_scales"], ValueError, "without U8 scales"),
        ("scales_shape", {p + "down_proj_scales": tensors[p + "down_proj_scales"][:, :3]}, [], ValueError,
         "[..., G]"),
        ("no_quant_config", {"quantization_config": None}, [], ValueError, "no quantization_config"),
        ("not_converted", {"quantization_config": dict(q, modules_to_not_convert=["model.layers.*.mlp.experts"])}, [],
         ValueError, "modules_to_not_convert"),
    ]
    for name, change, drop, exc, text in cases:
        c = dict(cfg, **{k: v for k, v in change.items() if not k.startswith("model.")})
        tens = {n: a for n, a in tensors.items() if n not in drop}
        tens.update({k: v for k, v in change.items() if k.startswith("model.")})
        try:
            _write(os.path.join(work, "gpt_oss_err_" + name), {k: v for k, v in c.items() if v is not None}, tens,
                   dtypes)
            t.check(False, f"mxfp4 checkpoint {name}: no error")
        except exc as e:
            t.check(text in str(e), f"mxfp4 checkpoint {name}: error {e!r} lacks {text!r}")
    bad = dict(tensors)
    bad[p + "gate_up_proj_scales"] = np.array(tensors[p + "gate_up_proj_scales"])
    bad[p + "gate_up_proj_scales"][0, 0, 0] = 0xFF
    m = _write(os.path.join(work, "gpt_oss_err_nan_scale"), cfg, bad, dtypes)
    try:
        m.forward([1, 2])
        t.check(False, "mxfp4 scale 0xFF: no error")
    except ValueError as e:
        t.check("0xFF" in str(e) and "gate_up_proj_blocks" in str(e), f"mxfp4 scale 0xFF: error {e!r}")


def gpt_oss_tests(t, work):
    gpt_oss_config_tests(t, work)
    gpt_oss_model_tests(t, work)
