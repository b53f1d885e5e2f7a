#!/usr/bin/python3
"""The lfm2_moe part of the reference self-test (check_logits.py --self-test; also runnable on its own:
/usr/bin/python3 tests/reference/check_logits_selftest_lfm2.py [--keep]).

Known answers: the router (a bias that changes the choice but not the weights, the 1e-6 in the normalisation,
norm_topk_prob off, routed_scaling_factor, use_expert_bias off, ties), the depthwise conv (torch's padding K-1 cut to
the first S outputs: zeros before the first token, the last tap on the current token, K = 1); three one-layer
checkpoints worked by hand: a short-conv layer in small exact numbers (the B, C, x chunks, the B gate, the conv and
its three biases, the final embedding_norm, an untied head), a sigmoid-routed MoE layer (the bias chooses expert 2
over expert 1, the weights stay the unbiased sigmoids, the 1e-6 halves the weights when the sigmoids are ~1e-6,
routed_scaling_factor), and an attention layer (per-head q/k RMSNorm before RoPE, GQA) written out in float64. Config
parsing: the LFM2-8B-A1B config (reconstructed), Lfm2MoeConfig's defaults, full_attn_idxs, tie_embedding over
tie_word_embeddings, rope_theta's sources, and the refusals. Small random checkpoints in the released layout
(per-expert w1 / w3 / w2, expert_bias F32): vectorised == token by token, causality, sharding, the expert bias
(zeroed moves the logits, shifted by a constant does not), and each row depending on its own token alone when the
conv sees one token and no layer attends. Planted bugs (the vectorised pass patched) must be caught: the bias in the
weights, no 1e-6, no B gate, the chunks in another order, the conv output cut from the wrong end, no RoPE, the
interleaved RoPE, no embedding_norm, softmax instead of sigmoid.
"""

import copy
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_reference as ref  # noqa: E402
import moe_reference_lfm2 as lf  # noqa: E402
from check_logits_compare import config_only_model, log  # noqa: E402
from selftest_util import rel as _rel, sig as _sig, silu as _silu, planted, run_part_alone  # noqa: E402

VOCAB = 120
SEQ = 32
_CONV = lf.conv1d_padded      # the unpatched conv, for the planted bugs that wrap it

# LiquidAI/LFM2-8B-A1B's config.json, reconstructed (not downloaded): a parsing test of the keys, not a statement
# about the published file. Corroborated by the model card / blog: hidden 2048, 24 layers of which 6 attention
# (1:3), 32 experts top-4, expert width 1792, the first two layers dense, 32 heads / 8 kv. From memory only: the
# attention layers' indices, eos id 7, intermediate_size 7168, the original key tie_embedding.
LFM2_8B_A1B = {
    "architectures": ["Lfm2MoeForCausalLM"], "model_type": "lfm2_moe", "bos_token_id": 1, "conv_L_cache": 3,
    "conv_bias": False, "dtype": "bfloat16", "eos_token_id": 7, "hidden_size": 2048, "intermediate_size": 7168,
    "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv",
                    "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv",
                    "full_attention", "conv", "conv", "full_attention", "conv", "conv"],
    "max_position_embeddings": 128000, "moe_intermediate_size": 1792, "norm_eps": 1e-05, "norm_topk_prob": True,
    "num_attention_heads": 32, "num_dense_layers": 2, "num_experts": 32, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "pad_token_id": 0, "rope_theta": 1000000.0,
    "routed_scaling_factor": 1.0, "tie_embedding": True, "transformers_version": "4.57.0", "use_cache": True,
    "use_expert_bias": True, "vocab_size": 65536,
}


def small_config(**kw):
    """LFM2-8B-A1B shrunk: hidden 32, 6 layers (conv conv attn conv conv attn), heads 4 / kv 2 (head_dim 8), dense
    width 48, 8 experts top-3 of width 16, the first two layers dense; tie_embedding as published. A key set to None
    is removed."""
    c = copy.deepcopy(LFM2_8B_A1B)
    c.update(hidden_size=32, num_hidden_layers=6,
             layer_types=["conv", "conv", "full_attention", "conv", "conv", "full_attention"],
             num_attention_heads=4, num_key_value_heads=2, intermediate_size=48, moe_intermediate_size=16,
             num_experts=8, num_experts_per_tok=3, vocab_size=VOCAB, eos_token_id=VOCAB - 1, bos_token_id=VOCAB - 2,
             pad_token_id=VOCAB - 3)
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def _config_model(work, name, cfg):
    return config_only_model(work, "lfm2_cfg_" + name, cfg)


# ----------------------------------------------------------------------------------------------------
# known answers of the helpers
# ----------------------------------------------------------------------------------------------------

