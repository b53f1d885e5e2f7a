"""The qwen3_next / qwen3_5_moe part of the reference self-test (check_logits.py --self-test): known answers of
the zero-centred and gated RMSNorms, the L2 norm, softplus, the causal conv1d (and its carried state), the
gated delta rule (two steps by hand; chunked == recurrent; a carried state), the in_proj_qkvz / in_proj_ba
split; config parsing on published-style config.json files and its refusals; and small checkpoints written
here in the exact HF layout (MTP and vision tensors present and ignored) on which the vectorised pass
(chunked delta rule) is checked against the token-by-token one, causality, sharding and the output gate.
"""

import copy
import math
import os
import time

import numpy as np

import moe_reference as ref
import moe_reference_qwen3_next as q3n
from check_logits_compare import config_only_model, log
from selftest_util import rel as _rel

VOCAB = 200
SEQ = 40

# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (the computation-relevant keys; transformers 4.57).
QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "decoder_sparse_step": 1,
    "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "mlp_only_layers": [], "moe_intermediate_size": 512, "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False, "norm_topk_prob": True, "num_attention_heads": 16, "num_experts": 512,
    "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": False,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
# Qwen/Qwen3.5-35B-A3B's config.json (text_config's computation-relevant keys; the vision_config abridged).
QWEN3_5_35B = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe", "tie_word_embeddings": False,
    "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053, "vision_end_token_id": 248054,
    "text_config": {
        "model_type": "qwen3_5_moe_text", "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
        "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu",
        "hidden_size": 2048, "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144, "moe_intermediate_size": 512, "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False, "num_attention_heads": 16, "num_experts": 256, "num_experts_per_tok": 8,
        "num_hidden_layers": 40, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                            "rope_theta": 10000000, "partial_rotary_factor": 0.25},
        "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "vocab_size": 248320},
    "vision_config": {"depth": 27, "hidden_size": 1152, "out_hidden_size": 2048, "patch_size": 16},
}
SMALL = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
             linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
             num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
             intermediate_size=48, vocab_size=VOCAB, max_position_embeddings=4096)


def small_next(**kw):
    c = copy.deepcopy(QWEN3_NEXT_80B)
    c.update(SMALL, eos_token_id=VOCAB - 1, bos_token_id=VOCAB - 2)
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def small_35(**kw):
    c = copy.deepcopy(QWEN3_5_35B)
    tc = c["text_config"]
    tc.update({k: v for k, v in SMALL.items() if k != "intermediate_size"}, eos_token_id=VOCAB - 1,
              layer_types=["linear_attention"] * 3 + ["full_attention"])
    tc["rope_parameters"]["mrope_section"] = [2, 1, 1]
    tc.update(kw)
    c["text_config"] = {k: v for k, v in tc.items() if v is not None}
    return c


def _config_model(work, name, cfg):
    return config_only_model(work, "q3n_cfg_" + name, cfg)


# ----------------------------------------------------------------------------------------------------

