"""qwen3_next (Qwen3NextForCausalLM: Qwen3-Next-80B-A3B) and qwen3_5_moe (the text model of
Qwen3_5MoeForConditionalGeneration: Qwen3.5-35B-A3B) for the numpy reference (moe_reference.py).

Written from transformers' modeling_qwen3_next.py / configuration_qwen3_next.py and
modeling_qwen3_5_moe.py / modular_qwen3_5_moe.py. What these hybrid models bring:
  - `layer_types`: "linear_attention" (Gated DeltaNet) or "full_attention"; without the key, layer i is full
    iff (i + 1) % full_attention_interval == 0 (default 4);
  - RMSNorm with a zero-centred weight: x * rsqrt(mean(x^2) + eps) * (1 + w) (input / post-attention / final
    norms and the per-head q/k norms);
  - full attention with an output gate: q_proj gives [heads, 2 * head_dim] per token, the first head_dim of
    each head is the query, the second the gate; out = o_proj(attn * sigmoid(gate)); q/k RMSNorm per head;
    NeoX RoPE on the first int(head_dim * partial_rotary_factor) dims (0.25 by default);
  - Gated DeltaNet: q, k, v, z, b, a projected from x (qwen3_next: in_proj_qkvz / in_proj_ba interleaved per
    key-head group; qwen3_5_moe: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a in plain order); a causal
    depthwise conv1d (kernel linear_conv_kernel_dim, no bias) + SiLU over the channels [q | k | v]; q, k
    L2-normalised (eps 1e-6 inside the sum), q scaled by head_k_dim^-0.5; key head j serves value heads
    j*r .. j*r+r-1 (r = value heads / key heads); beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias);
    per value head the state S [dk, dv]: S *= exp(g); delta = beta * (v - S^T k); S += k delta^T; o = S^T q;
    then RMSNorm(o) * weight * silu(z) per value head (weight not zero-centred) and out_proj;
  - MoE: softmax router, top-k, renormalised iff norm_topk_prob (qwen3_5_moe: always); a shared expert
    weighted by sigmoid(shared_expert_gate(x)); qwen3_next experts per expert
    (mlp.experts.{j}.{gate,up,down}_proj), qwen3_5_moe fused (mlp.experts.gate_up_proj [E, 2I, H]: gate rows
    first, mlp.experts.down_proj [E, H, I]);
  - MTP tensors (`mtp.*`) and, for qwen3_5_moe, the vision tower (`model.visual.*`) are never read.
The vectorised pass runs the chunked form of the delta rule (chunk size `Model.gdn_chunk`, 64 as
transformers' torch_chunk_gated_delta_rule); gated_delta_recurrent is the token-by-token form.
"""

import numpy as np

from moe_reference_ops import (F32, apply_partial_rope, attention, linear, rms_norm, rope_cos_sin, rope_inv_freq,
                               select_experts, sigmoid, silu, softmax)

TYPES = ("qwen3_next", "qwen3_5_moe")
LAYER_KINDS = ("linear_attention", "full_attention")
LEGACY_KINDS = {"attention": "full_attention", "mamba": "linear_attention"}   # transformers' remap
# Qwen3NextConfig's defaults (transformers 4.57 / 5.x) for keys a config.json may omit (null = missing).
QWEN3_NEXT_DEFAULTS = dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=48,
                           num_attention_heads=16, num_key_value_heads=2, hidden_act="silu", rms_norm_eps=1e-6,
                           tie_word_embeddings=False, rope_theta=10000.0, partial_rotary_factor=0.25,
                           attention_bias=False, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                           linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
                           decoder_sparse_step=1, moe_intermediate_size=512, shared_expert_intermediate_size=512,
                           num_experts_per_tok=10, num_experts=512, norm_topk_prob=True, full_attention_interval=4)
# Qwen3_5MoeTextConfig: Qwen3NextConfig's, with these replaced (intermediate_size, decoder_sparse_step,
# norm_topk_prob and mlp_only_layers do not exist there: every layer is MoE, the router always renormalises).
QWEN3_5_MOE_DEFAULTS = dict(QWEN3_NEXT_DEFAULTS, vocab_size=248320, num_hidden_layers=40, num_experts_per_tok=8,
                            num_experts=256)
