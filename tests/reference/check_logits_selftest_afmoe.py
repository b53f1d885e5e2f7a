#!/usr/bin/python3
"""The afmoe part of the reference self-test (check_logits.py --self-test; also runnable on its own:
/usr/bin/python3 tests/reference/check_logits_selftest_afmoe.py [--keep]).

Known answers: the router (a bias that changes the choice but not the weights, the 1e-20 in the normalisation,
route_scale after it, top-1 = route_scale, ties), the sliding window of the attention (query t sees key u iff
0 <= t - u < W), the sigmoid output gate, the mup factor, the layer kinds built from global_attn_every_n_layers.
Checkpoints by hand: a three-layer dense model (sliding, full, sliding; window 3 over 7 tokens, mup, uneven norm
weights) written out in float64 from the formulas (the four norms, q/k norms, RoPE on the sliding layers only, no
positional embedding on the full one, the window, the sigmoid gate); a one-layer MoE in small exact numbers (the bias
chooses expert 2 over expert 1, the weights stay the unbiased sigmoids, route_scale on the routed experts only, the
shared expert ungated, post_mlp_layernorm, mup); one-layer window and NoPE structure checks (which rows a changed
token moves; the last row of a full layer invariant under a permutation of the earlier tokens). Config parsing: the
Trinity-Mini and Trinity-Nano configs (reconstructed), AfmoeConfig's defaults, rope_theta's sources, the extra keys
accepted at their hard-wired values and refused otherwise, and the other refusals. Small random checkpoints in the
released layout (per-expert gate/up/down_proj, expert_bias F32): vectorised == token by token, causality, sharding,
the expert bias (zeroed moves the logits, shifted by a constant does not). Planted bugs (the vectorised pass patched)
must be caught: RoPE on the full layers, no RoPE, no post norms, the gate without its sigmoid, the window off by one
either way, no window, the bias in the weights, mup ignored, no shared experts, route_scale ignored or applied to the
shared experts too, a softmax router.
"""

import copy
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_reference as ref  # noqa: E402
import moe_reference_afmoe as af  # noqa: E402
from check_logits_compare import config_only_model, log  # noqa: E402
from selftest_util import rel as _rel, sig as _sig, silu as _silu, planted, run_part_alone  # noqa: E402

VOCAB = 120
SEQ = 32
_ATTEND = af.attend            # the unpatched functions, for the planted bugs that wrap them
_SELECT = ref.select_experts_afmoe
_SWIGLU = af.swiglu

# arcee-ai/Trinity-Mini's config.json, reconstructed (not downloaded): a parsing test of the keys, not a statement
# about the published file. The values are those quoted by third-party code that loads it (a Neuron port's unit test,
# an MLX port's test): hidden 2048, 32 layers (sliding x 3 + full, repeated), 2 dense, 128 experts top-8 of width
# 1024, one shared expert, route_scale 2.826, 32 heads / 4 kv of head_dim 128, window 2048, mup_enabled, the
# TorchTitan-style router keys. transformers_version from memory.
TRINITY_MINI = {
    "architectures": ["AfmoeForCausalLM"], "model_type": "afmoe", "attention_dropout": 0.0, "dtype": "bfloat16",
    "global_attn_every_n_layers": 4, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 6144,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"] * 8,
    "max_position_embeddings": 131072, "moe_intermediate_size": 1024, "mup_enabled": True, "n_group": 1,
    "num_attention_heads": 32, "num_dense_layers": 2, "num_expert_groups": 1, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 32, "num_key_value_heads": 4, "num_limited_groups": 1,
    "num_shared_experts": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000, "route_norm": True,
    "route_scale": 2.826, "score_func": "sigmoid", "sliding_window": 2048, "tie_word_embeddings": False,
    "topk_group": 1, "transformers_version": "4.57.3", "use_cache": True, "use_grouped_mm": True,
    "vocab_size": 200192,
}
# arcee-ai/Trinity-Nano's, likewise (hidden 1024, 56 layers, 8 heads / 2 kv, experts of width 256); written here
# without layer_types so that the default (full iff (i + 1) % 4 == 0) builds them.
TRINITY_NANO = dict(copy.deepcopy(TRINITY_MINI), hidden_size=1024, intermediate_size=3072, moe_intermediate_size=256,
                    num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=56)
del TRINITY_NANO["layer_types"]


def small_config(**kw):
    """Trinity-Mini shrunk: hidden 32, 8 layers (s s s f s s s f), heads 4 / kv 2 of head_dim 16 (not hidden / heads
    = 8), dense width 48, 8 experts top-3 of width 8, one shared expert, the first two layers dense, window 5,
    route_scale 2.826, mup. A key set to None is removed."""
    c = copy.deepcopy(TRINITY_MINI)
    c.update(hidden_size=32, num_hidden_layers=8, layer_types=TRINITY_MINI["layer_types"][:8], num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, intermediate_size=48, moe_intermediate_size=8, num_experts=8,
             num_experts_per_tok=3, sliding_window=5, vocab_size=VOCAB, rope_theta=1000.0)
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def _config_model(work, name, cfg):
    return config_only_model(work, "afmoe_cfg_" + name, cfg)


# ----------------------------------------------------------------------------------------------------
# known answers of the helpers
# ----------------------------------------------------------------------------------------------------