def known_answer_tests_qwen3_next(t):
    sig = lambda z: 1.0 / (1.0 + math.exp(-z))  # noqa: E731
    # Zero-centred RMSNorm: x = [1 2 3 4] (mean x^2 = 7.5), w = [0 1 -.5 -2] -> factors 1, 2, .5, -1.
    inv = 1 / math.sqrt(7.5 + 1e-6)
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    t.close(q3n.zc_rms_norm(x, np.array([0, 1, -0.5, -2], dtype=np.float32), 1e-6),
            [[inv, 4 * inv, 1.5 * inv, -4 * inv]], "zero-centred rms_norm: weight 1 + w")
    # Gated RMSNorm: x = [3 4] (mean x^2 12.5), w = [1 2] (as stored), z = [0 1]: silu(0) = 0.
    got = q3n.gated_rms_norm(np.array([[3, 4]], dtype=np.float32), np.array([[0, 1]], dtype=np.float32),
                             np.array([1, 2], dtype=np.float32), 1e-6)
    t.close(got, [[0.0, 8 / math.sqrt(12.5 + 1e-6) * sig(1.0)]], "gated rms_norm: norm(x) * w * silu(z)")
    t.close(q3n.l2norm(np.array([3, 4], dtype=np.float32)), [3 / math.sqrt(25 + 1e-6), 4 / math.sqrt(25 + 1e-6)],
            "l2norm with eps inside the sum")
    t.close(q3n.softplus(np.array([0, 30, -30], dtype=np.float32)), [math.log(2), 30, math.log1p(math.exp(-30))],
            "softplus (threshold 20)", atol=1e-20)
    # Causal conv1d, K = 3, w = [1 2 3] (w[K-1] multiplies the current input): x = [1 0 0 5] -> pre-activations
    # [3, 2, 1, 15]; carrying the state across single steps gives the same.
    w = np.array([[1, 2, 3]], dtype=np.float32)
    xs = np.array([[1], [0], [0], [5]], dtype=np.float32)
    out, st = q3n.causal_conv1d_silu(xs, w)
    t.close(out[:, 0], [v * sig(v) for v in (3, 2, 1, 15)], "causal conv1d (kernel 3) + silu")
    t.check(st.tolist() == [[0.0], [5.0]], f"conv state = the last K-1 inputs (got {st.tolist()})")
    o1, s1 = q3n.causal_conv1d_silu(xs[:2], w)
    steps = [o1]
    for r in range(2, 4):
        o, s1 = q3n.causal_conv1d_silu(xs[r:r + 1], w, s1)
        steps.append(o)
    t.check(np.array_equal(np.concatenate(steps), out), "conv: prefill 2 then 2 decode steps == one pass")

    # Gated delta rule by hand (one head, dk = dv = 2): step 1 g = ln .5, beta .5, k = [1 0], v = [2 4], q = [1 0]:
    # S = k (beta v)^T = [[1 2] [0 0]], o = [1 2]. Step 2 g = ln .5, beta 1, k = [.6 .8], v = [1 1], q = [0 1]:
    # S = .5 S = [[.5 1] [0 0]], S^T k = [.3 .6], delta = [.7 .4], S += k delta^T = [[.92 1.24] [.56 .32]],
    # o = S^T q = [.56 .32].
    q = np.array([[[1, 0], [0, 1]]], dtype=np.float32)
    k = np.array([[[1, 0], [0.6, 0.8]]], dtype=np.float32)
    v = np.array([[[2, 4], [1, 1]]], dtype=np.float32)
    g = np.log(np.array([[0.5, 0.5]], dtype=np.float32))
    beta = np.array([[0.5, 1.0]], dtype=np.float32)
    want_o, want_s = [[[1, 2], [0.56, 0.32]]], [[[0.92, 1.24], [0.56, 0.32]]]
    o, s = q3n.gated_delta_recurrent(q, k, v, g, beta)
    t.close(o, want_o, "gated delta rule (recurrent): two steps by hand")
    t.close(s, want_s, "gated delta rule (recurrent): final state by hand")
    for c in (1, 2, 64):
        o, s = q3n.gated_delta_chunked(q, k, v, g, beta, chunk=c)
        t.close(o, want_o, f"gated delta rule (chunk {c}): two steps by hand")
        t.close(s, want_s, f"gated delta rule (chunk {c}): final state by hand")

    # Chunked == recurrent on 40 random tokens (3 heads, dk 8, dv 6), chunk 16 (40 is not a multiple), 7, 64,
    # and from a non-zero initial state; prefill 25 (chunked) then 15 recurrent steps from its state == one pass.
    rng = np.random.default_rng(99)
    H, S_, dk, dv = 3, 40, 8, 6
    q = q3n.l2norm(rng.standard_normal((H, S_, dk)).astype(np.float32)) * np.float32(dk ** -0.5)
    k = q3n.l2norm(rng.standard_normal((H, S_, dk)).astype(np.float32))
    v = rng.standard_normal((H, S_, dv)).astype(np.float32)
    g = (-rng.uniform(0.01, 0.7, (H, S_))).astype(np.float32)
    beta = rng.uniform(0.1, 1.0, (H, S_)).astype(np.float32)
    s0 = rng.standard_normal((H, dk, dv)).astype(np.float32)
    o_r, s_r = q3n.gated_delta_recurrent(q, k, v, g, beta)
    o_r0, s_r0 = q3n.gated_delta_recurrent(q, k, v, g, beta, s0)
    for c in (16, 7, 64):
        o_c, s_c = q3n.gated_delta_chunked(q, k, v, g, beta, chunk=c)
        t.check(_rel(o_c, o_r) < 1e-5 and _rel(s_c, s_r) < 1e-5,
                f"chunked (chunk {c}) vs recurrent: outputs {_rel(o_c, o_r):.2e}, states {_rel(s_c, s_r):.2e}")
        o_c, s_c = q3n.gated_delta_chunked(q, k, v, g, beta, chunk=c, state=s0)
        t.check(_rel(o_c, o_r0) < 1e-5 and _rel(s_c, s_r0) < 1e-5, f"chunked (chunk {c}) from an initial state")
    o_a, s_a = q3n.gated_delta_chunked(q[:, :25], k[:, :25], v[:, :25], g[:, :25], beta[:, :25], chunk=16)
    o_b, s_b = q3n.gated_delta_recurrent(q[:, 25:], k[:, 25:], v[:, 25:], g[:, 25:], beta[:, 25:], s_a)
    t.check(_rel(np.concatenate([o_a, o_b], axis=1), o_r) < 1e-5 and _rel(s_b, s_r) < 1e-5,
            "delta rule: prefill 25 (chunked) then 15 recurrent steps from its state == one pass")
    t.check(_rel(q3n.gated_delta_recurrent(q, k, v, g * 0, beta)[0], o_r) > 1e-2, "the decay g matters")

    # The in_proj_qkvz / in_proj_ba split on a hand-built projection: 2 key heads of dk 1, 4 value heads of dv 1
    # (r = 2): qkvz = 0..11 is [q0 k0 v0 v1 z0 z1 | q1 k1 v2 v3 z2 z3], ba = 0..7 is [b0 b1 a0 a1 | b2 b3 a2 a3].
    class M:
        lin_nk, lin_nv, lin_dk, lin_dv = 2, 4, 1, 1
    qq, kk, vv, zz, bb, aa = q3n.split_qkvz_ba(M, np.arange(12, dtype=np.float32)[None],
                                                np.arange(8, dtype=np.float32)[None])
    got = [a.ravel().tolist() for a in (qq, kk, vv, zz, bb, aa)]
    want = [[0, 6], [1, 7], [2, 3, 8, 9], [4, 5, 10, 11], [0, 1, 4, 5], [2, 3, 6, 7]]
    t.check(got == want, f"qkvz/ba split per key-head group: got {got}, want {want}")