L2NORM_EPS = 1e-6


def _val(c, key, d):
    v = c.get(key)
    return d[key] if v is None else v


def _int(c, key, d, lo=0):
    v = _val(c, key, d)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{key} must be an integer >= {lo}, got {v!r}")
    return v


def init(m, c):
    """Sets Model m's attributes from config.json c (qwen3_5_moe: its text_config)."""
    t = m.type
    if t == "qwen3_5_moe":
        tc = c.get("text_config")
        if not isinstance(tc, dict):
            raise ValueError("qwen3_5_moe: config.json has no text_config")
        if tc.get("model_type", "qwen3_5_moe_text") != "qwen3_5_moe_text":
            raise ValueError(f"qwen3_5_moe: text_config.model_type {tc.get('model_type')!r} (want qwen3_5_moe_text)")
        for key in ("decoder_sparse_step", "mlp_only_layers"):   # intermediate_size: not read
            if tc.get(key) not in (None, 1, []):
                raise NotImplementedError(f"qwen3_5_moe {key} {tc[key]!r}: every Qwen3.5-MoE layer is sparse")
        if tc.get("norm_topk_prob") is False:
            raise NotImplementedError("qwen3_5_moe norm_topk_prob false: its router always renormalises the top-k")
        top_tie, text_tie = c.get("tie_word_embeddings"), tc.get("tie_word_embeddings")
        if top_tie is not None and text_tie is not None and bool(top_tie) != bool(text_tie):
            raise ValueError(f"qwen3_5_moe: tie_word_embeddings {top_tie!r} differs from text_config's {text_tie!r}")
        d, prefix = QWEN3_5_MOE_DEFAULTS, "model.language_model."
        c = dict(tc, tie_word_embeddings=text_tie if text_tie is not None else top_tie)
    else:
        d, prefix = QWEN3_NEXT_DEFAULTS, "model."
    m.prefix = prefix
    m.hidden = _int(c, "hidden_size", d, 1)
    m.n_layers = _int(c, "num_hidden_layers", d, 1)
    m.n_heads = _int(c, "num_attention_heads", d, 1)
    m.n_kv = _int(c, "num_key_value_heads", d, 1)
    if m.n_heads % m.n_kv:
        raise ValueError(f"{t}: num_attention_heads {m.n_heads} is not a multiple of num_key_value_heads {m.n_kv}")
    m.head_dim = _int(c, "head_dim", d, 1)
    m.vocab = _int(c, "vocab_size", d, 1)
    m.eps = float(_val(c, "rms_norm_eps", d))
    m.tie = bool(_val(c, "tie_word_embeddings", d))
    act = _val(c, "hidden_act", d)
    if act != "silu":
        raise NotImplementedError(f"{t} hidden_act {act!r} (only silu: the experts, the conv1d and the gated norm)")
    if c.get("attn_output_gate") is False:
        raise NotImplementedError(f"{t} attn_output_gate false: transformers always gates the full attention")
    m.attention_bias = bool(_val(c, "attention_bias", d))
    m.scale = m.head_dim ** -0.5
    # Gated DeltaNet
    m.lin_nk = _int(c, "linear_num_key_heads", d, 1)
    m.lin_nv = _int(c, "linear_num_value_heads", d, 1)
    m.lin_dk = _int(c, "linear_key_head_dim", d, 1)
    m.lin_dv = _int(c, "linear_value_head_dim", d, 1)
    m.conv_k = _int(c, "linear_conv_kernel_dim", d, 1)
    if m.lin_nv % m.lin_nk:
        raise ValueError(f"{t}: linear_num_value_heads {m.lin_nv} is not a multiple of linear_num_key_heads {m.lin_nk}")
    m.gdn_chunk = 64
    # Layers
    kinds = c.get("layer_types")
    if kinds is None:
        interval = _int(c, "full_attention_interval", d, 1)
        kinds = [LAYER_KINDS[1] if (i + 1) % interval == 0 else LAYER_KINDS[0] for i in range(m.n_layers)]
    kinds = [LEGACY_KINDS.get(k, k) for k in kinds]
    if len(kinds) != m.n_layers or any(k not in LAYER_KINDS for k in kinds):
        raise ValueError(f"{t} layer_types {kinds!r}: want {m.n_layers} of {LAYER_KINDS}")
    m.layer_types = kinds
    # MoE
    m.n_experts = _int(c, "num_experts", d)
    m.top_k = _int(c, "num_experts_per_tok", d, 1)
    m.moe_inter = _int(c, "moe_intermediate_size", d, 1)
    m.shared_inter = _int(c, "shared_expert_intermediate_size", d)
    m.fused_experts = t == "qwen3_5_moe"
    if t == "qwen3_5_moe":
        m.norm_topk, m.sparse_step, m.mlp_only, m.inter = True, 1, set(), None
        if m.n_experts < 1:
            raise ValueError("qwen3_5_moe: num_experts must be >= 1 (every layer is MoE)")
    else:
        m.norm_topk = bool(_val(c, "norm_topk_prob", d))
        m.sparse_step = _int(c, "decoder_sparse_step", d, 1)
        m.mlp_only = set(int(v) for v in (c.get("mlp_only_layers") or []))
        m.inter = _int(c, "intermediate_size", d, 1)
    if any(is_moe_layer(m, i) for i in range(m.n_layers)) and not (1 <= m.top_k <= m.n_experts):
        raise ValueError(f"{t}: num_experts_per_tok {m.top_k} must be in [1, num_experts {m.n_experts}]")
    if m.shared_inter < 1:
        raise NotImplementedError(f"{t}: shared_expert_intermediate_size {m.shared_inter} (the block always has one)")
    _init_rope(m, c, d)