def known_answer_tests_lfm2(t):
    sel = ref.select_experts_lfm2
    # Scores [.9 .8 .7 .1] + bias [0 0 .3 0] = [.9 .8 1.0 .1]: top-2 = experts 2 then 0 (not 1); the weights are the
    # UNBIASED scores .7, .9 over (1.6 + 1e-6); routed_scaling_factor 2 multiplies after the division.
    sc = np.array([[0.9, 0.8, 0.7, 0.1]], dtype=np.float32)
    bias = np.array([0.0, 0.0, 0.3, 0.0], dtype=np.float32)
    idx, w = sel(sc, bias, 2, True, 1.0)
    t.check(idx.tolist() == [[2, 0]], f"lfm2 router: the bias chooses experts [2, 0] (got {idx.tolist()})")
    t.close(w, [[0.7 / (1.6 + 1e-6), 0.9 / (1.6 + 1e-6)]], "lfm2 router: unbiased scores / (sum + 1e-6)")
    t.close(sel(sc, bias, 2, True, 2.0)[1], [[1.4 / (1.6 + 1e-6), 1.8 / (1.6 + 1e-6)]],
            "lfm2 router: routed_scaling_factor after the normalisation")
    t.close(sel(sc, bias, 2, False, 2.5)[1], [[1.75, 2.25]], "lfm2 router: no norm -> unbiased scores x 2.5")
    idx, w = sel(sc, None, 2, True, 1.0)
    t.check(idx.tolist() == [[0, 1]], "lfm2 router: use_expert_bias false picks the top scores")
    t.close(w, [[0.9 / (1.7 + 1e-6), 0.8 / (1.7 + 1e-6)]], "lfm2 router: no bias, normalised")
    # A bias added to every expert changes nothing (the weights never see it).
    idx5, w5 = sel(sc, bias + np.float32(5.0), 2, True, 1.0)
    t.check(idx5.tolist() == [[2, 0]] and np.array_equal(w5, sel(sc, bias, 2, True, 1.0)[1]),
            "lfm2 router: a uniform +5 on the bias changes neither the choice nor the weights")
    # The 1e-6: scores 1e-6 and 1e-6 (and 0, 0) give 1e-6 / 3e-6 = 1/3 each, not 1/2.
    tiny = np.array([[1e-6, 0.0, 1e-6, 0.0]], dtype=np.float32)
    idx, w = sel(tiny, None, 2, True, 1.0)
    t.check(idx.tolist() == [[0, 2]], f"lfm2 router: tiny scores choose experts 0, 2 (got {idx.tolist()})")
    t.close(w, [[1 / 3, 1 / 3]], "lfm2 router: 1e-6 / (2e-6 + 1e-6) = 1/3 (the epsilon is not negligible)",
            rtol=1e-6)
    # top-1 with norm: s / (s + 1e-6), not 1.
    t.close(sel(np.array([[0.25, 0.5]], dtype=np.float32), None, 1, True, 1.0)[1], [[0.5 / (0.5 + 1e-6)]],
            "lfm2 router: top-1 normalised = s / (s + 1e-6)", rtol=1e-7, atol=0)
    # Ties (equal biased scores) go to the lower index.
    idx, _ = sel(np.array([[0.5, 0.5, 0.5]], dtype=np.float32), np.array([0, 0.1, 0.1], dtype=np.float32), 2,
                 True, 1.0)
    t.check(idx.tolist() == [[1, 2]], f"lfm2 router: ties go to the lower index (got {idx.tolist()})")

    # The depthwise conv, torch's Conv1d(padding=K-1) cut to the first S outputs: K = 3, w = [1 2 3] (w[K-1] on the
    # current token), b = .5, x = [1 0 0 5]: [3 + .5, 2 + .5, 1 + .5, 15 + .5]. Cut from the end instead
    # (the last S of S + K - 1 outputs) it would read future tokens: [1 + .5, 0 + .5, 5 + .5, 10 + .5].
    w = np.array([[[1, 2, 3]]], dtype=np.float32)
    xs = np.array([[1], [0], [0], [5]], dtype=np.float32)
    t.close(lf.conv1d_padded(xs, w, np.array([0.5], dtype=np.float32))[:, 0], [3.5, 2.5, 1.5, 15.5],
            "lfm2 conv: causal, zeros before the first token, bias added once")
    t.close(lf.conv1d_padded(xs, w)[:, 0], [3, 2, 1, 15], "lfm2 conv without bias")
    # Two channels with different kernels: channel 1 = [0 0 1] copies its input, channel 0 = [1 0 0] delays by 2.
    x2 = np.array([[1, 7], [2, 8], [3, 9]], dtype=np.float32)
    w2 = np.array([[[1, 0, 0]], [[0, 0, 1]]], dtype=np.float32)
    t.close(lf.conv1d_padded(x2, w2), [[0, 7], [0, 8], [1, 9]], "lfm2 conv: depthwise, one kernel per channel")
    t.close(lf.conv1d_padded(x2, np.array([[[2]], [[-1]]], dtype=np.float32)), [[2, -7], [4, -8], [6, -9]],
            "lfm2 conv with K = 1 (no padding)")

    # The in_proj split: B, C, x in that order.
    class M:
        hidden = 2
    b_, c_, x_ = lf.split_in_proj(M, np.arange(6, dtype=np.float32)[None])
    t.check((b_.tolist(), c_.tolist(), x_.tolist()) == ([[0, 1]], [[2, 3]], [[4, 5]]),
            "lfm2 in_proj split: B [0, H), C [H, 2H), x [2H, 3H)")


# ----------------------------------------------------------------------------------------------------
# config parsing
# ----------------------------------------------------------------------------------------------------

