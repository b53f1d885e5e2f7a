"""The granitemoehybrid part of the reference self-test (check_logits.py --self-test): known answers of the conv1d
with its bias and left zero padding (and its carried state), the gated RMSNorm (gate before the norm), softplus,
segment sums, one Mamba2 step by hand (state and output), the group-to-head mapping, the in_proj / xBC split,
the chunked SSD scan == the recurrence (several chunks and a remainder, an initial state, a carried state); config
parsing on the Granite 4.0-H-Tiny config (reconstructed) and the class defaults, and the refusals; and small
checkpoints written here in the exact HF layout (mixed layer_types, 1 and 2 groups, RoPE or none, conv bias on
and off, proj bias on and off, tied and untied, 0 or 8 experts, dt_bias / A_log / D stored as F32 or BF16) on
which the vectorised pass (chunked scan) is checked against the token-by-token one (recurrence), other chunk
sizes, causality, sharding, and that each Mamba2 parameter and the shared MLP move the logits.
"""

import copy
import math
import os
import time

import numpy as np

import moe_reference as ref
import moe_reference_granite as gm
import moe_reference_granite_hybrid as gh
from check_logits_compare import config_only_model, log
from selftest_util import rel as _rel

VOCAB = 120
SEQ = 40

# ibm-granite/granite-4.0-h-tiny's config.json, reconstructed (not downloaded): a parsing test of the keys, not a
# statement about the published file. Values corroborated by third-party copies: hidden 1536, 40 layers with
# attention at 5, 15, 25, 35, heads 12 / kv 4, 64 experts top-6, intermediate 512, shared 1024, mamba 48 heads of
# 64, d_state 128, 1 group, d_conv 4, expand 2, chunk 256, "nope", vocab 100352, tied. From memory only:
# rms_norm_eps 1e-5, the multipliers (12, 0.22, 0.0078125 = 1/128, 6), max_position_embeddings, the token ids.
GRANITE_4_H_TINY = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "attention_bias": False,
    "attention_dropout": 0.0, "attention_multiplier": 0.0078125, "bos_token_id": 100257, "embedding_multiplier": 12,
    "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 1536, "init_method": "mup", "initializer_range": 0.1,
    "intermediate_size": 512,
    "layer_types": (["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9 + ["attention"]
                    + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4),
    "logits_scaling": 6, "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_head": 64,
    "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 48, "mamba_proj_bias": False,
    "max_position_embeddings": 131072, "normalization_function": "rmsnorm", "num_attention_heads": 12,
    "num_experts_per_tok": 6, "num_hidden_layers": 40, "num_key_value_heads": 4, "num_local_experts": 64,
    "output_router_logits": False, "pad_token_id": 100256, "position_embedding_type": "nope",
    "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000,
    "router_aux_loss_coef": 0.0, "shared_intermediate_size": 1024, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.56.0", "use_cache": True, "vocab_size": 100352,
}
F32_PARAMS = ("dt_bias", "A_log", "D")


def small_config(**kw):
    """The H-Tiny config shrunk: hidden 32, 4 layers (mamba, attention, mamba, mamba), heads 4 / kv 2 (head_dim 8,
    attention_multiplier 1/8), 8 experts top-2 of width 16, shared 24, mamba 8 heads of 8 (expand 2), d_state 16,
    1 group, d_conv 4, chunk 16 (40 tokens: two chunks and a remainder of 8)."""
    c = copy.deepcopy(GRANITE_4_H_TINY)
    c.update(hidden_size=32, num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "mamba"],
             num_attention_heads=4, num_key_value_heads=2, attention_multiplier=0.125, num_local_experts=8,
             num_experts_per_tok=2, intermediate_size=16, shared_intermediate_size=24, mamba_n_heads=8,
             mamba_d_head=8, mamba_d_state=16, mamba_chunk_size=16, vocab_size=VOCAB, bos_token_id=VOCAB - 1,
             eos_token_id=VOCAB - 1, pad_token_id=VOCAB - 2)
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def _config_model(work, name, cfg):
    return config_only_model(work, "gh_cfg_" + name, cfg)


# ----------------------------------------------------------------------------------------------------