def _init_rope(m, c, d):
    """rope_parameters (transformers 5; qwen3_5_moe) or rope_scaling (4.x) with rope_theta and
    partial_rotary_factor inside, else the top-level keys, else the defaults (1e4, 0.25). Only the default
    rope type; qwen3_5_moe's mrope_section / mrope_interleaved change nothing for text, whose three position
    rows (t, h, w) are equal."""
    rp = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
    kind = rp.get("rope_type", rp.get("type")) or "default"
    if kind != "default":
        raise NotImplementedError(f"{m.type} rope type {kind!r} (only default)")
    m.theta = float(rp.get("rope_theta") or c.get("rope_theta") or d["rope_theta"])
    partial = rp.get("partial_rotary_factor", c.get("partial_rotary_factor"))
    partial = d["partial_rotary_factor"] if partial is None else float(partial)
    rd = int(m.head_dim * partial)
    if rd <= 0 or rd % 2 or rd > m.head_dim:
        raise NotImplementedError(f"{m.type}: rotary dim int({m.head_dim} * {partial}) = {rd} must be even, > 0")
    m.rotary_dim = rd
    m.inv_freq = rope_inv_freq(rd, m.theta)
    m.rope_linear_factor = 1.0
    m.rope_mscale = 1.0


def is_moe_layer(m, i):
    return i not in m.mlp_only and m.n_experts > 0 and (i + 1) % m.sparse_step == 0


def is_extra_name(m, name):
    """MTP tensors (`mtp.*`, transformers' _keys_to_ignore_on_load_unexpected) and qwen3_5_moe's vision tower."""
    return name.startswith("mtp.") or (m.type == "qwen3_5_moe" and name.startswith("model.visual."))