def lfm2_config_tests(t, work):
    log("lfm2_moe config checks")
    m = _config_model(work, "8b", LFM2_8B_A1B)
    attn = [i for i, k in enumerate(m.layer_types) if k == "full_attention"]
    t.check(attn == [2, 6, 10, 14, 18, 21], f"LFM2-8B-A1B: attention layers {attn}")
    got = (m.hidden, m.n_layers, m.n_heads, m.n_kv, m.head_dim, m.vocab, m.eps, m.tie, m.n_experts, m.top_k, m.inter,
           m.moe_inter, m.n_dense, m.use_expert_bias, m.norm_topk, m.routed_scale, m.conv_bias, m.conv_L, m.theta,
           m.scale)
    want = (2048, 24, 32, 8, 64, 65536, 1e-5, True, 32, 4, 7168, 1792, 2, True, True, 1.0, False, 3, 1e6, 0.125)
    t.check(got == want, f"LFM2-8B-A1B config values: {got}")
    t.check(np.array_equal(m.inv_freq, ref.rope_inv_freq(64, 1e6)), "LFM2-8B-A1B: inv_freq over head_dim 64, 1e6")
    t.check([m.is_moe_layer(i) for i in range(4)] == [False, False, True, True],
            "num_dense_layers 2: layers 0, 1 dense")
    shapes = lf.expected_shapes(m)
    t.check(shapes["model.layers.0.conv.in_proj.weight"] == (6144, 2048)
            and shapes["model.layers.0.conv.conv.weight"] == (2048, 1, 3)
            and shapes["model.layers.0.conv.out_proj.weight"] == (2048, 2048)
            and shapes["model.layers.0.feed_forward.w1.weight"] == (7168, 2048)
            and shapes["model.layers.1.feed_forward.w2.weight"] == (2048, 7168)
            and shapes["model.layers.2.self_attn.q_proj.weight"] == (2048, 2048)
            and shapes["model.layers.2.self_attn.k_proj.weight"] == (512, 2048)
            and shapes["model.layers.2.self_attn.out_proj.weight"] == (2048, 2048)
            and shapes["model.layers.2.self_attn.q_layernorm.weight"] == (64,)
            and shapes["model.layers.2.feed_forward.gate.weight"] == (32, 2048)
            and shapes["model.layers.2.feed_forward.expert_bias"] == (32,)
            and shapes["model.layers.23.feed_forward.experts.31.w1.weight"] == (1792, 2048)
            and shapes["model.layers.23.feed_forward.experts.31.w2.weight"] == (2048, 1792)
            and shapes["model.embedding_norm.weight"] == (2048,), "LFM2-8B-A1B tensor shapes")
    n_want = 2 + 2 * (2 + 3 + 3) + 6 * (2 + 6 + 2 + 96) + 16 * (2 + 3 + 2 + 96)
    t.check(len(shapes) == n_want and "lm_head.weight" not in shapes and "model.norm.weight" not in shapes
            and not any(".bias" in n for n in shapes if ".conv." in n),
            f"LFM2-8B-A1B: {len(shapes)} names (want {n_want}), tied, no conv biases")

    # Lfm2MoeConfig defaults for every missing key (layer_types given: it has no usable default).
    m = _config_model(work, "defaults", {"model_type": "lfm2_moe", "layer_types": ["conv"] * 32})
    got = (m.vocab, m.hidden, m.inter, m.moe_inter, m.n_layers, m.n_heads, m.n_kv, m.head_dim, m.eps, m.conv_bias,
           m.conv_L, m.n_dense, m.top_k, m.n_experts, m.use_expert_bias, m.routed_scale, m.norm_topk, m.tie, m.theta)
    t.check(got == (65536, 2048, 7168, 1792, 32, 32, 8, 64, 1e-5, False, 3, 2, 4, 32, True, 1.0, True, True, 1e6),
            f"Lfm2MoeConfig defaults: {got}")
    m = _config_model(work, "nulls", dict(small_config(), num_attention_heads=8, num_key_value_heads=None,
                                          norm_eps=None, routed_scaling_factor=None, use_expert_bias=None))
    t.check((m.n_kv, m.eps, m.routed_scale, m.use_expert_bias) == (8, 1e-5, 1.0, True),
            f"null keys take the class defaults: {(m.n_kv, m.eps, m.routed_scale, m.use_expert_bias)}")

    # full_attn_idxs without layer_types; layer_types wins when both are there.
    cfg = small_config(layer_types=None, full_attn_idxs=[1, 3], num_hidden_layers=4)
    m = _config_model(work, "idxs", cfg)
    t.check(m.layer_types == ["conv", "full_attention", "conv", "full_attention"], f"full_attn_idxs: {m.layer_types}")
    m = _config_model(work, "idxs_empty", small_config(layer_types=None, full_attn_idxs=[], num_hidden_layers=2))
    t.check(m.layer_types == ["conv", "conv"], "full_attn_idxs [] = every layer conv")
    m = _config_model(work, "both", small_config(full_attn_idxs=[0]))
    t.check(m.layer_types == small_config()["layer_types"], "layer_types wins over full_attn_idxs")

    # Tied head: tie_embedding (the original key) wins; else tie_word_embeddings; else tied.
    for name, kw, want_tie in (("te_false", dict(tie_embedding=False, tie_word_embeddings=True), False),
                               ("te_true", dict(tie_embedding=True, tie_word_embeddings=False), True),
                               ("twe_false", dict(tie_embedding=None, tie_word_embeddings=False), False),
                               ("none", dict(tie_embedding=None), True),
                               ("te_null", dict(tie_word_embeddings=False, tie_embedding="null"), False)):
        cfg = small_config(**kw)
        if cfg.get("tie_embedding") == "null":
            cfg["tie_embedding"] = None       # present with the value null: tie_word_embeddings decides
        m = _config_model(work, "tie_" + name, cfg)
        t.check(m.tie == want_tie and (("lm_head.weight" in m.expected_names()) == (not want_tie)),
                f"tie {kw}: tied {m.tie}, want {want_tie}")

    # rope_theta: rope_parameters first, then the top-level key, then 1e6; head_dim from the config.
    m = _config_model(work, "rope_params", small_config(rope_parameters={"rope_type": "default", "rope_theta": 1e4},
                                                        rope_theta=5e5))
    t.check(m.theta == 1e4, f"rope_parameters.rope_theta wins ({m.theta})")
    m = _config_model(work, "rope_top", small_config(rope_theta=5e5))
    t.check(m.theta == 5e5, "top-level rope_theta")
    m = _config_model(work, "rope_none", small_config(rope_theta=None))
    t.check(m.theta == 1e6, "rope_theta default 1e6")
    m = _config_model(work, "head_dim", small_config(head_dim=16))
    t.check(m.head_dim == 16 and m.scale == 0.25 and np.array_equal(m.inv_freq, ref.rope_inv_freq(16, 1e6))
            and lf.expected_shapes(m)["model.layers.2.self_attn.q_proj.weight"] == (64, 32)
            and lf.expected_shapes(m)["model.layers.2.self_attn.out_proj.weight"] == (32, 64),
            "head_dim 16 (not hidden / heads = 8): projections, scale 1/4, rope over 16")
    m = _config_model(work, "conv_bias", small_config(conv_bias=True, use_expert_bias=False, num_dense_layers=0))
    names = m.expected_names()
    t.check(all(f"model.layers.0.conv.{n}.bias" in names for n in ("in_proj", "conv", "out_proj"))
            and not any("expert_bias" in n for n in names) and "model.layers.0.feed_forward.gate.weight" in names,
            "conv_bias: three biases per conv layer; use_expert_bias false: no expert_bias; num_dense_layers 0")

    bad = [
        ("kind_attention", small_config(layer_types=["conv"] * 5 + ["attention"]), ValueError, "layer_types"),
        ("kind_short_conv", small_config(layer_types=["short_conv"] * 6), ValueError, "layer_types"),
        ("types_len", small_config(layer_types=["conv"] * 5), ValueError, "layer_types"),
        ("no_types", small_config(layer_types=None), ValueError, "full_attn_idxs"),
        ("idx_range", small_config(layer_types=None, full_attn_idxs=[6]), ValueError, "full_attn_idxs"),
        ("idx_dup", small_config(layer_types=None, full_attn_idxs=[1, 1]), ValueError, "full_attn_idxs"),
        ("act", small_config(hidden_act="gelu"), NotImplementedError, "'gelu'"),
        ("rope_yarn", small_config(rope_parameters={"rope_type": "yarn", "factor": 4.0}), NotImplementedError, "yarn"),
        ("kv", small_config(num_key_value_heads=3), ValueError, "num_key_value_heads"),
        ("k_gt_e", small_config(num_experts_per_tok=9), ValueError, "num_experts_per_tok"),
        ("conv_L0", small_config(conv_L_cache=0), ValueError, "conv_L_cache"),
        ("head_dim_odd", small_config(head_dim=7), ValueError, "head_dim"),
        ("hidden_heads", small_config(num_attention_heads=5, num_key_value_heads=1), ValueError, "hidden_size"),
        ("scale_str", small_config(routed_scaling_factor="2"), ValueError, "routed_scaling_factor"),
        ("bias_str", small_config(conv_bias="yes"), ValueError, "conv_bias"),
    ]
    for name, cfg, exc, text in bad:
        try:
            _config_model(work, "bad_" + name, cfg)
            t.check(False, f"lfm2_moe config {name}: no error")
        except exc as e:
            t.check(text in str(e), f"lfm2_moe config {name}: error {e!r} lacks {text!r}")