def known_answer_tests_afmoe(t):
    sel = ref.select_experts_afmoe
    # Scores [.9 .8 .7 .1] + bias [0 0 .3 0] = [.9 .8 1.0 .1]: top-2 = experts 2 then 0 (not 1); the weights are the
    # UNBIASED scores .7, .9 over 1.6 (+ 1e-20); route_scale 2.826 multiplies after the division.
    sc = np.array([[0.9, 0.8, 0.7, 0.1]], dtype=np.float32)
    bias = np.array([0.0, 0.0, 0.3, 0.0], dtype=np.float32)
    idx, w = sel(sc, bias, 2, 1.0)
    t.check(idx.tolist() == [[2, 0]], f"afmoe router: the bias chooses experts [2, 0] (got {idx.tolist()})")
    t.close(w, [[0.7 / 1.6, 0.9 / 1.6]], "afmoe router: unbiased scores / their sum")
    t.close(sel(sc, bias, 2, 2.826)[1], [[0.7 / 1.6 * 2.826, 0.9 / 1.6 * 2.826]],
            "afmoe router: route_scale after the normalisation")
    # A bias added to every expert changes nothing (the weights never see it); a large negative one on the best
    # expert removes it from the choice.
    idx5, w5 = sel(sc, bias + np.float32(5.0), 2, 1.0)
    t.check(idx5.tolist() == [[2, 0]] and np.array_equal(w5, sel(sc, bias, 2, 1.0)[1]),
            "afmoe router: a uniform +5 on the bias changes neither the choice nor the weights")
    idx, w = sel(sc, np.array([-1.0, 0, 0, 0], dtype=np.float32), 2, 1.0)
    t.check(idx.tolist() == [[1, 2]], f"afmoe router: a bias of -1 drops the best expert (got {idx.tolist()})")
    t.close(w, [[0.8 / 1.5, 0.7 / 1.5]], "afmoe router: weights of experts 1, 2")
    # The 1e-20 is negligible (unlike LFM2's 1e-6): scores 1e-6, 1e-6 give 1/2 each; top-1 gives route_scale exactly.
    tiny = np.array([[1e-6, 0.0, 1e-6, 0.0]], dtype=np.float32)
    idx, w = sel(tiny, np.zeros(4, dtype=np.float32), 2, 1.0)
    t.check(idx.tolist() == [[0, 2]], f"afmoe router: tiny scores choose experts 0, 2 (got {idx.tolist()})")
    t.close(w, [[0.5, 0.5]], "afmoe router: 1e-6 / (2e-6 + 1e-20) = 1/2", rtol=1e-6)
    t.close(sel(np.array([[0.25, 0.5]], dtype=np.float32), np.zeros(2, dtype=np.float32), 1, 2.826)[1], [[2.826]],
            "afmoe router: top-1 weight = route_scale (always normalised)", rtol=1e-7, atol=0)
    # Ties (equal biased scores) go to the lower index.
    idx, _ = sel(np.array([[0.5, 0.5, 0.5]], dtype=np.float32), np.array([0, 0.1, 0.1], dtype=np.float32), 2, 1.0)
    t.check(idx.tolist() == [[1, 2]], f"afmoe router: ties go to the lower index (got {idx.tolist()})")

    # The window: one head, q = 0 (uniform weights over the visible keys), v_u = u: the output at t is the mean of
    # the visible positions. W = 3: t = 5 sees 3, 4, 5 (mean 4); t = 1 sees 0, 1 (.5). A key is visible iff
    # t - u < W (masking_utils: kv_idx > q_idx - sliding_window); <= would give 3.5 at t = 5.
    s = 7
    q = np.zeros((1, s, 2), dtype=np.float32)
    k = np.ones((1, s, 2), dtype=np.float32)
    v = np.repeat(np.arange(s, dtype=np.float32)[None, :, None], 2, axis=2)
    out = af.attend(q, k, v, 1.0, 3)[:, 0]
    t.close(out, [0, 0.5, 1, 2, 3, 4, 5], "afmoe window 3: query t averages keys t-2 .. t")
    t.close(af.attend(q, k, v, 1.0, 1)[:, 0], list(range(s)), "afmoe window 1: each query sees itself only")
    t.close(af.attend(q, k, v, 1.0, None)[:, 0], [u / 2 for u in range(s)], "afmoe full layer: causal, no window")
    t.close(af.attend(q, k, v, 1.0, 100)[:, 0], [u / 2 for u in range(s)], "afmoe window >= S = full causal")

    # The output gate: o * sigmoid(g), elementwise.
    o = np.array([[2.0, -4.0, 1.0]], dtype=np.float32)
    g = np.array([[0.0, math.log(3.0), -40.0]], dtype=np.float32)
    t.close(af.output_gate(o, g), [[1.0, -3.0, 1.0 * _sig(-40.0)]], "afmoe output gate: o * sigmoid(g)", atol=1e-20)

    # mup: sqrt(hidden) iff mup_enabled; the layer kinds and which get RoPE / a window.
    class M:
        hidden, mup = 64, True
        layer_types = ["sliding_attention", "full_attention"]
        window = 9
    t.check(af.embed_scale(M) == 8.0, "afmoe mup: embeddings x sqrt(64) = 8")
    M.mup = False
    t.check(af.embed_scale(M) == 1.0, "afmoe mup off: x 1")
    t.check([af.uses_rope(M, i) for i in range(2)] == [True, False]
            and [af.layer_window(M, i) for i in range(2)] == [9, None],
            "afmoe: RoPE and the window on sliding_attention only, neither on full_attention")


# ----------------------------------------------------------------------------------------------------
# config parsing
# ----------------------------------------------------------------------------------------------------