def expected_shapes(m):
    """{name: shape} of the HF checkpoint for this config."""
    P, H = m.prefix, m.hidden
    kd, vd = m.lin_nk * m.lin_dk, m.lin_nv * m.lin_dv
    out = {P + "embed_tokens.weight": (m.vocab, H), P + "norm.weight": (H,)}
    if not m.tie:
        out["lm_head.weight"] = (m.vocab, H)
    for i in range(m.n_layers):
        p = f"{P}layers.{i}."
        out[p + "input_layernorm.weight"] = (H,)
        out[p + "post_attention_layernorm.weight"] = (H,)
        if m.layer_types[i] == "linear_attention":
            a = p + "linear_attn."
            if m.type == "qwen3_next":
                out[a + "in_proj_qkvz.weight"] = (2 * kd + 2 * vd, H)
                out[a + "in_proj_ba.weight"] = (2 * m.lin_nv, H)
            else:
                out[a + "in_proj_qkv.weight"] = (2 * kd + vd, H)
                out[a + "in_proj_z.weight"] = (vd, H)
                out[a + "in_proj_b.weight"] = (m.lin_nv, H)
                out[a + "in_proj_a.weight"] = (m.lin_nv, H)
            out[a + "conv1d.weight"] = (2 * kd + vd, 1, m.conv_k)
            out[a + "dt_bias"] = (m.lin_nv,)
            out[a + "A_log"] = (m.lin_nv,)
            out[a + "norm.weight"] = (m.lin_dv,)
            out[a + "out_proj.weight"] = (H, vd)
        else:
            a = p + "self_attn."
            qd, kvd = m.n_heads * m.head_dim, m.n_kv * m.head_dim
            for name, o, n in (("q_proj", 2 * qd, H), ("k_proj", kvd, H), ("v_proj", kvd, H), ("o_proj", H, qd)):
                out[a + name + ".weight"] = (o, n)
                if m.attention_bias:
                    out[a + name + ".bias"] = (o,)
            out[a + "q_norm.weight"] = (m.head_dim,)
            out[a + "k_norm.weight"] = (m.head_dim,)
        if is_moe_layer(m, i):
            E, I, S = m.n_experts, m.moe_inter, m.shared_inter
            out[p + "mlp.gate.weight"] = (E, H)
            if m.fused_experts:
                out[p + "mlp.experts.gate_up_proj"] = (E, 2 * I, H)
                out[p + "mlp.experts.down_proj"] = (E, H, I)
            else:
                for e in range(E):
                    out[f"{p}mlp.experts.{e}.gate_proj.weight"] = (I, H)
                    out[f"{p}mlp.experts.{e}.up_proj.weight"] = (I, H)
                    out[f"{p}mlp.experts.{e}.down_proj.weight"] = (H, I)
            out[p + "mlp.shared_expert.gate_proj.weight"] = (S, H)
            out[p + "mlp.shared_expert.up_proj.weight"] = (S, H)
            out[p + "mlp.shared_expert.down_proj.weight"] = (H, S)
            out[p + "mlp.shared_expert_gate.weight"] = (1, H)
        else:
            out[p + "mlp.gate_proj.weight"] = (m.inter, H)
            out[p + "mlp.up_proj.weight"] = (m.inter, H)
            out[p + "mlp.down_proj.weight"] = (H, m.inter)
    return out


def expected_names(m):
    return list(expected_shapes(m))


def check_shapes(m):
    bad = [f"{n} {m.ckpt.shape(n)} (want {list(s)})" for n, s in expected_shapes(m).items()
           if m.ckpt.has(n) and list(m.ckpt.shape(n)) != list(s)]
    if bad:
        raise ValueError(f"{m.ckpt.dir}: tensor shapes differ from the {m.type} config: {bad[:6]}")


# ----------------------------------------------------------------------------------------------------
# numerical pieces
# ----------------------------------------------------------------------------------------------------

def zc_rms_norm(x, w, eps):
    """Qwen3NextRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), in fp32 (the weight is stored zero-centred)."""
    return rms_norm(x, F32(1.0) + np.asarray(w, dtype=F32), eps)


def gated_rms_norm(x, z, w, eps):
    """Qwen3NextRMSNormGated: RMSNorm(x) * w (w as stored, init ones), then * silu(z); over the last dim."""
    return (rms_norm(x, w, eps) * silu(np.asarray(z, dtype=F32))).astype(F32, copy=False)


def l2norm(x, eps=L2NORM_EPS):
    x = np.asarray(x, dtype=F32)
    return (x * (F32(1.0) / np.sqrt(np.sum(x * x, axis=-1, keepdims=True, dtype=F32) + F32(eps)))).astype(F32)


def softplus(x):
    """torch's F.softplus (beta 1, threshold 20): x above 20, else log(1 + exp(x))."""
    x = np.asarray(x, dtype=F32)
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, F32(20))))).astype(F32)