def known_answer_tests_granite_hybrid(t):
    sig = lambda z: 1.0 / (1.0 + math.exp(-z))  # noqa: E731
    t.close(gh.softplus(np.array([0, 30, -30], dtype=np.float32)), [math.log(2), 30, math.log1p(math.exp(-30))],
            "granitemoehybrid softplus (threshold 20)", atol=1e-20)
    # Causal conv1d with a bias, K = 3, w = [1 2 3] (w[K-1] multiplies the current input), b = .5, x = [1 0 0 5]:
    # zeros before the first token, so row 0 = 3 * 1 + .5; then 2 + .5, 1 + .5, 15 + .5 (pre-activation).
    w = np.array([[1, 2, 3]], dtype=np.float32)
    b = np.array([0.5], dtype=np.float32)
    xs = np.array([[1], [0], [0], [5]], dtype=np.float32)
    out, st = gh.causal_conv1d(xs, w, b)
    t.close(out[:, 0], [3.5, 2.5, 1.5, 15.5], "conv1d with bias: left zero padding, bias added once")
    out0, _ = gh.causal_conv1d(xs, w)
    t.close(out0[:, 0], [3, 2, 1, 15], "conv1d without bias")
    t.check(st.tolist() == [[0.0], [5.0]], f"conv state = the last K-1 inputs, bias-free (got {st.tolist()})")
    o1, s1 = gh.causal_conv1d(xs[:1], w, b)
    t.check(s1.tolist() == [[0.0], [1.0]], f"conv state after one token: a zero then the token ({s1.tolist()})")
    steps = [o1]
    for r in range(1, 4):
        o, s1 = gh.causal_conv1d(xs[r:r + 1], w, b, s1)
        steps.append(o)
    t.check(np.array_equal(np.concatenate(steps), out), "conv with bias: 1 token then 3 steps == one pass")
    # Gated RMSNorm, gate first: y = [2 4], z = [0 1], w = [1 2]: g = y * silu(z) = [0, 4 s] (s = sigmoid(1)),
    # mean(g^2) = 8 s^2, out = [0, 2 * 4 s / sqrt(8 s^2 + eps)]. Norm-then-gate would give [0, 2 * 4/sqrt(10) * s].
    s = sig(1.0)
    got = gh.gated_rms_norm(np.array([[2, 4]], dtype=np.float32), np.array([[0, 1]], dtype=np.float32),
                            np.array([1, 2], dtype=np.float32), 1e-6)
    t.close(got, [[0.0, 8 * s / math.sqrt(8 * s * s + 1e-6)]], "gated rms_norm: y * silu(z), then the norm, * w")
    y3, z3, w3 = np.array([[1, 2, 3]], dtype=np.float32), np.array([[0.5, -1, 2]], dtype=np.float32), \
        np.array([1.5, 1, 0.5], dtype=np.float32)
    g = [v * u * sig(u) for v, u in zip([1, 2, 3], [0.5, -1, 2])]
    inv = 1 / math.sqrt(sum(v * v for v in g) / 3 + 1e-5)
    t.close(gh.gated_rms_norm(y3, z3, w3, 1e-5), [[g[0] * inv * 1.5, g[1] * inv, g[2] * inv * 0.5]],
            "gated rms_norm over the whole vector (no groups)")
    # Segment sums: a = [1 2 3] -> [[0 -inf -inf] [2 0 -inf] [5 3 0]].
    seg = gh.segment_sum(np.array([1, 2, 3], dtype=np.float32))
    t.check(seg.tolist() == [[0, -np.inf, -np.inf], [2, 0, -np.inf], [5, 3, 0]], f"segment_sum: {seg.tolist()}")

    # One Mamba2 head (P = N = 2, G = 1) by hand: A_log = ln 2 -> A = -2; dt + dt_bias = 0 -> dt = softplus(0) = ln 2,
    # exp(dt A) = 1/4. Step 1, x = [1 2], B = [1 0], C = [1 1], S = 0: S = ln2 [[1 0] [2 0]], y = S C = ln2 [1 2].
    # Step 2, x = [0 1], B = [1 1], C = [0 1]: S = S/4 + ln2 [[0 0] [1 1]] = ln2 [[.25 0] [1.5 1]], y = ln2 [0 1].
    # With D = .5 the outputs gain D x: [ln2 + .5, 2 ln2 + 1], [0, ln2 + .5].
    ln2 = math.log(2)
    x = np.array([[[1, 2]], [[0, 1]]], dtype=np.float32)                  # [S, nh, P]
    dt = gh.softplus(np.zeros((2, 1), dtype=np.float32))
    A = -np.exp(np.array([ln2], dtype=np.float32))
    B = np.array([[[1, 0]], [[1, 1]]], dtype=np.float32)                  # [S, G, N]
    C = np.array([[[1, 1]], [[0, 1]]], dtype=np.float32)
    want_y = [[[ln2, 2 * ln2]], [[0, ln2]]]
    want_s = [[[0.25 * ln2, 0], [1.5 * ln2, ln2]]]
    y, st = gh.ssd_recurrent(x, dt, A, B, C)
    t.close(y, want_y, "Mamba2 recurrence: two steps by hand", rtol=1e-6)
    t.close(st, want_s, "Mamba2 recurrence: the final state by hand", rtol=1e-6)
    t.close(y + 0.5 * x, [[[ln2 + 0.5, 2 * ln2 + 1]], [[0, ln2 + 0.5]]], "Mamba2 step by hand with D = .5")
    for c in (1, 2, 64):
        y, st = gh.ssd_chunked(x, dt, A, B, C, c)
        t.close(y, want_y, f"Mamba2 SSD (chunk {c}): two steps by hand", rtol=1e-6)
        t.close(st, want_s, f"Mamba2 SSD (chunk {c}): the final state by hand", rtol=1e-6)

    # Chunked == recurrent on 40 random tokens, 4 heads in 2 groups (P 3, N 5), chunks 16 (two and a remainder of
    # 8), 7, 40, 64; from an initial state; prefill 25 (chunked) then 15 recurrent steps == one pass.
    rng = np.random.default_rng(4242)
    S_, nh, P, G, N = SEQ, 4, 3, 2, 5
    x = rng.standard_normal((S_, nh, P)).astype(np.float32)
    dt = gh.softplus(rng.standard_normal((S_, nh)).astype(np.float32))
    A = (-np.exp(rng.uniform(-1.5, 1.0, nh))).astype(np.float32)
    B = rng.standard_normal((S_, G, N)).astype(np.float32)
    C = rng.standard_normal((S_, G, N)).astype(np.float32)
    s0 = rng.standard_normal((nh, P, N)).astype(np.float32)
    y_r, s_r = gh.ssd_recurrent(x, dt, A, B, C)
    y_r0, s_r0 = gh.ssd_recurrent(x, dt, A, B, C, s0)
    for c in (16, 7, 40, 64):
        y_c, s_c = gh.ssd_chunked(x, dt, A, B, C, c)
        t.check(_rel(y_c, y_r) < 1e-5 and _rel(s_c, s_r) < 1e-5,
                f"SSD chunk {c} vs recurrent: outputs {_rel(y_c, y_r):.2e}, states {_rel(s_c, s_r):.2e}")
        y_c, s_c = gh.ssd_chunked(x, dt, A, B, C, c, s0)
        t.check(_rel(y_c, y_r0) < 1e-5 and _rel(s_c, s_r0) < 1e-5, f"SSD chunk {c} from an initial state")
    y_a, s_a = gh.ssd_chunked(x[:25], dt[:25], A, B[:25], C[:25], 16)
    y_b, s_b = gh.ssd_recurrent(x[25:], dt[25:], A, B[25:], C[25:], s_a)
    t.check(_rel(np.concatenate([y_a, y_b]), y_r) < 1e-5 and _rel(s_b, s_r) < 1e-5,
            "SSD: prefill 25 (chunked) then 15 recurrent steps from its state == one pass")
    t.check(_rel(gh.ssd_recurrent(x, dt, A * 0, B, C)[0], y_r) > 1e-2, "the decay exp(dt A) matters")
    # Head h reads group h // (nh / G): zeroing group 1's B silences heads 2 and 3 only (not the odd heads).
    Bz = B.copy()
    Bz[:, 1] = 0
    y_z, _ = gh.ssd_chunked(x, dt, A, Bz, C, 16)
    t.check(bool(np.all(y_z[:, 2:] == 0)) and _rel(y_z[:, :2], y_r[:, :2]) < 1e-5,
            "groups: heads 0, 1 read group 0, heads 2, 3 group 1")

    # The in_proj split and the xBC split on aranges: d_inner 4 (2 heads of 2), G 1, N 1 -> conv_dim 6, then 2 dt.
    class M:
        mamba_inner, mamba_conv_dim, mamba_heads, mamba_head_dim, mamba_groups, mamba_state = 4, 6, 2, 2, 1, 1
    z, xbc, dts = gh.split_in_proj(M, np.arange(12, dtype=np.float32)[None])
    t.check((z.tolist(), xbc.tolist(), dts.tolist()) == ([[0, 1, 2, 3]], [[4, 5, 6, 7, 8, 9]], [[10, 11]]),
            "in_proj split: z [0, d_inner), xBC [d_inner, d_inner + conv_dim), dt the last n_heads")
    xh, bb, cc = gh.split_xbc(M, xbc)
    t.check((xh.tolist(), bb.tolist(), cc.tolist()) == ([[[4, 5], [6, 7]]], [[[8]]], [[[9]]]),
            "xBC split: x (heads of P), then B, then C")