def afmoe_config_tests(t, work):
    log("afmoe config checks")
    m = _config_model(work, "mini", TRINITY_MINI)
    full = [i for i, k in enumerate(m.layer_types) if k == "full_attention"]
    t.check(full == list(range(3, 32, 4)), f"Trinity-Mini: full attention layers {full}")
    got = (m.hidden, m.n_layers, m.n_heads, m.n_kv, m.head_dim, m.vocab, m.eps, m.tie, m.n_experts, m.top_k, m.inter,
           m.moe_inter, m.n_dense, m.n_shared, m.route_scale, m.mup, m.window, m.theta, m.scale)
    want = (2048, 32, 32, 4, 128, 200192, 1e-5, False, 128, 8, 6144, 1024, 2, 1, 2.826, True, 2048, 1e4,
            128 ** -0.5)
    t.check(got == want, f"Trinity-Mini config values: {got}")
    t.check(np.array_equal(m.inv_freq, ref.rope_inv_freq(128, 1e4)), "Trinity-Mini: inv_freq over head_dim 128, 1e4")
    t.check([m.is_moe_layer(i) for i in range(4)] == [False, False, True, True], "num_dense_layers 2: 0, 1 dense")
    shapes = af.expected_shapes(m)
    t.check(shapes["model.layers.0.self_attn.q_proj.weight"] == (4096, 2048)
            and shapes["model.layers.0.self_attn.k_proj.weight"] == (512, 2048)
            and shapes["model.layers.0.self_attn.v_proj.weight"] == (512, 2048)
            and shapes["model.layers.0.self_attn.gate_proj.weight"] == (4096, 2048)
            and shapes["model.layers.0.self_attn.o_proj.weight"] == (2048, 4096)
            and shapes["model.layers.0.self_attn.q_norm.weight"] == (128,)
            and shapes["model.layers.0.mlp.gate_proj.weight"] == (6144, 2048)
            and shapes["model.layers.1.mlp.down_proj.weight"] == (2048, 6144)
            and shapes["model.layers.2.mlp.router.gate.weight"] == (128, 2048)
            and shapes["model.layers.2.mlp.expert_bias"] == (128,)
            and shapes["model.layers.2.mlp.shared_experts.up_proj.weight"] == (1024, 2048)
            and shapes["model.layers.31.mlp.experts.127.gate_proj.weight"] == (1024, 2048)
            and shapes["model.layers.31.mlp.experts.127.down_proj.weight"] == (2048, 1024)
            and shapes["model.layers.31.post_mlp_layernorm.weight"] == (2048,)
            and shapes["lm_head.weight"] == (200192, 2048), "Trinity-Mini tensor shapes")
    n_want = 3 + 32 * (4 + 7) + 2 * 3 + 30 * (2 + 3 + 128 * 3)
    t.check(len(shapes) == n_want, f"Trinity-Mini: {len(shapes)} names (want {n_want}), untied")

    m = _config_model(work, "nano", TRINITY_NANO)
    full = [i for i, k in enumerate(m.layer_types) if k == "full_attention"]
    t.check(full == list(range(3, 56, 4)) and len(full) == 14, f"Trinity-Nano: no layer_types, full layers {full}")
    t.check((m.hidden, m.n_heads, m.n_kv, m.head_dim, m.moe_inter, m.n_layers) == (1024, 8, 2, 128, 256, 56)
            and af.expected_shapes(m)["model.layers.5.self_attn.q_proj.weight"] == (1024, 1024),
            "Trinity-Nano values and q_proj [8 x 128, 1024]")

    # AfmoeConfig defaults for every missing key.
    m = _config_model(work, "defaults", {"model_type": "afmoe"})
    got = (m.vocab, m.hidden, m.inter, m.moe_inter, m.n_layers, m.n_dense, m.n_heads, m.n_kv, m.head_dim, m.eps,
           m.tie, m.theta, m.n_experts, m.top_k, m.n_shared, m.route_scale, m.window, m.mup)
    t.check(got == (200192, 2048, 6144, 1408, 32, 1, 16, 16, 128, 1e-5, False, 1e4, 64, 6, 2, 1.0, 1024, False),
            f"AfmoeConfig defaults: {got}")
    full = [i for i, k in enumerate(m.layer_types) if k == "full_attention"]
    t.check(full == [3, 7, 11, 15, 19, 23, 27, 31], f"default layer_types: full at {full}")
    t.check(af.expected_shapes(m)["model.layers.1.mlp.shared_experts.gate_proj.weight"] == (2816, 2048),
            "default shared experts: width 1408 x 2")
    m = _config_model(work, "every3", small_config(layer_types=None, global_attn_every_n_layers=3))
    t.check(m.layer_types == ["sliding_attention", "sliding_attention", "full_attention"] * 2
            + ["sliding_attention", "sliding_attention"], f"global_attn_every_n_layers 3: {m.layer_types}")
    m = _config_model(work, "every1", small_config(layer_types=None, global_attn_every_n_layers=1, sliding_window=None))
    t.check(m.layer_types == ["full_attention"] * 8 and m.window is None,
            "global_attn_every_n_layers 1: every layer full, sliding_window not needed")
    m = _config_model(work, "nulls", dict(small_config(), num_key_value_heads=None, rms_norm_eps=None,
                                          route_scale=None, mup_enabled=None, head_dim=None))
    t.check((m.n_kv, m.eps, m.route_scale, m.mup, m.head_dim) == (4, 1e-5, 1.0, False, 128),
            f"null keys take the class defaults: {(m.n_kv, m.eps, m.route_scale, m.mup, m.head_dim)}")
    m = _config_model(work, "tied", small_config(tie_word_embeddings=True))
    t.check(m.tie and "lm_head.weight" not in m.expected_names(), "tie_word_embeddings true: no lm_head")

    # rope_theta: rope_parameters first, then rope_scaling's, then the top-level key, then 10000.
    m = _config_model(work, "rope_params", small_config(rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                                                        rope_theta=5e5))
    t.check(m.theta == 500.0, f"rope_parameters.rope_theta wins ({m.theta})")
    m = _config_model(work, "rope_scaling", small_config(rope_scaling={"rope_type": "default", "rope_theta": 700.0}))
    t.check(m.theta == 700.0, f"rope_scaling.rope_theta ({m.theta})")
    m = _config_model(work, "rope_top", small_config(rope_theta=5e5))
    t.check(m.theta == 5e5, "top-level rope_theta")
    m = _config_model(work, "rope_none", small_config(rope_theta=None))
    t.check(m.theta == 1e4, "rope_theta default 1e4")

    # The Trinity router keys at their hard-wired values (and null) are accepted.
    m = _config_model(work, "extra_null", small_config(route_norm=None, score_func=None, n_group=None, topk_group=None))
    t.check(m.top_k == 3, "extra router keys null: accepted")
    m = _config_model(work, "extra_float", small_config(n_group=1.0))
    t.check(m.top_k == 3, "n_group 1.0: accepted")

    bad = [
        ("route_norm", small_config(route_norm=False), ValueError, "route_norm"),
        ("score_func", small_config(score_func="softmax"), ValueError, "score_func"),
        ("n_group", small_config(n_group=2), ValueError, "n_group"),
        ("topk_group", small_config(topk_group=2), ValueError, "topk_group"),
        ("num_expert_groups", small_config(num_expert_groups=4), ValueError, "num_expert_groups"),
        ("num_limited_groups", small_config(num_limited_groups=2), ValueError, "num_limited_groups"),
        ("n_group_true", small_config(n_group=True), ValueError, "n_group"),
        ("kind_chunked", small_config(layer_types=["chunked_attention"] * 8), ValueError, "layer_types"),
        ("kind_attention", small_config(layer_types=["sliding_attention"] * 7 + ["attention"]), ValueError,
         "layer_types"),
        ("types_len", small_config(layer_types=["full_attention"] * 7), ValueError, "layer_types"),
        ("every0", small_config(layer_types=None, global_attn_every_n_layers=0), ValueError,
         "global_attn_every_n_layers"),
        ("window_null", small_config(sliding_window=None) | {"sliding_window": None}, ValueError, "sliding_window"),
        ("window_0", small_config(sliding_window=0), ValueError, "sliding_window"),
        ("act", small_config(hidden_act="gelu"), NotImplementedError, "'gelu'"),
        ("rope_yarn", small_config(rope_parameters={"rope_type": "yarn", "factor": 4.0}), NotImplementedError, "yarn"),
        ("rope_per_type", small_config(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e4},
                                                        "sliding_attention": {"rope_type": "default",
                                                                              "rope_theta": 1e4}}),
         ValueError, "rope_parameters"),
        ("kv", small_config(num_key_value_heads=3), ValueError, "num_key_value_heads"),
        ("k_gt_e", small_config(num_experts_per_tok=9), ValueError, "num_experts_per_tok"),
        ("head_dim_odd", small_config(head_dim=7), ValueError, "head_dim"),
        ("shared_0", small_config(num_shared_experts=0), ValueError, "num_shared_experts"),
        ("scale_str", small_config(route_scale="2"), ValueError, "route_scale"),
        ("mup_str", small_config(mup_enabled="yes"), ValueError, "mup_enabled"),
        ("attention_bias", small_config(attention_bias=True), ValueError, "attention_bias"),
    ]
    for name, cfg, exc, text in bad:
        try:
            _config_model(work, "bad_" + name, cfg)
            t.check(False, f"afmoe config {name}: no error")
        except exc as e:
            t.check(text in str(e), f"afmoe config {name}: error {e!r} lacks {text!r}")