def causal_conv1d_silu(x, w, state=None):
    """Depthwise causal conv over time then SiLU. x [S, C]; w [C, K] (conv1d.weight [C, 1, K] squeezed);
    state [K-1, C] the inputs before x (zeros if None). out[t, c] = sum_j w[c, j] * xx[t + j, c] with xx the
    state followed by x. Returns (out [S, C], new state = the last K-1 rows of xx)."""
    k = w.shape[1]
    if state is None:
        state = np.zeros((k - 1, x.shape[1]), dtype=F32)
    xx = np.concatenate([state, x], axis=0).astype(F32)
    s = x.shape[0]
    out = np.zeros(x.shape, dtype=F32)
    for j in range(k):
        out += xx[j:j + s] * w[:, j][None, :]
    return silu(out), xx[xx.shape[0] - (k - 1):]


def gated_delta_recurrent(q, k, v, g, beta, state=None):
    """The gated delta rule one token at a time (transformers' torch_recurrent_gated_delta_rule after its
    l2norm and scaling). q, k [H, S, dk] (already normalised and q scaled), v [H, S, dv], g, beta [H, S].
    Returns (o [H, S, dv], final state [H, dk, dv])."""
    h, s, dk = k.shape
    S = np.zeros((h, dk, v.shape[-1]), dtype=F32) if state is None else np.array(state, dtype=F32)
    o = np.zeros(v.shape, dtype=F32)
    for t in range(s):
        S = S * np.exp(g[:, t])[:, None, None]
        kv_mem = np.einsum("hkv,hk->hv", S, k[:, t])
        delta = (v[:, t] - kv_mem) * beta[:, t][:, None]
        S = (S + k[:, t][:, :, None] * delta[:, None, :]).astype(F32)
        o[:, t] = np.einsum("hkv,hk->hv", S, q[:, t])
    return o, S


def gated_delta_chunked(q, k, v, g, beta, chunk=64, state=None):
    """The same rule in chunks of `chunk` tokens (the last may be shorter). Within a chunk, with G the
    cumulative sum of g from the chunk start and S0 the state before it, every update is
    u_t = beta_t (v_t - e^{G_t} S0^T k_t - sum_{j<t} e^{G_t - G_j} (k_t . k_j) u_j): a unit lower triangular
    system (I + A) U = beta (V - e^G K S0), solved by forward substitution. Then
    o_t = e^{G_t} S0^T q_t + sum_{j<=t} e^{G_t - G_j} (q_t . k_j) u_j and
    S_end = e^{G_last} S0 + sum_j e^{G_last - G_j} k_j u_j^T."""
    h, s, dk = k.shape
    dv = v.shape[-1]
    S = np.zeros((h, dk, dv), dtype=F32) if state is None else np.array(state, dtype=F32)
    o = np.zeros(v.shape, dtype=F32)
    for c0 in range(0, s, chunk):
        c1 = min(c0 + chunk, s)
        n = c1 - c0
        qc, kc, vc, bc = q[:, c0:c1], k[:, c0:c1], v[:, c0:c1], beta[:, c0:c1]
        G = np.cumsum(g[:, c0:c1], axis=-1, dtype=F32)                                  # [H, n]
        lower = np.tril(np.ones((n, n), dtype=bool))                                      # j <= t
        diff = np.where(lower[None], G[:, :, None] - G[:, None, :], F32(-np.inf))
        decay = np.exp(diff).astype(F32)                                                  # [H, n(t), n(j)]
        strict = decay * (~np.eye(n, dtype=bool))[None]
        A = bc[:, :, None] * (kc @ kc.transpose(0, 2, 1)) * strict                        # [H, t, j], j < t
        rhs = bc[:, :, None] * (vc - np.exp(G)[:, :, None] * (kc @ S))                    # [H, n, dv]
        U = np.zeros((h, n, dv), dtype=F32)
        for t in range(n):
            U[:, t] = rhs[:, t] - np.einsum("hj,hjv->hv", A[:, t, :t], U[:, :t])
        o[:, c0:c1] = np.exp(G)[:, :, None] * (qc @ S) + ((qc @ kc.transpose(0, 2, 1)) * decay) @ U
        tail = np.exp(G[:, -1:] - G)                                                      # [H, n]
        S = (np.exp(G[:, -1])[:, None, None] * S + (kc * tail[:, :, None]).transpose(0, 2, 1) @ U).astype(F32)
    return o.astype(F32), S