# ----------------------------------------------------------------------------------------------------

def granite_hybrid_config_tests(t, work):
    log("granitemoehybrid config checks")
    m = _config_model(work, "h_tiny", GRANITE_4_H_TINY)
    attn = [i for i, k in enumerate(m.layer_types) if k == "attention"]
    t.check(attn == [5, 15, 25, 35], f"H-Tiny: attention layers {attn}")
    got = (m.hidden, m.n_layers, m.n_heads, m.n_kv, m.head_dim, m.vocab, m.eps, m.tie, m.n_experts, m.top_k, m.inter,
           m.shared_inter, m.mamba_heads, m.mamba_head_dim, m.mamba_inner, m.mamba_groups, m.mamba_state,
           m.mamba_conv, m.mamba_conv_dim, m.mamba_chunk, m.mamba_conv_bias, m.mamba_proj_bias, m.use_rope,
           m.embedding_multiplier, m.residual_multiplier, m.attention_multiplier, m.scale, m.logits_scaling,
           m.qkv_bias)
    want = (1536, 40, 12, 4, 128, 100352, 1e-5, True, 64, 6, 512, 1024, 48, 64, 3072, 1, 128, 4, 3072 + 256, 256,
            True, False, False, 12.0, 0.22, 0.0078125, 0.0078125, 6.0, False)
    t.check(got == want, f"H-Tiny config values: {got}")
    shapes = gh.expected_shapes(m)
    t.check(shapes["model.layers.0.mamba.in_proj.weight"] == (3072 + 3328 + 48, 1536)
            and shapes["model.layers.0.mamba.conv1d.weight"] == (3328, 1, 4)
            and shapes["model.layers.0.mamba.norm.weight"] == (3072,)
            and shapes["model.layers.0.mamba.out_proj.weight"] == (1536, 3072)
            and shapes["model.layers.5.self_attn.k_proj.weight"] == (512, 1536)
            and shapes["model.layers.5.block_sparse_moe.input_linear.weight"] == (64, 1024, 1536)
            and shapes["model.layers.5.shared_mlp.input_linear.weight"] == (2048, 1536), "H-Tiny tensor shapes")
    mamba0 = [n for n in shapes if n.startswith("model.layers.0.")]
    attn5 = [n for n in shapes if n.startswith("model.layers.5.")]
    t.check(len(mamba0) == 2 + 8 + 3 + 2 and len(attn5) == 2 + 4 + 3 + 2 and "lm_head.weight" not in shapes
            and len(shapes) == 2 + 36 * 15 + 4 * 11, f"H-Tiny: {len(mamba0)} / {len(attn5)} / {len(shapes)} names")
    # Dense Granite 4.0-H (num_local_experts 0): the shared MLP alone, no block_sparse_moe names.
    m = _config_model(work, "dense", dict(GRANITE_4_H_TINY, num_local_experts=0, num_experts_per_tok=0,
                                          intermediate_size=4096, shared_intermediate_size=4096))
    t.check(m.n_experts == 0 and not any("block_sparse_moe" in n for n in m.expected_names()),
            "num_local_experts 0: no routed experts")
    # GraniteMoeHybridConfig defaults for every missing key: all mamba, 128 heads of 2 * 4096 / 128 = 64.
    m = _config_model(work, "defaults", {"model_type": "granitemoehybrid"})
    got = (m.vocab, m.hidden, m.inter, m.n_layers, m.n_heads, m.n_kv, m.eps, m.tie, m.n_experts, m.top_k,
           m.shared_inter, m.mamba_heads, m.mamba_head_dim, m.mamba_groups, m.mamba_state, m.mamba_conv,
           m.mamba_chunk, m.mamba_conv_bias, m.mamba_proj_bias, m.use_rope, m.layer_types == ["mamba"] * 32,
           m.embedding_multiplier, m.attention_multiplier)
    t.check(got == (32000, 4096, 11008, 32, 32, 32, 1e-6, False, 8, 2, 1024, 128, 64, 1, 256, 4, 256, True, False,
                    False, True, 1.0, 1.0), f"GraniteMoeHybridConfig defaults: {got}")
    # RoPE only with "rope"; the layers_block_type alias; [] = all mamba.
    m = _config_model(work, "rope", small_config(position_embedding_type="rope", rope_theta=5e5))
    t.check(m.use_rope and m.theta == 5e5 and np.array_equal(m.inv_freq, ref.rope_inv_freq(8, 5e5)),
            "position_embedding_type rope: NeoX RoPE over the head, rope_theta")
    m = _config_model(work, "none", small_config(position_embedding_type=None))
    t.check(not m.use_rope, "position_embedding_type null: no RoPE")
    cfg = small_config()
    cfg["layers_block_type"] = cfg.pop("layer_types")
    m = _config_model(work, "alias", cfg)
    t.check(m.layer_types == ["mamba", "attention", "mamba", "mamba"], "layers_block_type alias of layer_types")
    m = _config_model(work, "empty", small_config(layer_types=[]))
    t.check(m.layer_types == ["mamba"] * 4, "layer_types [] = every layer mamba")
    bad = [
        ("kind", small_config(layer_types=["mamba", "full_attention", "mamba", "mamba"]), ValueError, "layer_types"),
        ("types_len", small_config(layer_types=["mamba"] * 3), ValueError, "layer_types"),
        ("d_head", small_config(mamba_d_head=4), ValueError, "mamba_d_head"),
        ("heads", small_config(mamba_n_heads=5, mamba_d_head="auto"), ValueError, "mamba_n_heads"),
        ("groups", small_config(mamba_n_groups=3), ValueError, "mamba_n_groups"),
        ("position", small_config(position_embedding_type="alibi"), NotImplementedError, "'alibi'"),
        ("act", small_config(hidden_act="gelu"), NotImplementedError, "'gelu'"),
        ("shared0", small_config(shared_intermediate_size=0), NotImplementedError, "shared_intermediate_size"),
        ("dt_limit", small_config(time_step_limit=[0.001, 0.1]), NotImplementedError, "time_step_limit"),
        ("head_dim", small_config(head_dim=16), NotImplementedError, "head_dim"),
        ("k_gt_e", small_config(num_experts_per_tok=9), ValueError, "num_experts_per_tok"),
        ("kv", small_config(num_key_value_heads=3), ValueError, "num_key_value_heads"),
        ("logits_scaling_0", small_config(logits_scaling=0), ValueError, "logits_scaling"),
        ("rope_dynamic", small_config(position_embedding_type="rope", rope_scaling={"type": "dynamic", "factor": 2.0}),
         NotImplementedError, "'dynamic'"),
    ]
    for name, cfg, exc, text in bad:
        try:
            _config_model(work, "bad_" + name, cfg)
            t.check(False, f"granitemoehybrid config {name}: no error")
        except exc as e:
            t.check(text in str(e), f"granitemoehybrid config {name}: error {e!r} lacks {text!r}")
    m = _config_model(work, "dt_limit_default", small_config(time_step_limit=[0.0, math.inf]))
    t.check(m.mamba_heads == 8, "time_step_limit (0, inf) accepted")