# ----------------------------------------------------------------------------------------------------
# checkpoints
# ----------------------------------------------------------------------------------------------------

def synth(m, rng):
    """{name: float32 array} for every expected tensor of m (shapes from lf.expected_shapes)."""
    out = {}
    for name, shape in lf.expected_shapes(m).items():
        if name == "model.embed_tokens.weight":
            a = rng.standard_normal(shape)
        elif name == "lm_head.weight":
            a = rng.standard_normal(shape) / math.sqrt(shape[1])
        elif name.endswith("norm.weight"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(lf.EXPERT_BIAS):
            a = rng.uniform(-0.3, 0.3, shape)        # of the order of the sigmoid gaps: it changes the choice
        elif name.endswith("feed_forward.gate.weight"):
            a = 3.0 * rng.standard_normal(shape) / math.sqrt(shape[1])
        elif name.endswith("conv.conv.weight"):
            a = 0.6 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.2 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / math.sqrt(shape[-1])
        out[name] = a.astype(np.float32)
    return out


def _dtypes(tensors):
    return {n: "F32" for n in tensors if n.endswith(lf.EXPERT_BIAS)}


def _write(work, name, cfg, tensors=None, rng=None, shards=1):
    """Writes cfg + tensors (random ones from rng if None; BF16, expert_bias F32) as WORK/NAME; returns (Model,
    tensors)."""
    from check_logits_selftest import write_checkpoint   # imported here: check_logits_selftest imports this module
    d = os.path.join(work, name)
    if tensors is None:
        tensors = synth(_config_model(work, "oracle_" + name, cfg), rng)
    write_checkpoint(d, cfg, tensors, shards=shards, dtypes=_dtypes(tensors))
    return ref.Model(d), tensors


def _planted(**fns):
    """Replaces module-level functions of moe_reference_lfm2 (the vectorised pass) for the duration."""
    return planted(lf, **fns)


# ----------------------------------------------------------------------------------------------------
# one-layer checkpoints by hand
# ----------------------------------------------------------------------------------------------------

def _hand_base(**kw):
    c = dict(model_type="lfm2_moe", hidden_size=2, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
             vocab_size=3, intermediate_size=2, moe_intermediate_size=1, num_experts=4, num_experts_per_tok=2,
             num_dense_layers=1, norm_eps=0.0, conv_L_cache=3, conv_bias=False, use_expert_bias=True,
             norm_topk_prob=True, routed_scaling_factor=1.0, tie_word_embeddings=False, layer_types=["conv"])
    c.update(kw)
    return c


def conv_by_hand(t, work):
    """H = 2, one conv layer, conv_bias, L = 3, norm_eps 0, ids [0 1 2] with rows [1 1], [1 -1], [2 2], normed
    and times operator_norm [2 1]: x = [2 1], [2 -1], [2 1]. in_proj (rows B, C, x'): B = x; C = 0 x + [1 2] (its
    bias); x' = [x1, x0] + [1 0]; so B = [2 1], [2 -1], [2 1]; x' = [2 2], [0 2], [2 2]; B * x' = [4 2], [0 -2],
    [4 2]. conv.weight: channel 0 [1 2 3] (3 on the current token), channel 1 [1 0 1]; conv.bias [.5 0]:
    channel 0: 3*4 + .5 = 12.5, 2*4 + 3*0 + .5 = 8.5, 1*4 + 2*0 + 3*4 + .5 = 16.5; channel 1: 2, -2, 2 + 2 = 4.
    y = C * conv = [12.5 4], [8.5 -4], [16.5 8]; out_proj = I + [0 .25]: [12.5 4.25], [8.5 -3.75], [16.5 8.25];
    h = row + out = [13.5 5.25], [9.5 -4.75], [18.5 10.25] (the dense MLP's w2 is zero). embedding_norm [1 1],
    eps 0; lm_head rows [1 0], [0 1], [1 1]. (B and x' commute in B * x': of the chunk orders only C's place is
    observable; C, B, x and B, x, C both change the answer.)"""
    cfg = _hand_base(conv_bias=True)
    T = {"model.embed_tokens.weight": [[1, 1], [1, -1], [2, 2]], "model.embedding_norm.weight": [1, 1],
         "lm_head.weight": [[1, 0], [0, 1], [1, 1]],
         "model.layers.0.operator_norm.weight": [2, 1], "model.layers.0.ffn_norm.weight": [1, 1],
         "model.layers.0.conv.in_proj.weight": [[1, 0], [0, 1], [0, 0], [0, 0], [0, 1], [1, 0]],
         "model.layers.0.conv.in_proj.bias": [0, 0, 1, 2, 1, 0],
         "model.layers.0.conv.conv.weight": [[[1, 2, 3]], [[1, 0, 1]]], "model.layers.0.conv.conv.bias": [0.5, 0],
         "model.layers.0.conv.out_proj.weight": [[1, 0], [0, 1]], "model.layers.0.conv.out_proj.bias": [0, 0.25],
         "model.layers.0.feed_forward.w1.weight": [[1, 0], [0, 1]],
         "model.layers.0.feed_forward.w3.weight": [[1, 0], [0, 1]],
         "model.layers.0.feed_forward.w2.weight": [[0, 0], [0, 0]]}
    T = {k: np.array(v, dtype=np.float32) for k, v in T.items()}
    m, _ = _write(work, "lfm2_hand_conv", cfg, T)
    m.check_layout()
    h = [[13.5, 5.25], [9.5, -4.75], [18.5, 10.25]]
    want = []
    for a, b in h:
        r = math.sqrt((a * a + b * b) / 2)
        want.append([a / r, b / r, (a + b) / r])
    ids = [0, 1, 2]
    got, nai = m.forward(ids), m.forward(ids, naive=True)
    t.close(got, want, "lfm2 conv layer by hand (vectorised)", rtol=1e-6, atol=1e-6)
    t.close(nai, want, "lfm2 conv layer by hand (token by token)", rtol=1e-6, atol=1e-6)
    # Planted bugs against the hand answer.
    ones_b = lambda mm, bcx: (np.ones_like(bcx[:, :2]), bcx[:, 2:4], bcx[:, 4:])  # noqa: E731
    bugs = {
        "conv without the B gate (B * x -> x)": dict(split_in_proj=ones_b),
        "chunks C, B, x": dict(split_in_proj=lambda mm, bcx: (bcx[:, 2:4], bcx[:, :2], bcx[:, 4:])),
        "chunks B, x, C": dict(split_in_proj=lambda mm, bcx: (bcx[:, :2], bcx[:, 4:], bcx[:, 2:4])),
        "conv output cut to the last S": dict(
            conv1d_padded=lambda x, w, b=None: _conv_last(x, w, b)),
        "no embedding_norm": dict(final_norm=lambda mm, hh: hh),
    }
    for what, fns in bugs.items():
        with _planted(**fns):
            bad = m.forward(ids)
        t.check(_rel(bad, want) > 1e-3, f"planted bug not caught by the conv hand answer: {what}")
    return m


def _conv_last(x, w, b):
    """A planted bug: the conv's last S outputs (reads the future) instead of the first S."""
    s = x.shape[0]
    k = w.shape[-1]
    full = _CONV(np.concatenate([x, np.zeros((k - 1, x.shape[1]), dtype=np.float32)]), w, b)
    return full[k - 1:k - 1 + s]


def moe_by_hand(t, work):
    """H = 2, one conv layer whose out_proj is zero (adds nothing), the MoE layer (num_dense_layers 0), 4 experts
    top-2 of width 1, norm_eps 0, ids [0 1] with rows [1 1], [1 -1] (normed the same; ffn_norm [1 1]).
    gate rows [1 1], [.5 .5], [0 0], [-.5 -.5]: logits [2 1 0 -1] and [0 0 0 0]; expert_bias [0 0 .3 0].
    Token 0: sigmoid [s2, s1, .5, s-1] + bias -> [.881 .731 .8 .269]: experts 0, 2 (without the bias 0, 1); weights
    [s2, .5] / (s2 + .5 + 1e-6). Token 1: [.5 .5 .8 .5]: experts 2 then 0 (the tie 0 / 1 / 3 to the lower index),
    weights .5 / (1 + 1e-6) each. Expert e: w1 [1 0] (g = x0 = 1), w3 [0 1] (u = x1), w2 column c_e: out =
    silu(1) x1 c_e with c = [1 0], [0 1], [1 1], [2 -1]. lm_head = I; embedding_norm [1 1]."""
    c_e = [[1, 0], [0, 1], [1, 1], [2, -1]]
    cfg = _hand_base(num_dense_layers=0, vocab_size=2)
    T = {"model.embed_tokens.weight": [[1, 1], [1, -1]], "model.embedding_norm.weight": [1, 1],
         "lm_head.weight": [[1, 0], [0, 1]],
         "model.layers.0.operator_norm.weight": [1, 1], "model.layers.0.ffn_norm.weight": [1, 1],
         "model.layers.0.conv.in_proj.weight": [[1, 0], [0, 1]] * 3,
         "model.layers.0.conv.conv.weight": [[[1, 1, 1]], [[1, 1, 1]]],
         "model.layers.0.conv.out_proj.weight": [[0, 0], [0, 0]],
         "model.layers.0.feed_forward.gate.weight": [[1, 1], [0.5, 0.5], [0, 0], [-0.5, -0.5]],
         "model.layers.0.feed_forward.expert_bias": [0, 0, 0.3, 0]}
    for e in range(4):
        T[f"model.layers.0.feed_forward.experts.{e}.w1.weight"] = [[1, 0]]
        T[f"model.layers.0.feed_forward.experts.{e}.w3.weight"] = [[0, 1]]
        T[f"model.layers.0.feed_forward.experts.{e}.w2.weight"] = [[c_e[e][0]], [c_e[e][1]]]
    T = {k: np.array(v, dtype=np.float32) for k, v in T.items()}
    m, _ = _write(work, "lfm2_hand_moe", cfg, T)
    m.check_layout()
    t.check(m.ckpt.dtype("model.layers.0.feed_forward.expert_bias") == "F32", "expert_bias stored F32")

    def want_rows(experts, sigs, scale=1.0, eps=1e-6):
        rows = []
        for x, (ea, eb), (sa, sb) in zip([[1, 1], [1, -1]], experts, sigs):
            tot = sa + sb + eps
            moe = [_silu(1.0) * x[1] * (sa / tot * c_e[ea][j] + sb / tot * c_e[eb][j]) * scale for j in range(2)]
            h = [x[j] + moe[j] for j in range(2)]
            r = math.sqrt((h[0] ** 2 + h[1] ** 2) / 2)
            rows.append([h[0] / r, h[1] / r])
        return rows
    ids = [0, 1]
    biased = ([(0, 2), (2, 0)], [(_sig(2), 0.5), (0.5, 0.5)])
    want = want_rows(*biased)
    for name, got in (("vectorised", m.forward(ids)), ("token by token", m.forward(ids, naive=True))):
        t.close(got, want, f"lfm2 MoE layer by hand ({name}): the bias chooses, the sigmoid weighs", rtol=1e-6,
                atol=1e-6)
    unbiased = ([(0, 1), (0, 1)], [(_sig(2), _sig(1)), (0.5, 0.5)])
    t.check(_rel(want_rows(*unbiased), want) > 1e-2, "the hand MoE: the bias changes the answer")
    # The bias in the weights, a softmax router, no 1e-6 (visible at the next model), no routed_scaling_factor.
    bugs = {
        "router weights from the biased scores": dict(select_experts_lfm2=_biased_weights),
        "softmax router instead of sigmoid": dict(sigmoid=lambda z: ref.softmax(z, axis=-1)),
    }
    for what, fns in bugs.items():
        with _planted(**fns):
            bad = m.forward(ids)
        t.check(_rel(bad, want) > 1e-3, f"planted bug not caught by the MoE hand answer: {what}")
    # routed_scaling_factor 2.5 multiplies the expert sum.
    m25, _ = _write(work, "lfm2_hand_moe_scale", dict(cfg, routed_scaling_factor=2.5), T)
    want25 = want_rows(*biased, scale=2.5)
    t.close(m25.forward(ids), want25, "lfm2 MoE by hand: routed_scaling_factor 2.5", rtol=1e-6, atol=1e-6)
    t.close(m25.forward(ids, naive=True), want25, "lfm2 MoE by hand: routed_scaling_factor 2.5 (token by token)",
            rtol=1e-6, atol=1e-6)
    # The 1e-6 matters when the sigmoids are ~1e-6: gate rows [-7 -7], [-7.25 -7.25], [-8 -8], [-9 -9] and no bias:
    # token 0's logits -14, -14.5, -16, -18: experts 0, 1 with s = 8.3e-7, 5.0e-7: weights s / (1.3e-6 + 1e-6)
    # (.36, .22), not s / 1.3e-6 (.62, .38). Token 1 (logits 0): all .5, experts 0, 1, weights .5 / (1 + 1e-6).
    Te = dict(T)
    Te["model.layers.0.feed_forward.gate.weight"] = np.array([[-7, -7], [-7.25, -7.25], [-8, -8], [-9, -9]],
                                                             dtype=np.float32)
    Te["model.layers.0.feed_forward.expert_bias"] = np.zeros(4, dtype=np.float32)
    me, _ = _write(work, "lfm2_hand_moe_eps", cfg, Te)
    tiny = ([(0, 1), (0, 1)], [(_sig(-14), _sig(-14.5)), (0.5, 0.5)])
    want_e = want_rows(*tiny)
    for name, got in (("vectorised", me.forward(ids)), ("token by token", me.forward(ids, naive=True))):
        t.close(got, want_e, f"lfm2 MoE by hand ({name}): sigmoids ~1e-6, the 1e-6 in the sum", rtol=1e-5, atol=1e-6)
    t.check(_rel(want_rows(*tiny, eps=0.0), want_e) > 1e-2, "the hand MoE: the 1e-6 changes the answer")
    no_eps = lambda s, b, k, n, r: ref.select_experts_lfm2(s, b, k, n, r, eps=0.0)  # noqa: E731
    with _planted(select_experts_lfm2=no_eps):
        bad = me.forward(ids)
    t.check(_rel(bad, want_e) > 1e-3, "planted bug not caught by the MoE hand answer: no 1e-6 in the normalisation")


def _biased_weights(scores, bias, top_k, norm_topk, routed_scale):
    """A planted bug: the weights are the biased scores."""
    idx, _ = ref.select_experts_lfm2(scores, bias, top_k, norm_topk, routed_scale)
    choice = scores if bias is None else scores + bias[None, :]
    w = np.take_along_axis(choice, idx, axis=-1)
    if norm_topk:
        w = w / (w.sum(axis=-1, keepdims=True) + np.float32(1e-6))
    return idx, (w * np.float32(routed_scale)).astype(np.float32)


def hand_attention(T, c, ids):
    """The one-layer attention model's logits in float64 from the formulas: RMSNorm; q, k, v; per head q and k
    normed over head_dim (eps norm_eps, times q_layernorm / k_layernorm) BEFORE the rotation of (d, d + D/2) by
    pos * theta^(-2d/D); scores / sqrt(D); causal softmax; query head h reads kv head h // (heads / kv); out_proj;
    the dense SwiGLU; embedding_norm; lm_head."""
    f64 = lambda n: np.asarray(T[n], dtype=np.float64)  # noqa: E731
    nh, nkv, D, eps, theta = (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["norm_eps"],
                              float(c["rope_theta"]))

    def rms(v, w):
        return v / math.sqrt(float(np.mean(v * v)) + eps) * w

    def rot(v, pos):
        out = v.copy()
        for d in range(D // 2):
            ang = pos * theta ** (-2.0 * d / D)
            out[d] = v[d] * math.cos(ang) - v[d + D // 2] * math.sin(ang)
            out[d + D // 2] = v[d + D // 2] * math.cos(ang) + v[d] * math.sin(ang)
        return out
    p = "model.layers.0."
    a = p + "self_attn."
    hs = [f64("model.embed_tokens.weight")[tok] for tok in ids]
    xs = [rms(h, f64(p + "operator_norm.weight")) for h in hs]
    qs = [f64(a + "q_proj.weight") @ x for x in xs]
    ks = [f64(a + "k_proj.weight") @ x for x in xs]
    vs = [f64(a + "v_proj.weight") @ x for x in xs]
    qn, kn = f64(a + "q_layernorm.weight"), f64(a + "k_layernorm.weight")
    rows = []
    for t_ in range(len(ids)):
        heads = []
        for hh in range(nh):
            j = hh // (nh // nkv)
            q = rot(rms(qs[t_][hh * D:(hh + 1) * D], qn), t_)
            sc = [float(q @ rot(rms(ks[u][j * D:(j + 1) * D], kn), u)) / math.sqrt(D) for u in range(t_ + 1)]
            e = [math.exp(s - max(sc)) for s in sc]
            heads.append(sum(e[u] / sum(e) * vs[u][j * D:(j + 1) * D] for u in range(t_ + 1)))
        h = hs[t_] + f64(a + "out_proj.weight") @ np.concatenate(heads)
        x = rms(h, f64(p + "ffn_norm.weight"))
        g, u = f64(p + "feed_forward.w1.weight") @ x, f64(p + "feed_forward.w3.weight") @ x
        h = h + f64(p + "feed_forward.w2.weight") @ (g / (1 + np.exp(-g)) * u)
        rows.append(f64("lm_head.weight") @ rms(h, f64("model.embedding_norm.weight")))
    return np.stack(rows)


def attention_by_hand(t, work):
    """Hidden 8, one attention layer, heads 4 / kv 2 of head_dim 4 (from the config; hidden / heads = 2), theta 100,
    norm_eps 1e-5, random weights (the BF16-rounded values the checkpoint holds), 5 tokens: both passes against
    hand_attention; the planted no-RoPE and interleaved-RoPE bugs against it."""
    cfg = _hand_base(hidden_size=8, num_attention_heads=4, num_key_value_heads=2, head_dim=4, vocab_size=16,
                     intermediate_size=6, norm_eps=1e-5, rope_theta=100.0, layer_types=["full_attention"])
    m, _ = _write(work, "lfm2_hand_attn", cfg, rng=np.random.default_rng(2468))
    m.check_layout()
    T = {n: m.ckpt[n] for n in m.expected_names()}
    ids = [3, 11, 5, 3, 9]
    want = hand_attention(T, cfg, ids)
    for name, got in (("vectorised", m.forward(ids)), ("token by token", m.forward(ids, naive=True))):
        t.check(_rel(got, want) <= 1e-5, f"lfm2 attention layer by hand ({name}): rel err {_rel(got, want):.2e}")
    # The q/k norms come before the rotation: normed after it (with their weights on the rotated dims) differs.
    Tn = dict(T)
    for n in ("q_layernorm", "k_layernorm"):
        Tn[f"model.layers.0.self_attn.{n}.weight"] = np.array([1, 2, 0.5, 1.5], dtype=np.float32)
    mn, _ = _write(work, "lfm2_hand_attn_norms", cfg, Tn)
    wantn = hand_attention(Tn, cfg, ids)
    t.check(_rel(mn.forward(ids), wantn) <= 1e-5 and _rel(mn.forward(ids, naive=True), wantn) <= 1e-5,
            "lfm2 attention by hand with uneven q/k norm weights")
    bugs = {
        "no RoPE": dict(qk_rope=lambda q, k, cos, sin: (q, k)),
        "interleaved RoPE instead of rotate-half": dict(
            qk_rope=lambda q, k, cos, sin: (ref.apply_rope_interleaved(q, cos, sin),
                                            ref.apply_rope_interleaved(k, cos, sin))),
        "q/k norm weights after the rotation": dict(qk_rope=_norm_weight_after_rope),
    }
    for what, fns in bugs.items():
        with _planted(**fns):
            bad = mn.forward(ids)
        t.check(_rel(bad, wantn) > 1e-3, f"planted bug not caught by the attention hand answer: {what}")


def _norm_weight_after_rope(q, k, cos, sin):
    """A planted bug for the model with q/k norm weights [1 2 .5 1.5]: the weight multiplies the rotated vector
    (undo it before, redo it after the rotation)."""
    w = np.array([1, 2, 0.5, 1.5], dtype=np.float32)
    return (ref.apply_rope(q / w, cos, sin) * w).astype(np.float32), (ref.apply_rope(k / w, cos, sin) * w).astype(
        np.float32)


# ----------------------------------------------------------------------------------------------------
# random checkpoints
# ----------------------------------------------------------------------------------------------------

def model_configs():
    return [
        ("lfm2_moe/8B-A1B shrunk (c c a c c a, 2 dense, 8 experts top-3, expert_bias, tie_embedding, L 3)",
         small_config()),
        ("lfm2_moe/full_attn_idxs+conv_bias+L 4+head_dim 16+MQA+untied+no expert_bias+no norm+scale 2.5+0 dense",
         small_config(layer_types=None, full_attn_idxs=[1, 3], num_hidden_layers=4, conv_bias=True, conv_L_cache=4,
                      head_dim=16, num_key_value_heads=1, tie_embedding=False, use_expert_bias=False,
                      norm_topk_prob=False, routed_scaling_factor=2.5, num_dense_layers=0, rope_theta=None,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e4})),
        ("lfm2_moe/attention first+MHA+top-1+L 2+scale .5+tie_word_embeddings+1 dense",
         small_config(layer_types=["full_attention", "conv", "conv"], num_hidden_layers=3, num_key_value_heads=4,
                      num_experts_per_tok=1, conv_L_cache=2, routed_scaling_factor=0.5, tie_embedding=None,
                      tie_word_embeddings=True, num_dense_layers=1, norm_eps=1e-6)),
        ("lfm2_moe/all conv (full_attn_idxs [])+L 1+conv_bias+all dense",
         small_config(layer_types=None, full_attn_idxs=[], num_hidden_layers=2, conv_L_cache=1, conv_bias=True,
                      num_dense_layers=5)),
    ]


def lfm2_model_tests(t, work):
    log("lfm2_moe model checks on self-written HF-layout checkpoints")
    rng = np.random.default_rng(13579)
    ids = [int(v) for v in rng.integers(0, VOCAB, size=SEQ)]
    first = None
    for n, (label, cfg) in enumerate(model_configs()):
        t0 = time.time()
        m, tensors = _write(work, f"lfm2_{n}", cfg, rng=rng)
        try:
            m.check_layout()
            t.check(True, "layout")
        except ValueError as e:
            t.check(False, f"{label}: {e}")
        full = m.forward(ids)
        scale = float(np.max(np.abs(full)))
        t.check(full.shape == (SEQ, VOCAB) and full.dtype == np.float32 and bool(np.all(np.isfinite(full))),
                f"{label}: logits shape/dtype/finite")
        unused = [x for x in m.ckpt.unused() if ".experts." not in x]
        t.check(not unused, f"{label}: tensors never read: {unused[:6]}")
        naive = m.forward(ids, naive=True)
        err = _rel(naive, full)
        t.check(err <= 1e-5, f"{label}: vectorised vs token-by-token rel err {err:.2e}")
        perr = _rel(m.forward(ids[:9]), full[:9])
        t.check(perr <= 1e-5, f"{label}: prefix logits differ from the first rows by {perr:.2e}")
        alt = ids[:-1] + [(ids[-1] + 1) % VOCAB]
        aerr = _rel(m.forward(alt)[:-1], full[:-1])
        t.check(aerr <= 1e-5, f"{label}: changing the last token changed earlier rows by {aerr:.2e}")
        _write(work, f"lfm2_{n}__sharded", cfg, tensors, shards=3)
        t.check(np.array_equal(ref.Model(os.path.join(work, f"lfm2_{n}__sharded")).forward(ids), full),
                f"{label}: sharded logits differ")
        emb = m.ckpt["model.embed_tokens.weight"]
        t.check(np.all((emb.view(np.uint32) & 0xFFFF) == 0), f"{label}: upcast bf16 has nonzero low bits")
        moe_layers = [i for i in range(m.n_layers) if m.is_moe_layer(i)]
        if m.use_expert_bias and moe_layers:
            for i in moe_layers:
                name = f"model.layers.{i}.{lf.EXPERT_BIAS}"
                t.check(m.ckpt.dtype(name) == "F32" and m.ckpt.shape(name) == [m.n_experts], f"{label}: {name} F32 [E]")
            m0 = ref.Model(m.ckpt.dir)
            m5 = ref.Model(m.ckpt.dir)
            for i in moe_layers:
                name = f"model.layers.{i}.{lf.EXPERT_BIAS}"
                m0.ckpt._cache[name] = np.zeros(m.n_experts, dtype=np.float32)
                m5.ckpt._cache[name] = (m.ckpt[name] + np.float32(0.5)).astype(np.float32)
            diff = _rel(m0.forward(ids), full)
            t.check(diff > 1e-3, f"{label}: zeroing expert_bias moves the logits by only {diff:.2e}")
            d5, d5n = _rel(m5.forward(ids), full), _rel(m5.forward(ids, naive=True), naive)
            t.check(d5 <= 1e-6 and d5n <= 1e-6, f"{label}: expert_bias + .5 everywhere moved the logits by {d5:.2e} / "
                                                f"{d5n:.2e} (the bias must only choose)")
        if "full_attention" not in m.layer_types and m.conv_L == 1:
            # Each row is a function of its own token alone.
            solo = np.stack([m.forward([tok])[0] for tok in ids])
            t.check(_rel(solo, full) <= 1e-6, f"{label}: L 1 without attention: rows depend on other tokens")
        else:
            t.check(_rel(m.forward([ids[1]] + ids[1:])[-1], full[-1]) > 1e-6,
                    f"{label}: the last row ignores the first token")
        log(f"  {label[:100]:<100} max|logit| {scale:7.3f}  naive rel {err:.1e}  ({time.time() - t0:.1f}s)")
        if first is None:
            first = (m, ids, naive)
    planted_bug_tests(t, *first)


def planted_bug_tests(t, m, ids, naive):
    """The vectorised pass with one bug planted at a time must disagree with the token-by-token pass (> 1e-3)."""
    H = m.hidden
    bugs = {
        "router weights from the biased scores": dict(select_experts_lfm2=_biased_weights),
        "softmax router instead of sigmoid": dict(sigmoid=lambda z: ref.softmax(z, axis=-1)),
        "conv without the B gate": dict(split_in_proj=lambda mm, bcx: (np.ones_like(bcx[:, :H]), bcx[:, H:2 * H],
                                                                        bcx[:, 2 * H:])),
        "chunks C, B, x": dict(split_in_proj=lambda mm, bcx: (bcx[:, H:2 * H], bcx[:, :H], bcx[:, 2 * H:])),
        "chunks B, x, C": dict(split_in_proj=lambda mm, bcx: (bcx[:, :H], bcx[:, 2 * H:], bcx[:, H:2 * H])),
        "conv output cut to the last S": dict(conv1d_padded=lambda x, w, b=None: _conv_last(x, w, b)),
        "conv kernel reversed": dict(conv1d_padded=lambda x, w, b=None: _conv_flipped(x, w, b)),
        "no RoPE": dict(qk_rope=lambda q, k, cos, sin: (q, k)),
        "interleaved RoPE": dict(qk_rope=lambda q, k, cos, sin: (ref.apply_rope_interleaved(q, cos, sin),
                                                                 ref.apply_rope_interleaved(k, cos, sin))),
        "no embedding_norm": dict(final_norm=lambda mm, hh: hh),
        "experts' w1 and w3 swapped": dict(swiglu=_swiglu_swapped),
    }
    caught = []
    for what, fns in bugs.items():
        with _planted(**fns):
            d = _rel(m.forward(ids), naive)
        t.check(d > 1e-3, f"planted bug not caught by vectorised vs token by token: {what} ({d:.1e})")
        caught.append(f"{what} {d:.1e}")
    log("  planted bugs (vectorised vs token by token): " + "; ".join(caught))


def _conv_flipped(x, w, b):
    """A planted bug: the kernel's taps in the other order (w[:, 0, 0] on the current token)."""
    return _CONV(x, w[:, :, ::-1], b)


def _swiglu_swapped(W, prefix, x):
    """A planted bug: silu on w3 instead of w1."""
    return ref.linear(ref.silu(ref.linear(x, W[prefix + "w3.weight"])) * ref.linear(x, W[prefix + "w1.weight"]),
                      W[prefix + "w2.weight"])


def lfm2_tests(t, work, archs=lf.TYPES):
    if not any(a in archs for a in lf.TYPES):
        return
    lfm2_config_tests(t, work)
    log("lfm2_moe one-layer checkpoints by hand")
    conv_by_hand(t, work)
    moe_by_hand(t, work)
    attention_by_hand(t, work)
    lfm2_model_tests(t, work)


def main(argv=None):
    return run_part_alone("lfm2_moe", known_answer_tests_lfm2, lfm2_tests, argv)


if __name__ == "__main__":
    sys.exit(main())