# ----------------------------------------------------------------------------------------------------
# layers (vectorised)
# ----------------------------------------------------------------------------------------------------

def split_qkvz_ba(m, qkvz, ba):
    """qwen3_next's fix_query_key_value_ordering: qkvz [S, nk * (2 dk + 2 r dv)] holds, per key head group j,
    [q_j (dk) | k_j (dk) | v of value heads j*r..j*r+r-1 (r dv) | z of the same (r dv)]; ba [S, nk * 2r] holds
    per group [b of those r value heads | a of them]. Returns q, k [S, nk, dk], v, z [S, nv, dv], b, a [S, nv]."""
    s = qkvz.shape[0]
    nk, dk, dv, r = m.lin_nk, m.lin_dk, m.lin_dv, m.lin_nv // m.lin_nk
    g = qkvz.reshape(s, nk, 2 * dk + 2 * r * dv)
    q, k = g[..., :dk], g[..., dk:2 * dk]
    v = g[..., 2 * dk:2 * dk + r * dv].reshape(s, nk * r, dv)
    z = g[..., 2 * dk + r * dv:].reshape(s, nk * r, dv)
    gb = ba.reshape(s, nk, 2 * r)
    return q, k, v, z, gb[..., :r].reshape(s, nk * r), gb[..., r:].reshape(s, nk * r)


def project_linear_attn(m, a, x):
    """(mixed_qkv [S, 2 kd + vd] in the conv's channel order q | k | v, z [S, nv, dv], b [S, nv], a [S, nv])."""
    W = m.ckpt
    s = x.shape[0]
    if m.type == "qwen3_next":
        q, k, v, z, b, aa = split_qkvz_ba(m, linear(x, W[a + "in_proj_qkvz.weight"]), linear(x, W[a + "in_proj_ba.weight"]))
        mixed = np.concatenate([q.reshape(s, -1), k.reshape(s, -1), v.reshape(s, -1)], axis=-1)
        return mixed, z, b, aa
    z = linear(x, W[a + "in_proj_z.weight"]).reshape(s, m.lin_nv, m.lin_dv)
    return linear(x, W[a + "in_proj_qkv.weight"]), z, linear(x, W[a + "in_proj_b.weight"]), \
        linear(x, W[a + "in_proj_a.weight"])


def linear_attention(m, i, x):
    """Qwen3NextGatedDeltaNet / Qwen3_5MoeGatedDeltaNet over the whole sequence (no cache)."""
    W = m.ckpt
    a = f"{m.prefix}layers.{i}.linear_attn."
    s = x.shape[0]
    nk, nv, dk, dv = m.lin_nk, m.lin_nv, m.lin_dk, m.lin_dv
    mixed, z, b, aa = project_linear_attn(m, a, x)
    mixed, _ = causal_conv1d_silu(mixed, W[a + "conv1d.weight"][:, 0, :])
    kd = nk * dk
    q = l2norm(mixed[:, :kd].reshape(s, nk, dk)) * F32(dk ** -0.5)
    k = l2norm(mixed[:, kd:2 * kd].reshape(s, nk, dk))
    v = mixed[:, 2 * kd:].reshape(s, nv, dv)
    beta = sigmoid(b)
    g = (-np.exp(W[a + "A_log"].astype(F32)) * softplus(aa + W[a + "dt_bias"])).astype(F32)
    r = nv // nk
    q, k = np.repeat(q, r, axis=1), np.repeat(k, r, axis=1)           # value head h reads key head h // r
    o, _ = gated_delta_chunked(q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2), g.T, beta.T,
                               m.gdn_chunk)
    o = gated_rms_norm(o.transpose(1, 0, 2), z, W[a + "norm.weight"], m.eps)       # [S, nv, dv]
    return linear(o.reshape(s, nv * dv), W[a + "out_proj.weight"])


def _bias(m, name):
    return m.ckpt[name] if m.attention_bias else None