# ----------------------------------------------------------------------------------------------------

def qwen3_next_config_tests(t, work):
    m = _config_model(work, "80b", QWEN3_NEXT_80B)
    full = [i for i, k in enumerate(m.layer_types) if k == "full_attention"]
    t.check(full == list(range(3, 48, 4)), f"80B: full attention every 4th layer from 3 (got {full})")
    t.check((m.hidden, m.n_heads, m.n_kv, m.head_dim, m.rotary_dim, m.lin_nk, m.lin_nv, m.lin_dk, m.lin_dv, m.conv_k,
             m.n_experts, m.top_k, m.moe_inter, m.shared_inter, m.norm_topk, m.prefix, m.fused_experts, m.tie)
            == (2048, 16, 2, 256, 64, 16, 32, 128, 128, 4, 512, 10, 512, 512, True, "model.", False, False),
            "80B: config values")
    t.close(m.inv_freq[[0, 1, 31]], [1.0, 1e7 ** (-2 / 64), 1e7 ** (-62 / 64)], "80B: inv_freq over rotary dim 64")
    names = [n for n in m.expected_names() if n.startswith("model.layers.0.")]
    t.check(len(names) == 2 + 7 + 1 + 512 * 3 + 4, f"80B: {len(names)} tensor names in a linear layer")
    m = _config_model(work, "defaults", {"model_type": "qwen3_next"})
    t.check((m.n_layers, m.vocab, m.rotary_dim, m.theta, m.layer_types[3], m.inter) ==
            (48, 151936, 64, 10000.0, "full_attention", 5632), "Qwen3NextConfig defaults for missing keys")
    m = _config_model(work, "35b", QWEN3_5_35B)
    full = [i for i, k in enumerate(m.layer_types) if k == "full_attention"]
    t.check(full == list(range(3, 40, 4)) and m.prefix == "model.language_model." and m.fused_experts
            and (m.n_experts, m.top_k, m.rotary_dim, m.theta, m.vocab, m.norm_topk) == (256, 8, 64, 1e7, 248320, True),
            "35B-A3B: text_config values, prefix, fused experts, the router always renormalises")
    t.check("model.language_model.layers.0.mlp.experts.gate_up_proj" in m.expected_names(), "35B-A3B: fused names")
    bad = [
        ("act", small_next(hidden_act="gelu"), NotImplementedError, "'gelu'"),
        ("kind", small_next(layer_types=["linear_attention", "sliding_attention"] * 2), ValueError, "sliding_attention"),
        ("types_len", small_next(layer_types=["full_attention"] * 3), ValueError, "layer_types"),
        ("yarn", small_next(rope_scaling={"rope_type": "yarn", "factor": 4.0}), NotImplementedError, "'yarn'"),
        ("heads", small_next(linear_num_key_heads=3, linear_num_value_heads=4), ValueError, "linear_num_value_heads"),
        ("gate_off", small_next(attn_output_gate=False), NotImplementedError, "attn_output_gate"),
        ("k_gt_e", small_next(num_experts_per_tok=9), ValueError, "num_experts_per_tok"),
        ("no_shared", small_next(shared_expert_intermediate_size=0), NotImplementedError, "shared_expert"),
        ("35_norm", small_35(norm_topk_prob=False), NotImplementedError, "norm_topk_prob"),
        ("35_sparse_step", small_35(decoder_sparse_step=2), NotImplementedError, "decoder_sparse_step"),
        ("35_act", small_35(hidden_act="gelu_pytorch_tanh"), NotImplementedError, "hidden_act"),
        ("35_no_text", {"model_type": "qwen3_5_moe"}, ValueError, "text_config"),
        ("35_tie", dict(small_35(tie_word_embeddings=True), tie_word_embeddings=False), ValueError,
         "tie_word_embeddings"),
    ]
    for name, cfg, exc, text in bad:
        try:
            _config_model(work, "bad_" + name, cfg)
            t.check(False, f"qwen3_next config {name}: no error")
        except exc as e:
            t.check(text in str(e), f"qwen3_next config {name}: error {e!r} lacks {text!r}")