# ----------------------------------------------------------------------------------------------------
# checkpoints
# ----------------------------------------------------------------------------------------------------

def synth(m, rng):
    """{name: float32 array} for every expected tensor of m (shapes from af.expected_shapes)."""
    out = {}
    for name, shape in af.expected_shapes(m).items():
        if name == "model.embed_tokens.weight":
            a = 0.25 * rng.standard_normal(shape)     # x sqrt(H) under mup: of the order of the sublayers' outputs
        elif name == "lm_head.weight":
            a = rng.standard_normal(shape) / math.sqrt(shape[1])
        elif name.endswith("norm.weight"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(af.EXPERT_BIAS):
            a = rng.uniform(-0.3, 0.3, shape)        # of the order of the sigmoid gaps: it changes the choice
        elif name.endswith(af.ROUTER_GATE):
            a = 3.0 * rng.standard_normal(shape) / math.sqrt(shape[1])
        else:
            a = rng.standard_normal(shape) / math.sqrt(shape[-1])
        out[name] = a.astype(np.float32)
    return out


def _dtypes(tensors):
    return {n: "F32" for n in tensors if n.endswith(af.EXPERT_BIAS)}


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
    """Replaces module-level functions of moe_reference_afmoe (the vectorised pass) for the duration."""
    return planted(af, **fns)


def _window_shift(d):
    """A planted bug: the sliding layers' window d keys wider (d = 1: t - u <= W) or narrower."""
    return lambda mm, i: (mm.window + d) if mm.layer_types[i] == "sliding_attention" else None


def _biased_weights(scores, bias, top_k, route_scale):
    """A planted bug: the weights are the biased scores."""
    idx, _ = _SELECT(scores, bias, top_k, route_scale)
    w = np.take_along_axis(scores + bias[None, :], idx, axis=-1)
    return idx, (w / w.sum(axis=-1, keepdims=True) * np.float32(route_scale)).astype(np.float32)


def _scaled_shared(mm, i, x):
    """A planted bug: route_scale multiplies the shared experts too."""
    return (_SWIGLU(mm.ckpt, f"model.layers.{i}.mlp.shared_experts.", x) * np.float32(mm.route_scale)).astype(
        np.float32)


PLANTED = {
    "RoPE on the full-attention layers too": dict(uses_rope=lambda mm, i: True),
    "no RoPE on any layer": dict(uses_rope=lambda mm, i: False),
    "RoPE on the full layers instead of the sliding ones": dict(
        uses_rope=lambda mm, i: mm.layer_types[i] == "full_attention"),
    "no post norms": dict(post_norm=lambda mm, h, name: h),
    "output gate without its sigmoid": dict(output_gate=lambda o, g: (o * g).astype(np.float32)),
    "no output gate": dict(output_gate=lambda o, g: o),
    "window one key wider (t - u <= W)": dict(layer_window=_window_shift(1)),
    "window one key narrower": dict(layer_window=_window_shift(-1)),
    "no window on the sliding layers": dict(layer_window=lambda mm, i: None),
    "mup ignored": dict(embed_scale=lambda mm: 1.0),
}
PLANTED_MOE = {
    "router weights from the biased scores": dict(select_experts_afmoe=_biased_weights),
    "route_scale ignored": dict(select_experts_afmoe=lambda s, b, k, r: _SELECT(s, b, k, 1.0)),
    "route_scale on the shared experts too": dict(shared_mlp=_scaled_shared),
    "no shared experts": dict(shared_mlp=lambda mm, i, x: np.zeros_like(x)),
    "softmax router instead of sigmoid": dict(router_scores=lambda z: ref.softmax(z, axis=-1)),
}


# ----------------------------------------------------------------------------------------------------
# checkpoints by hand
# ----------------------------------------------------------------------------------------------------

def hand_dense(T, c, ids):
    """The logits of a dense AFMoE (every layer < num_dense_layers) in float64 from the formulas: h = embedding x
    sqrt(H) iff mup_enabled; per layer, x = RMSNorm(h) (input_layernorm); q, k, v, g = the projections of x; per head
    q and k RMSNormed over head_dim (q_norm / k_norm) and, on a sliding_attention layer only, (d, d + D/2) rotated by
    pos * theta^(-2d/D); query t reads the keys u <= t with, on a sliding layer, t - u < sliding_window; scores /
    sqrt(D), softmax; query head h reads kv head h // (heads / kv); o_proj(heads * sigmoid(g)); h += RMSNorm(that)
    (post_attention_layernorm); h += RMSNorm(down(silu(gate x') * up x')) (post_mlp_layernorm) with x' =
    RMSNorm(h) (pre_mlp_layernorm); logits = lm_head(RMSNorm(h)) (model.norm)."""
    f64 = lambda n: np.asarray(T[n], dtype=np.float64)  # noqa: E731
    H, nh, nkv, D, eps = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                          c["rms_norm_eps"])
    theta, win, kinds = float(c["rope_theta"]), c["sliding_window"], c["layer_types"]

    def rms(v, w):
        return v / math.sqrt(float(np.mean(v * v)) + eps) * w

    def rot(v, pos):
        out = v.copy()
        for d in range(D // 2):
            ang = pos * theta ** (-2.0 * d / D)
            out[d] = v[d] * math.cos(ang) - v[d + D // 2] * math.sin(ang)
            out[d + D // 2] = v[d + D // 2] * math.cos(ang) + v[d] * math.sin(ang)
        return out
    hs = [f64("model.embed_tokens.weight")[tok] * (math.sqrt(H) if c.get("mup_enabled") else 1.0) for tok in ids]
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        sliding = kind == "sliding_attention"
        xs = [rms(h, f64(p + "input_layernorm.weight")) for h in hs]
        qs = [f64(a + "q_proj.weight") @ x for x in xs]
        ks = [f64(a + "k_proj.weight") @ x for x in xs]
        vs = [f64(a + "v_proj.weight") @ x for x in xs]
        gs = [f64(a + "gate_proj.weight") @ x for x in xs]
        qn, kn = f64(a + "q_norm.weight"), f64(a + "k_norm.weight")
        new = []
        for t_ in range(len(ids)):
            heads = []
            for hh in range(nh):
                j = hh // (nh // nkv)
                q = rms(qs[t_][hh * D:(hh + 1) * D], qn)
                q = rot(q, t_) if sliding else q
                us = [u for u in range(t_ + 1) if not sliding or t_ - u < win]
                sc = []
                for u in us:
                    k = rms(ks[u][j * D:(j + 1) * D], kn)
                    sc.append(float(q @ (rot(k, u) if sliding else k)) / math.sqrt(D))
                e = [math.exp(s - max(sc)) for s in sc]
                heads.append(sum(e[n] / sum(e) * vs[u][j * D:(j + 1) * D] for n, u in enumerate(us)))
            gate = np.array([_sig(z) for z in gs[t_]])
            h = hs[t_] + rms(f64(a + "o_proj.weight") @ (np.concatenate(heads) * gate),
                             f64(p + "post_attention_layernorm.weight"))
            x = rms(h, f64(p + "pre_mlp_layernorm.weight"))
            g, u = f64(p + "mlp.gate_proj.weight") @ x, f64(p + "mlp.up_proj.weight") @ x
            y = f64(p + "mlp.down_proj.weight") @ (g / (1 + np.exp(-g)) * u)
            h = h + rms(y, f64(p + "post_mlp_layernorm.weight"))
            new.append(h)
        hs = new
    head = f64("model.embed_tokens.weight") if c.get("tie_word_embeddings") else f64("lm_head.weight")
    return np.stack([head @ rms(h, f64("model.norm.weight")) for h in hs])


def _hand_base(**kw):
    c = dict(model_type="afmoe", hidden_size=8, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             head_dim=4, vocab_size=16, intermediate_size=6, moe_intermediate_size=2, num_experts=4,
             num_experts_per_tok=2, num_shared_experts=1, num_dense_layers=3, rms_norm_eps=1e-5, rope_theta=100.0,
             sliding_window=3, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
             mup_enabled=True, tie_word_embeddings=False, route_scale=1.0)
    c.update(kw)
    return c


def dense_by_hand(t, work):
    """Hidden 8, heads 4 / kv 2 of head_dim 4 (hidden / heads = 2), three dense layers (sliding, full, sliding),
    window 3, theta 100, mup, random weights (the BF16-rounded values the checkpoint holds, norm weights 1 + .2 N), 7
    tokens: both passes against hand_dense, with and without mup; each planted attention / norm / mup bug against
    it."""
    cfg = _hand_base()
    m, _ = _write(work, "afmoe_hand_dense", cfg, rng=np.random.default_rng(2468))
    m.check_layout()
    T = {n: m.ckpt[n] for n in m.expected_names()}
    ids = [3, 11, 5, 3, 9, 14, 0]
    want = hand_dense(T, cfg, ids)
    for name, got in (("vectorised", m.forward(ids)), ("token by token", m.forward(ids, naive=True))):
        t.check(_rel(got, want) <= 1e-5, f"afmoe dense model by hand ({name}): rel err {_rel(got, want):.2e}")
    cfg0 = _hand_base(mup_enabled=False)
    m0, _ = _write(work, "afmoe_hand_dense_nomup", cfg0, T)
    want0 = hand_dense(T, cfg0, ids)
    t.check(_rel(m0.forward(ids), want0) <= 1e-5 and _rel(m0.forward(ids, naive=True), want0) <= 1e-5,
            "afmoe dense model by hand without mup (both passes)")
    t.check(_rel(want0, want) > 1e-2, f"the hand model: mup changes the answer ({_rel(want0, want):.1e})")
    caught = []
    for what, fns in PLANTED.items():
        with _planted(**fns):
            bad = m.forward(ids)
        d = _rel(bad, want)
        t.check(d > 1e-3, f"planted bug not caught by the dense hand answer: {what} ({d:.1e})")
        caught.append(f"{what} {d:.1e}")
    log("  planted bugs (against the dense hand answer): " + "; ".join(caught))


def structure_by_hand(t, work):
    """One-layer checks of the window and of NoPE, on both passes. A sliding layer with W = 3 over 8 tokens: changing
    the token at position 2 moves rows 2, 3, 4 (t - 2 < 3) and leaves rows 0, 1 (causal) and 5, 6, 7 (t - 2 >= 3)
    exactly as they were. A full layer: it moves every row from 2 on; its last row does not change when the earlier
    tokens are permuted (no positional embedding), a sliding layer's (RoPE, window >= S) does."""
    rng = np.random.default_rng(97531)
    ids = [4, 9, 1, 12, 7, 2, 15, 6]
    alt = list(ids)
    alt[2] = 13
    perm = [ids[3], ids[0], ids[5], ids[1], ids[6], ids[2], ids[4], ids[7]]
    for kind in ("sliding_attention", "full_attention"):
        cfg = _hand_base(num_hidden_layers=1, num_dense_layers=1, layer_types=[kind])
        m, _ = _write(work, f"afmoe_hand_{kind}", cfg, rng=rng)
        for name, naive in (("vectorised", False), ("token by token", True)):
            a, b = m.forward(ids, naive=naive), m.forward(alt, naive=naive)
            moved = [r for r in range(len(ids)) if _rel(a[r], b[r]) > 1e-6]
            want = [2, 3, 4] if kind == "sliding_attention" else list(range(2, 8))
            t.check(moved == want, f"afmoe {kind} W 3 ({name}): a change at position 2 moved rows {moved}, want {want}")
            if kind == "full_attention":
                same = _rel(m.forward(perm, naive=naive)[-1], a[-1])
                t.check(same <= 1e-6, f"afmoe full layer ({name}): the last row depends on the order of the earlier "
                                      f"tokens ({same:.1e}): a positional embedding?")
        if kind == "full_attention":
            with _planted(uses_rope=lambda mm, i: True):
                d = _rel(m.forward(perm)[-1], m.forward(ids)[-1])
            t.check(d > 1e-4, f"planted bug not caught by the NoPE check: RoPE on the full layer ({d:.1e})")
        else:
            with _planted(layer_window=_window_shift(1)):
                b = m.forward(alt)
            t.check(_rel(b[5], m.forward(ids)[5]) > 1e-6, "planted bug not caught by the window check: t - u <= W")
    # The window wider than the sequence: a sliding layer is a causal RoPE layer.
    cfg = _hand_base(num_hidden_layers=1, num_dense_layers=1, layer_types=["sliding_attention"], sliding_window=8)
    m8, T8 = _write(work, "afmoe_hand_w8", cfg, rng=rng)
    m100, _ = _write(work, "afmoe_hand_w100", dict(cfg, sliding_window=100), T8)
    t.check(np.array_equal(m8.forward(ids), m100.forward(ids)), "afmoe: window 8 over 8 tokens = window 100")
    for name, naive in (("vectorised", False), ("token by token", True)):
        d = _rel(m8.forward(perm, naive=naive)[-1], m8.forward(ids, naive=naive)[-1])
        t.check(d > 1e-4, f"afmoe sliding layer, window 8 ({name}): the last row ignores the order of the earlier "
                          f"tokens ({d:.1e}): no RoPE?")
    m7, _ = _write(work, "afmoe_hand_w7", dict(cfg, sliding_window=7), T8)
    r7 = m7.forward(ids)
    t.check(np.array_equal(r7[:7], m8.forward(ids)[:7]) and _rel(r7[7], m8.forward(ids)[7]) > 1e-6,
            "afmoe: window 7 differs from 8 only in row 7 (the first row with 8 keys)")


def moe_by_hand(t, work):
    """H = 2, one full-attention layer whose o_proj is zero (adds exactly 0: the post norm of a zero vector is 0), the
    MoE layer (num_dense_layers 0), 4 experts top-2 of width 1, one shared expert of width 1, rms_norm_eps 1e-6, ids
    [0 1] with rows [1 1], [1 -1]; x = pre_mlp_layernorm(h) = row / sqrt(1 + 1e-6) =: [a a], [a -a].
    router rows [1 1], [.5 .5], [0 0], [-.5 -.5]: logits [2a a 0 -a] and [0 0 0 0]; expert_bias [0 0 .3 0].
    Token 0: sigmoid [s(2a) s(a) .5 s(-a)] + bias = [.881 .731 .8 .269]: experts 0, 2 (without the bias 0, 1), weights
    [s(2a), .5] / (s(2a) + .5) x route_scale. Token 1: [.5 .5 .8 .5]: experts 2 then 0 (the tie 0 / 1 / 3 to the lower
    index), weights .5 each x route_scale. Expert e: gate [1 0] (g = x0), up [0 1] (u = x1), down column c_e: out =
    silu(x0) x1 c_e with c = [1 0], [0 1], [1 1], [2 -1]. Shared: gate [1 0], up [1 0], down [-.5 1]: silu(x0) x0
    [-.5 1], never scaled (not parallel to the routed sum: post_mlp_layernorm would hide a common factor).
    h' = h + RMSNorm(shared + routed) x [1 .5] (post_mlp_layernorm); logits = RMSNorm(h') (model.norm [1 1]) @ I.
    With mup the rows are [1 1] x sqrt(2) (x is unchanged up to the eps)."""
    c_e = [[1, 0], [0, 1], [1, 1], [2, -1]]
    cfg = _hand_base(hidden_size=2, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1, head_dim=2,
                     vocab_size=2, intermediate_size=2, moe_intermediate_size=1, num_dense_layers=0,
                     rms_norm_eps=1e-6, layer_types=["full_attention"], mup_enabled=False)
    eye = [[1, 0], [0, 1]]
    T = {"model.embed_tokens.weight": [[1, 1], [1, -1]], "model.norm.weight": [1, 1], "lm_head.weight": eye}
    p = "model.layers.0."
    for n in ("input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm"):
        T[p + n + ".weight"] = [1, 1]
    T[p + "post_mlp_layernorm.weight"] = [1, 0.5]
    for n in ("q_proj", "k_proj", "v_proj", "gate_proj"):
        T[p + "self_attn." + n + ".weight"] = eye
    T[p + "self_attn.o_proj.weight"] = [[0, 0], [0, 0]]
    T[p + "self_attn.q_norm.weight"] = T[p + "self_attn.k_norm.weight"] = [1, 1]
    T[p + "mlp.router.gate.weight"] = [[1, 1], [0.5, 0.5], [0, 0], [-0.5, -0.5]]
    T[p + "mlp.expert_bias"] = [0, 0, 0.3, 0]
    for e in range(4):
        T[f"{p}mlp.experts.{e}.gate_proj.weight"] = [[1, 0]]
        T[f"{p}mlp.experts.{e}.up_proj.weight"] = [[0, 1]]
        T[f"{p}mlp.experts.{e}.down_proj.weight"] = [[c_e[e][0]], [c_e[e][1]]]
    T[p + "mlp.shared_experts.gate_proj.weight"] = [[1, 0]]
    T[p + "mlp.shared_experts.up_proj.weight"] = [[1, 0]]
    T[p + "mlp.shared_experts.down_proj.weight"] = [[-0.5], [1.0]]
    T = {k: np.array(v, dtype=np.float32) for k, v in T.items()}
    m, _ = _write(work, "afmoe_hand_moe", cfg, T)
    m.check_layout()
    t.check(m.ckpt.dtype(p + "mlp.expert_bias") == "F32", "expert_bias stored F32")
    eps = 1e-6

    def rms(v, w):
        return [v[j] / math.sqrt((v[0] ** 2 + v[1] ** 2) / 2 + eps) * w[j] for j in range(2)]

    gate = [[1, 1], [0.5, 0.5], [0, 0], [-0.5, -0.5]]

    def want_rows(experts, scale=1.0, mup=False, shared=True):
        rows = []
        for row, (ea, eb) in zip([[1, 1], [1, -1]], experts):
            h = [v * (math.sqrt(2) if mup else 1.0) for v in row]
            x = rms(h, [1, 1])
            sa, sb = (_sig(gate[e][0] * x[0] + gate[e][1] * x[1]) for e in (ea, eb))
            tot = sa + sb
            out = [_silu(x[0]) * x[1] * (sa / tot * c_e[ea][j] + sb / tot * c_e[eb][j]) * scale
                   + (_silu(x[0]) * x[0] * [-0.5, 1.0][j] if shared else 0.0) for j in range(2)]
            h = [h[j] + rms(out, [1, 0.5])[j] for j in range(2)]
            rows.append(rms(h, [1, 1]))
        return rows
    biased = [(0, 2), (2, 0)]
    want = want_rows(biased)
    for name, got in (("vectorised", m.forward([0, 1])), ("token by token", m.forward([0, 1], naive=True))):
        t.close(got, want, f"afmoe MoE layer by hand ({name}): the bias chooses, the sigmoid weighs, the shared expert "
                           f"adds", rtol=1e-6, atol=1e-6)
    t.check(_rel(want_rows([(0, 1), (0, 1)]), want) > 1e-2, "the hand MoE: the bias changes the answer")
    t.check(_rel(want_rows(biased, shared=False), want) > 1e-2, "the hand MoE: the shared expert changes the answer")
    # route_scale 2.826 multiplies the routed experts only; mup scales the embedding rows by sqrt(2).
    ms, _ = _write(work, "afmoe_hand_moe_scale", dict(cfg, route_scale=2.826, mup_enabled=True), T)
    want_s = want_rows(biased, scale=2.826, mup=True)
    t.check(_rel(want_s, want_rows(biased, scale=2.826)) > 1e-2 and _rel(want_s, want_rows(biased, mup=True)) > 1e-2,
            "the hand MoE: route_scale and mup each change the answer")
    for name, got in (("vectorised", ms.forward([0, 1])), ("token by token", ms.forward([0, 1], naive=True))):
        t.close(got, want_s, f"afmoe MoE by hand ({name}): route_scale 2.826 on the routed experts, mup", rtol=1e-6,
                atol=1e-6)
    bugs = dict(PLANTED_MOE)
    bugs["mup ignored"] = PLANTED["mup ignored"]
    bugs["no post norms"] = PLANTED["no post norms"]
    for what, fns in bugs.items():
        with _planted(**fns):
            bad = ms.forward([0, 1])
        t.check(_rel(bad, want_s) > 1e-3, f"planted bug not caught by the MoE hand answer: {what}")


# ----------------------------------------------------------------------------------------------------
# random checkpoints
# ----------------------------------------------------------------------------------------------------

def model_configs():
    return [
        ("afmoe/Trinity-Mini shrunk (s s s f x 2, window 5, 2 dense, 8 experts top-3, 1 shared, scale 2.826, mup)",
         small_config()),
        ("afmoe/default layer kinds (every 2)+MHA+2 shared+scale 1+no mup+tied+1 dense+window 3+rope_parameters",
         small_config(layer_types=None, global_attn_every_n_layers=2, num_hidden_layers=4, num_key_value_heads=None,
                      num_shared_experts=2, route_scale=None, mup_enabled=False, tie_word_embeddings=True,
                      num_dense_layers=1, sliding_window=3, rope_theta=None,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e4}, route_norm=None, score_func=None,
                      n_group=None, topk_group=None, num_expert_groups=None, num_limited_groups=None)),
        ("afmoe/full first+MQA+top-1+window 1+0 dense+head_dim 8+rope_scaling theta 500",
         small_config(layer_types=["full_attention", "sliding_attention", "sliding_attention"], num_hidden_layers=3,
                      num_key_value_heads=1, num_experts_per_tok=1, sliding_window=1, num_dense_layers=0, head_dim=8,
                      rope_scaling={"rope_type": "default", "rope_theta": 500.0}, rms_norm_eps=1e-6)),
        ("afmoe/all full (every 1, no sliding_window)+all dense",
         small_config(layer_types=None, global_attn_every_n_layers=1, num_hidden_layers=2, sliding_window=None,
                      num_dense_layers=5)),
    ]


def afmoe_model_tests(t, work):
    log("afmoe model checks on self-written HF-layout checkpoints")
    rng = np.random.default_rng(24680)
    ids = [int(v) for v in rng.integers(0, VOCAB, size=SEQ)]
    first = None
    for n, (label, cfg) in enumerate(model_configs()):
        t0 = time.time()
        m, tensors = _write(work, f"afmoe_{n}", cfg, rng=rng)
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
        _write(work, f"afmoe_{n}__sharded", cfg, tensors, shards=3)
        t.check(np.array_equal(ref.Model(os.path.join(work, f"afmoe_{n}__sharded")).forward(ids), full),
                f"{label}: sharded logits differ")
        emb = m.ckpt["model.embed_tokens.weight"]
        t.check(np.all((emb.view(np.uint32) & 0xFFFF) == 0), f"{label}: upcast bf16 has nonzero low bits")
        moe_layers = [i for i in range(m.n_layers) if m.is_moe_layer(i)]
        if moe_layers:
            for i in moe_layers:
                name = f"model.layers.{i}.{af.EXPERT_BIAS}"
                t.check(m.ckpt.dtype(name) == "F32" and m.ckpt.shape(name) == [m.n_experts], f"{label}: {name} F32 [E]")
            m0 = ref.Model(m.ckpt.dir)
            m5 = ref.Model(m.ckpt.dir)
            for i in moe_layers:
                name = f"model.layers.{i}.{af.EXPERT_BIAS}"
                m0.ckpt._cache[name] = np.zeros(m.n_experts, dtype=np.float32)
                m5.ckpt._cache[name] = (m.ckpt[name] + np.float32(0.5)).astype(np.float32)
            diff = _rel(m0.forward(ids), full)
            t.check(diff > 1e-3, f"{label}: zeroing expert_bias moves the logits by only {diff:.2e}")
            d5, d5n = _rel(m5.forward(ids), full), _rel(m5.forward(ids, naive=True), naive)
            t.check(d5 <= 1e-6 and d5n <= 1e-6, f"{label}: expert_bias + .5 everywhere moved the logits by {d5:.2e} / "
                                                f"{d5n:.2e} (the bias must only choose)")
        t.check(_rel(m.forward([ids[1]] + ids[1:])[-1], full[-1]) > 1e-6, f"{label}: the last row ignores the first "
                                                                          f"token")
        log(f"  {label[:100]:<100} max|logit| {scale:7.3f}  naive rel {err:.1e}  ({time.time() - t0:.1f}s)")
        if first is None:
            first = (m, ids, naive)
    planted_bug_tests(t, *first)


def planted_bug_tests(t, m, ids, naive):
    """The vectorised pass with one bug planted at a time must disagree with the token-by-token pass (> 1e-3)."""
    caught = []
    for what, fns in list(PLANTED.items()) + list(PLANTED_MOE.items()):
        with _planted(**fns):
            d = _rel(m.forward(ids), naive)
        t.check(d > 1e-3, f"planted bug not caught by vectorised vs token by token: {what} ({d:.1e})")
        caught.append(f"{what} {d:.1e}")
    log("  planted bugs (vectorised vs token by token): " + "; ".join(caught))


def afmoe_tests(t, work, archs=af.TYPES):
    if not any(a in archs for a in af.TYPES):
        return
    afmoe_config_tests(t, work)
    log("afmoe checkpoints by hand")
    dense_by_hand(t, work)
    structure_by_hand(t, work)
    moe_by_hand(t, work)
    afmoe_model_tests(t, work)


def main(argv=None):
    return run_part_alone("afmoe", known_answer_tests_afmoe, afmoe_tests, argv)


if __name__ == "__main__":
    sys.exit(main())