def full_attention(m, i, x, positions):
    """Qwen3NextAttention: gated GQA with per-head zero-centred q/k norms and partial NeoX RoPE."""
    W = m.ckpt
    a = f"{m.prefix}layers.{i}.self_attn."
    s, H, Hkv, D = x.shape[0], m.n_heads, m.n_kv, m.head_dim
    qg = linear(x, W[a + "q_proj.weight"], _bias(m, a + "q_proj.bias")).reshape(s, H, 2 * D)
    q, gate = qg[..., :D], qg[..., D:].reshape(s, H * D)
    k = linear(x, W[a + "k_proj.weight"], _bias(m, a + "k_proj.bias")).reshape(s, Hkv, D)
    v = linear(x, W[a + "v_proj.weight"], _bias(m, a + "v_proj.bias")).reshape(s, Hkv, D)
    q = zc_rms_norm(q, W[a + "q_norm.weight"], m.eps).transpose(1, 0, 2)
    k = zc_rms_norm(k, W[a + "k_norm.weight"], m.eps).transpose(1, 0, 2)
    cos, sin = rope_cos_sin(np.asarray(positions, dtype=np.float64), m.inv_freq)
    q, k = apply_partial_rope(q, cos, sin), apply_partial_rope(k, cos, sin)
    o = attention(q, k, v.transpose(1, 0, 2), m.scale) * sigmoid(gate)
    return linear(o, W[a + "o_proj.weight"], _bias(m, a + "o_proj.bias"))


def _swiglu(x, gate_w, up_w, down_w):
    return linear(silu(linear(x, gate_w)) * linear(x, up_w), down_w)


def expert_weights(m, p, e):
    """(gate [I, H], up [I, H], down [H, I]) of expert e of layer prefix p."""
    W = m.ckpt
    if m.fused_experts:
        gu, dn = W[p + "mlp.experts.gate_up_proj"], W[p + "mlp.experts.down_proj"]
        return gu[e, :m.moe_inter], gu[e, m.moe_inter:], dn[e]
    e_ = f"{p}mlp.experts.{e}."
    return W[e_ + "gate_proj.weight"], W[e_ + "up_proj.weight"], W[e_ + "down_proj.weight"]


def mlp(m, i, x):
    W = m.ckpt
    p = f"{m.prefix}layers.{i}."
    if not is_moe_layer(m, i):
        return _swiglu(x, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"], W[p + "mlp.down_proj.weight"])
    probs = softmax(linear(x, W[p + "mlp.gate.weight"]), axis=-1)
    idx, w = select_experts("qwen3_moe", probs, m.top_k, m.norm_topk)
    out = np.zeros_like(x)
    for e in range(m.n_experts):
        tok, slot = np.nonzero(idx == e)
        if tok.size:
            np.add.at(out, tok, _swiglu(x[tok], *expert_weights(m, p, e)) * w[tok, slot][:, None])
    sh = p + "mlp.shared_expert."
    shared = _swiglu(x, W[sh + "gate_proj.weight"], W[sh + "up_proj.weight"], W[sh + "down_proj.weight"])
    return (out + sigmoid(linear(x, W[p + "mlp.shared_expert_gate.weight"])) * shared).astype(F32)


def embed(m, ids):
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError("ids must be a non-empty 1-D sequence")
    if ids.min() < 0 or ids.max() >= m.vocab:
        raise ValueError(f"token id out of range [0, {m.vocab})")
    return m.ckpt[m.prefix + "embed_tokens.weight"][ids].astype(F32)


def lm_head(m, h):
    W = m.ckpt
    h = zc_rms_norm(h, W[m.prefix + "norm.weight"], m.eps)
    return linear(h, W[m.prefix + "embed_tokens.weight"] if m.tie else W["lm_head.weight"])


def forward(m, ids):
    check_shapes(m)
    W = m.ckpt
    h = embed(m, ids)
    positions = np.arange(h.shape[0])
    for i in range(m.n_layers):
        p = f"{m.prefix}layers.{i}."
        x = zc_rms_norm(h, W[p + "input_layernorm.weight"], m.eps)
        if m.layer_types[i] == "linear_attention":
            h = h + linear_attention(m, i, x)
        else:
            h = h + full_attention(m, i, x, positions)
        h = h + mlp(m, i, zc_rms_norm(h, W[p + "post_attention_layernorm.weight"], m.eps))
    return lm_head(m, h)