# ----------------------------------------------------------------------------------------------------

def synth(m, rng):
    """{name: float32 array} for every expected tensor of m (shapes from q3n.expected_shapes), plus MTP tensors and
    (qwen3_5_moe) vision-tower tensors that the forward must ignore."""
    out = {}
    H = m.hidden
    for name, shape in q3n.expected_shapes(m).items():
        leaf = name.rsplit(".", 2)[-2] if name.endswith((".weight", ".bias")) else name.rsplit(".", 1)[-1]
        if name.endswith("embed_tokens.weight"):
            a = rng.standard_normal(shape)
        elif name.endswith("linear_attn.norm.weight"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)       # the gated norm's weight is not zero-centred
        elif "norm" in leaf:
            a = 0.2 * rng.standard_normal(shape)             # zero-centred: the norm multiplies by 1 + w
        elif leaf == "A_log":
            a = np.log(rng.uniform(0.05, 1.5, shape))
        elif leaf == "dt_bias":
            a = 0.5 * rng.standard_normal(shape)
        elif leaf == "conv1d":
            a = 0.7 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.2 * rng.standard_normal(shape)
        elif name.endswith("mlp.gate.weight"):
            a = 3.0 * rng.standard_normal(shape) / math.sqrt(H)
        else:
            a = rng.standard_normal(shape) / math.sqrt(shape[-1])
        out[name] = a.astype(np.float32)
    extra = {"mtp.fc.weight": (H, 2 * H), "mtp.norm.weight": (H,), "mtp.pre_fc_norm_embedding.weight": (H,),
             "mtp.pre_fc_norm_hidden.weight": (H,), "mtp.layers.0.input_layernorm.weight": (H,),
             "mtp.layers.0.self_attn.q_proj.weight": (2 * m.n_heads * m.head_dim, H),
             "mtp.layers.0.mlp.experts.0.gate_proj.weight": (m.moe_inter, H)}
    if m.type == "qwen3_5_moe":
        extra.update({"model.visual.patch_embed.proj.weight": (16, 3, 2, 4, 4), "model.visual.merger.norm.weight": (16,)})
    for name, shape in extra.items():
        out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def model_configs():
    return [
        ("qwen3_next/80B shrunk (3 linear + 1 full from full_attention_interval, 2/4 linear heads, top-2)",
         small_next(layer_types=None)),
        ("qwen3_next/attention_bias+mlp_only [1]+no norm_topk+tied+r 1+legacy layer names+partial .5",
         small_next(layer_types=["mamba", "mamba", "attention", "mamba"], attention_bias=True, mlp_only_layers=[1],
                    norm_topk_prob=False, tie_word_embeddings=True, linear_num_value_heads=2, rope_theta=None,
                    partial_rotary_factor=None, rope_scaling=None,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5})),
        ("qwen3_5_moe/35B-A3B shrunk (text_config, model.language_model., fused experts, vision + mtp)", small_35()),
    ]