# ----------------------------------------------------------------------------------------------------

def synth(m, rng):
    """{name: float32 array} for every expected tensor of m (shapes from gh.expected_shapes)."""
    out = {}
    for name, shape in gh.expected_shapes(m).items():
        leaf = name.rsplit(".", 1)[-1]
        if name == "model.embed_tokens.weight":
            a = rng.standard_normal(shape)
        elif name == "lm_head.weight":
            a = rng.standard_normal(shape) / math.sqrt(shape[1])
        elif name.endswith("norm.weight"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif leaf == "A_log":
            a = np.log(rng.uniform(0.3, 4.0, shape))
        elif leaf == "dt_bias":
            a = rng.uniform(-2.0, 0.5, shape)
        elif leaf == "D":
            a = 1.0 + 0.3 * rng.standard_normal(shape)
        elif name.endswith("conv1d.weight"):
            a = 0.5 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.2 * rng.standard_normal(shape)
        elif name.endswith(gm.ROUTER):
            a = 3.0 * rng.standard_normal(shape) / math.sqrt(shape[1])
        else:
            a = rng.standard_normal(shape) / math.sqrt(shape[-1])
        out[name] = a.astype(np.float32)
    return out


def model_configs():
    """(label, config, F32 Mamba parameters?)"""
    return [
        ("granitemoehybrid/H-Tiny shrunk (m a m m, 1 group, nope, conv bias, tied, 8 experts top-2, chunk 16)",
         small_config(), False),
        ("granitemoehybrid/2 groups+rope+no conv bias+proj bias+attention_bias+untied+dense+F32 dt_bias/A_log/D",
         small_config(layer_types=["attention", "mamba", "mamba", "attention"], mamba_n_groups=2,
                      position_embedding_type="rope", rope_theta=1e4, mamba_conv_bias=False, mamba_proj_bias=True,
                      attention_bias=True, tie_word_embeddings=False, num_local_experts=0, num_experts_per_tok=0,
                      embedding_multiplier=3.0, residual_multiplier=0.5, logits_scaling=2.5), True),
        ("granitemoehybrid/all mamba (no layer_types)+4 groups+d_head auto+top-1 of 4+MQA+chunk 256",
         small_config(layer_types=None, mamba_n_groups=4, mamba_d_head=None, num_local_experts=4,
                      num_experts_per_tok=1, num_key_value_heads=1, mamba_chunk_size=None, mamba_d_conv=3,
                      position_embedding_type=None, embedding_multiplier=1.0, residual_multiplier=1.0,
                      logits_scaling=1.0, attention_multiplier=1.0), False),
        ("granitemoehybrid/rope linear 2+GQA 4/2+attention at 0 and 3+proj bias+conv bias+tied",
         small_config(layer_types=["attention", "mamba", "mamba", "attention"], position_embedding_type="rope",
                      rope_scaling={"type": "linear", "factor": 2.0}, mamba_proj_bias=True, mamba_expand=1,
                      mamba_n_heads=4, mamba_d_head=8, mamba_d_state=8), False),
    ]


def _zeroed(m, names, fn=np.zeros_like):
    m2 = ref.Model(m.ckpt.dir)
    m2.mamba_chunk = m.mamba_chunk
    for n in names:
        m2.ckpt._cache[n] = fn(m.ckpt[n])
    return m2


def _position_check(t, label, m):
    """Without RoPE an attention layer's last row is the same whatever the order of the earlier tokens (their keys
    and values are a set); with RoPE it is not. Vectorised and token by token."""
    i = m.layer_types.index("attention")
    x = np.random.default_rng(11).standard_normal((6, m.hidden)).astype(np.float32)
    perm = [3, 0, 4, 1, 2, 5]
    pos = np.arange(6)
    vec = [gh.attention_layer(m, i, xx, pos)[-1] for xx in (x, x[perm])]
    nr = ref.NaiveRunner(m)
    nai = []
    for xx in (x, x[perm]):
        cache = ([], [])
        for r in range(6):
            o = nr._granite_attn_token(i, xx[r].astype(np.float64), r / m.rope_linear_factor, cache)
        nai.append(o)
    for name, (a, b) in (("vectorised", vec), ("token-by-token", nai)):
        d = _rel(a, b)
        if m.use_rope:
            t.check(d > 1e-3, f"{label}: RoPE: the order of earlier tokens moves the last row ({name}) by only {d:.1e}")
        else:
            t.check(d < 1e-5, f"{label}: no RoPE: the order of earlier tokens moved the last row ({name}) by {d:.1e}")


def granite_hybrid_model_tests(t, work, archs=gh.TYPES):
    from check_logits_selftest import write_checkpoint   # imported here: check_logits_selftest imports this module
    log("granitemoehybrid model checks on self-written HF-layout checkpoints")
    rng = np.random.default_rng(8642)
    ids = [int(v) for v in rng.integers(0, VOCAB, size=SEQ)]
    for n, (label, cfg, f32) in enumerate(model_configs()):
        t0 = time.time()
        d1 = os.path.join(work, f"granite_hybrid_{n}")
        oracle = _config_model(work, f"oracle_{n}", cfg)
        tensors = synth(oracle, rng)
        dtypes = {k: "F32" for k in tensors if k.rsplit(".", 1)[-1] in F32_PARAMS} if f32 else None
        write_checkpoint(d1, cfg, tensors, dtypes=dtypes)
        m = ref.Model(d1)
        try:
            m.check_layout()
            t.check(True, "layout")
        except ValueError as e:
            t.check(False, f"{label}: {e}")
        mam = [i for i, k in enumerate(m.layer_types) if k == "mamba"]
        a = f"model.layers.{mam[0]}.mamba."
        t.check(m.ckpt.dtype(a + "A_log") == ("F32" if f32 else "BF16"), f"{label}: A_log stored as written")
        full = m.forward(ids)
        scale = float(np.max(np.abs(full)))
        t.check(full.shape == (SEQ, VOCAB) and full.dtype == np.float32 and bool(np.all(np.isfinite(full))),
                f"{label}: logits shape/dtype/finite")
        t.check(not m.ckpt.unused(), f"{label}: tensors never read: {m.ckpt.unused()[:6]}")
        naive = m.forward(ids, naive=True)
        err = _rel(naive, full)
        t.check(err <= 1e-5, f"{label}: vectorised (chunked) vs token-by-token (recurrent) rel err {err:.2e}")
        chunk = m.mamba_chunk
        for c in (7, 64):
            m.mamba_chunk = c
            cerr = _rel(m.forward(ids), full)
            t.check(cerr <= 1e-5, f"{label}: chunk {c} vs chunk {chunk} rel err {cerr:.2e}")
        m.mamba_chunk = chunk
        perr = _rel(m.forward(ids[:17]), full[:17])
        t.check(perr <= 1e-5, f"{label}: prefix logits differ from the first rows by {perr:.2e}")
        alt = ids[:-1] + [(ids[-1] + 1) % VOCAB]
        aerr = _rel(m.forward(alt)[:-1], full[:-1])
        t.check(aerr <= 1e-5, f"{label}: changing the last token changed earlier rows by {aerr:.2e}")
        write_checkpoint(d1 + "__sharded", cfg, tensors, shards=3, dtypes=dtypes)
        t.check(np.array_equal(ref.Model(d1 + "__sharded").forward(ids), full), f"{label}: sharded logits differ")
        emb = m.ckpt["model.embed_tokens.weight"]
        t.check(np.all((emb.view(np.uint32) & 0xFFFF) == 0), f"{label}: upcast bf16 has nonzero low bits")
        # Each part moves the logits (so the checks above see it): the shared MLP, D, the conv bias, dt_bias.
        parts = {"shared MLP": [f"model.layers.{i}.{gm.SHARED_OUT}" for i in range(m.n_layers)],
                 "D": [f"model.layers.{i}.mamba.D" for i in mam],
                 "dt_bias": [f"model.layers.{i}.mamba.dt_bias" for i in mam]}
        if m.mamba_conv_bias:
            parts["conv1d.bias"] = [f"model.layers.{i}.mamba.conv1d.bias" for i in mam]
        if m.mamba_proj_bias:
            parts["in_proj.bias"] = [f"model.layers.{i}.mamba.in_proj.bias" for i in mam]
        for what, names in parts.items():
            diff = _rel(_zeroed(m, names).forward(ids), full)
            t.check(diff > 1e-3, f"{label}: zeroing {what} moves the logits by only {diff:.2e}")
        if "attention" in m.layer_types:
            _position_check(t, label, m)
        log(f"  {label[:84]:<84} max|logit| {scale:7.3f}  naive rel {err:.1e}  ({time.time() - t0:.1f}s)")


def granite_hybrid_tests(t, work, archs=gh.TYPES):
    granite_hybrid_config_tests(t, work)
    granite_hybrid_model_tests(t, work, archs)