def _gate_off_check(t, label, m):
    """A gate of -inf zeroes the gated attention: with q_proj.bias's gate half at -1e30 the first full layer
    outputs o_proj.bias alone (vectorised and token-by-token)."""
    i = m.layer_types.index("full_attention")
    p = f"{m.prefix}layers.{i}.self_attn."
    b = np.array(m.ckpt[p + "q_proj.bias"]).reshape(m.n_heads, 2, m.head_dim)
    b[:, 1] = -1e30
    m.ckpt._cache[p + "q_proj.bias"] = b.reshape(-1)
    x = np.random.default_rng(5).standard_normal((3, m.hidden)).astype(np.float32)
    got = q3n.full_attention(m, i, x, np.arange(3))
    ob = m.ckpt[p + "o_proj.bias"]
    t.check(np.allclose(got, np.broadcast_to(ob, got.shape), atol=1e-6), f"{label}: gate -inf zeroes the attention")
    with np.errstate(over="ignore"):
        nv = ref.NaiveRunner(m)._gated_attn_token(i, x[0].astype(np.float64), 0.0, ([], []))
    t.check(np.allclose(nv, ob, atol=1e-6), f"{label}: gate -inf zeroes the attention (token by token)")


def qwen3_next_model_tests(t, work, archs=q3n.TYPES):
    from check_logits_selftest import write_checkpoint   # imported here: check_logits_selftest imports this module
    log("qwen3_next / qwen3_5_moe model checks on self-written HF-layout checkpoints")
    rng = np.random.default_rng(2468)
    ids = [int(v) for v in rng.integers(0, VOCAB, size=SEQ)]
    for label, cfg in model_configs():
        if cfg["model_type"] not in archs:
            continue
        t0 = time.time()
        d1 = os.path.join(work, label.split(" ")[0].replace("/", "__") + f"_{len(os.listdir(work))}")
        oracle = _config_model(work, "oracle_" + os.path.basename(d1), cfg)
        tensors = synth(oracle, rng)
        write_checkpoint(d1, cfg, tensors)
        m = ref.Model(d1)
        m.gdn_chunk = 16                      # 40 tokens: two full chunks and a partial one
        try:
            m.check_layout()
            t.check(True, "layout")
        except ValueError as e:
            t.check(False, f"{label}: {e}")
        full = m.forward(ids)
        scale = float(np.max(np.abs(full)))
        t.check(full.shape == (SEQ, VOCAB) and bool(np.all(np.isfinite(full))), f"{label}: logits shape / finite")
        unused = [n for n in m.ckpt.unused() if not m.is_extra_layer_name(n)]
        t.check(not unused, f"{label}: tensors never read: {unused[:6]}")
        extra = [n for n in m.ckpt.where if m.is_extra_layer_name(n)]
        t.check(len(extra) >= 7 and not any(n in m.ckpt.used for n in extra), f"{label}: MTP / vision tensors read")
        naive = m.forward(ids, naive=True)
        err = _rel(naive, full)
        t.check(err <= 1e-5, f"{label}: vectorised vs token-by-token rel err {err:.2e}")
        m.gdn_chunk = 64
        cerr = _rel(m.forward(ids), full)
        t.check(cerr <= 1e-5, f"{label}: chunk 64 vs chunk 16 rel err {cerr:.2e}")
        m.gdn_chunk = 16
        # A prefix of 17 tokens ends in a chunk of 1 (the full pass: of 16); fp32 summation orders differ by ~1e-6.
        perr = _rel(m.forward(ids[:17]), full[:17])
        t.check(perr <= 1e-5, f"{label}: prefix logits differ from the first rows by {perr:.2e}")
        # Causality: the earlier rows keep their values. Not their bits: the MoE layers multiply each expert's
        # tokens as one matrix (x[tok]), so a last token routed elsewhere changes an expert's row count, and
        # OpenBLAS picks its sgemm kernel and blocking by shape (on a Zen 2 the earlier rows moved by 1.05e-6
        # relative; Zen 5 and Intel by less): rounding, where a leak of the token would move them by its whole effect.
        alt = ids[:-1] + [(ids[-1] + 1) % VOCAB]
        aerr = _rel(m.forward(alt)[:-1], full[:-1])
        t.check(aerr <= 1e-5, f"{label}: changing the last token changed earlier rows by {aerr:.2e}")
        write_checkpoint(d1 + "__sharded", cfg, tensors, shards=3)
        sh = ref.Model(d1 + "__sharded")
        sh.gdn_chunk = 16
        t.check(np.array_equal(sh.forward(ids), full), f"{label}: sharded checkpoint logits differ")
        emb = m.ckpt[m.prefix + "embed_tokens.weight"]
        t.check(np.all((emb.view(np.uint32) & 0xFFFF) == 0), f"{label}: upcast bf16 has nonzero low bits")
        if m.attention_bias:
            _gate_off_check(t, label, m)
        log(f"  {label[:72]:<72} max|logit| {scale:7.3f}  naive rel {err:.1e}  ({time.time() - t0:.1f}s)")


def qwen3_next_tests(t, work, archs=q3n.TYPES):
    qwen3_next_config_tests(t, work)
    qwen3_next_model_tests(t, work, archs)
