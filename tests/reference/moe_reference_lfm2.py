"""lfm2_moe (Lfm2MoeForCausalLM: Liquid AI LFM2-MoE, e.g. LFM2-8B-A1B, LFM2-24B-A2B) for the numpy reference
(moe_reference.py).

Written from transformers' modeling_lfm2_moe.py / configuration_lfm2_moe.py (Lfm2MoeConfig, Lfm2MoeShortConv's
slow_forward, Lfm2MoeAttention, Lfm2MoeSparseMoeBlock.route_tokens_to_experts, Lfm2MoeMLP, Lfm2MoeDecoderLayer,
Lfm2MoeModel). What this type is:
  - `layer_types`: "full_attention" or "conv" per layer (transformers takes anything but "full_attention" as conv;
    here any other value is refused); without layer_types, `full_attn_idxs` (the attention layers' indices, the
    original LFM2 key) builds it; neither = refused (transformers' Lfm2MoeDecoderLayer would index None);
  - every layer: h += operator(operator_norm(h)); h += feed_forward(ffn_norm(h)); after the last layer
    `model.embedding_norm` (the final norm, despite its name), then lm_head (tied to embed_tokens by default;
    the original key `tie_embedding`, when present, wins over tie_word_embeddings);
  - conv layers (Lfm2MoeShortConv): in_proj [3H, H] (+ bias iff conv_bias) gives, in this order, B, C, x (H each);
    Bx = B * x goes through a depthwise conv over time (conv.weight [H, 1, L], L = conv_L_cache, + bias iff
    conv_bias): torch's Conv1d with padding L-1 on both sides, the output cut to the FIRST S positions (a causal
    cross-correlation, zeros before the first token, weight[:, 0, L-1] multiplies the current token); no
    activation; y = C * conv_out; out_proj [H, H] (+ bias iff conv_bias);
  - attention layers (Lfm2MoeAttention): q/k/v [heads * D, H] (no biases), head_dim D = config head_dim if set,
    else hidden / heads; q_layernorm / k_layernorm (RMSNorm over D, eps norm_eps) per head BEFORE the rotary
    embedding; NeoX rotate-half RoPE over the whole D (rope_theta from rope_parameters, else the top-level key,
    else 1e6); causal GQA softmax with scale D^-0.5; out_proj [H, heads * D];
  - feed_forward: layers < num_dense_layers a SwiGLU MLP w2(silu(w1 x) * w3 x) of intermediate_size; the others
    Lfm2MoeSparseMoeBlock: s = sigmoid(gate(x)) [E]; the top_k experts of s + expert_bias (iff use_expert_bias;
    a float32 buffer [E] in the checkpoint) else of s; their weights are the UNBIASED s, divided by
    (sum + 1e-6) iff norm_topk_prob, then times routed_scaling_factor; each expert e the same SwiGLU with
    feed_forward.experts.e.{w1, w3} [moe_I, H], w2 [H, moe_I] (the released checkpoints' per-expert names);
  - every RMSNorm: x * rsqrt(mean(x^2) + norm_eps) * weight.
The token-by-token pass in moe_reference_naive.py (forward_lfm2) has its own float64 conv state and KV cache.
"""

import numpy as np

from moe_reference_ops import (F32, apply_rope, attention, linear, rms_norm, rope_cos_sin, rope_inv_freq,
                               select_experts_lfm2, sigmoid, silu)

TYPES = ("lfm2_moe",)
LAYER_KINDS = ("full_attention", "conv")
# Lfm2MoeConfig defaults for keys a config.json may omit (null counts as missing here). layer_types has no usable
# default (see above); head_dim has none (hidden / heads).
LFM2_DEFAULTS = dict(vocab_size=65536, hidden_size=2048, intermediate_size=7168, moe_intermediate_size=1792,
                     num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, norm_eps=1e-5,
                     conv_bias=False, conv_L_cache=3, num_dense_layers=2, num_experts_per_tok=4, num_experts=32,
                     use_expert_bias=True, routed_scaling_factor=1.0, norm_topk_prob=True, tie_word_embeddings=True,
                     rope_theta=1e6, hidden_act="silu")
ROUTER_EPS = 1e-6   # route_tokens_to_experts: w / (w.sum() + 1e-6)
EXPERT_BIAS = "feed_forward.expert_bias"


def _val(c, key):
    v = c.get(key)
    return LFM2_DEFAULTS[key] if v is None else v


def _int(c, key, lo=0):
    v = _val(c, key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"lfm2_moe: {key} must be an integer >= {lo}, got {v!r}")
    return v


def _bool(c, key, v=None):
    v = _val(c, key) if v is None else v
    if not isinstance(v, bool):
        raise ValueError(f"lfm2_moe: {key} must be true or false, got {v!r}")
    return v


def init(m, c):
    """Sets the attributes the lfm2_moe forward, the naive pass and the layout check read, from a config.json."""
    t = m.type
    m.hidden = _int(c, "hidden_size", lo=1)
    m.n_layers = _int(c, "num_hidden_layers", lo=1)
    m.n_heads = _int(c, "num_attention_heads", lo=1)
    m.n_kv = _int(c, "num_key_value_heads", lo=1)
    m.vocab = _int(c, "vocab_size", lo=1)
    if m.n_heads % m.n_kv:
        raise ValueError(f"{t}: num_attention_heads {m.n_heads} is not a multiple of num_key_value_heads {m.n_kv}")
    hd = c.get("head_dim")
    if hd is None:
        if m.hidden % m.n_heads:
            raise ValueError(f"{t}: hidden_size {m.hidden} is not a multiple of num_attention_heads {m.n_heads} "
                             f"(and no head_dim)")
        hd = m.hidden // m.n_heads
    if isinstance(hd, bool) or not isinstance(hd, int) or hd < 2 or hd % 2:
        raise ValueError(f"{t}: head_dim {hd!r} must be an even integer >= 2 (the rotary embedding covers it)")
    m.head_dim = hd
    m.scale = hd ** -0.5
    act = _val(c, "hidden_act")
    if act != "silu":
        raise NotImplementedError(f"{t} hidden_act {act!r} (only silu: Lfm2MoeMLP calls F.silu)")
    m.eps = float(_val(c, "norm_eps"))
    # Lfm2MoeConfig: tie_word_embeddings = kwargs.get("tie_embedding", tie_word_embeddings).
    m.tie = _bool(c, "tie_embedding", c["tie_embedding"]) if c.get("tie_embedding") is not None \
        else _bool(c, "tie_word_embeddings")
    m.inter = _int(c, "intermediate_size", lo=1)
    m.moe_inter = _int(c, "moe_intermediate_size", lo=1)
    m.n_dense = _int(c, "num_dense_layers")
    m.n_experts = _int(c, "num_experts", lo=1)
    m.top_k = _int(c, "num_experts_per_tok", lo=1)
    if m.n_dense < m.n_layers and m.top_k > m.n_experts:
        raise ValueError(f"{t}: num_experts_per_tok {m.top_k} must be in [1, num_experts {m.n_experts}]")
    m.use_expert_bias = _bool(c, "use_expert_bias")
    m.norm_topk = _bool(c, "norm_topk_prob")
    rs = _val(c, "routed_scaling_factor")
    if isinstance(rs, bool) or not isinstance(rs, (int, float)):
        raise ValueError(f"{t}: routed_scaling_factor must be a number, got {rs!r}")
    m.routed_scale = float(rs)
    m.router = "lfm2"
    m.conv_bias = _bool(c, "conv_bias")
    m.conv_L = _int(c, "conv_L_cache", lo=1)
    _init_layers(m, c)
    _init_rope(m, c)
    # Attributes other code of Model reads for every type.
    m.qkv_bias = m.o_bias = False
    m.clip_qkv = None
    m.qk_norm_per_head = True
    m.rope_linear_factor, m.rope_mscale = 1.0, 1.0
    m.rotary_dim = m.head_dim


def _init_layers(m, c):
    t = m.type
    kinds = c.get("layer_types")
    if kinds is None:
        idx = c.get("full_attn_idxs")
        if idx is None:
            raise ValueError(f"{t}: neither layer_types nor full_attn_idxs (transformers' Lfm2MoeConfig has no "
                             f"default for the layer kinds)")
        if (not isinstance(idx, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in idx)
                or any(not 0 <= i < m.n_layers for i in idx) or len(set(idx)) != len(idx)):
            raise ValueError(f"{t}: full_attn_idxs {idx!r}: want distinct layer indices in [0, {m.n_layers})")
        kinds = ["full_attention" if i in idx else "conv" for i in range(m.n_layers)]
    if not isinstance(kinds, list) or len(kinds) != m.n_layers or any(k not in LAYER_KINDS for k in kinds):
        raise ValueError(f"{t}: layer_types {kinds!r}: want {m.n_layers} of {LAYER_KINDS}")
    m.layer_types = list(kinds)


def _init_rope(m, c):
    """rope_theta: rope_parameters["rope_theta"] (transformers 5), else rope_scaling's, else the top-level key,
    else 1e6 (Lfm2MoeConfig.default_theta). Only the default rope type."""
    t = m.type
    rp = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if not isinstance(rp, dict):
        raise ValueError(f"{t}: rope_parameters {rp!r} must be an object")
    kind = rp.get("rope_type", rp.get("type")) or "default"
    if kind != "default":
        raise NotImplementedError(f"{t} rope type {kind!r} (only default)")
    theta = rp.get("rope_theta")
    if theta is None:
        theta = _val(c, "rope_theta")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
        raise ValueError(f"{t}: rope_theta {theta!r} must be a positive number")
    m.theta = float(theta)
    m.inv_freq = rope_inv_freq(m.head_dim, m.theta)


def is_moe_layer(m, i):
    return i >= m.n_dense


# ----------------------------------------------------------------------------------------------------
# names
# ----------------------------------------------------------------------------------------------------

def expected_shapes(m):
    """{name: shape} of the released checkpoints (per-expert w1 / w3 / w2) for this config."""
    H, V, D = m.hidden, m.vocab, m.head_dim
    out = {"model.embed_tokens.weight": (V, H), "model.embedding_norm.weight": (H,)}
    if not m.tie:
        out["lm_head.weight"] = (V, H)
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        out[p + "operator_norm.weight"] = (H,)
        out[p + "ffn_norm.weight"] = (H,)
        if m.layer_types[i] == "full_attention":
            a = p + "self_attn."
            out[a + "q_proj.weight"] = (m.n_heads * D, H)
            out[a + "k_proj.weight"] = (m.n_kv * D, H)
            out[a + "v_proj.weight"] = (m.n_kv * D, H)
            out[a + "out_proj.weight"] = (H, m.n_heads * D)
            out[a + "q_layernorm.weight"] = (D,)
            out[a + "k_layernorm.weight"] = (D,)
        else:
            a = p + "conv."
            out[a + "in_proj.weight"] = (3 * H, H)
            out[a + "conv.weight"] = (H, 1, m.conv_L)
            out[a + "out_proj.weight"] = (H, H)
            if m.conv_bias:
                out[a + "in_proj.bias"] = (3 * H,)
                out[a + "conv.bias"] = (H,)
                out[a + "out_proj.bias"] = (H,)
        f = p + "feed_forward."
        if is_moe_layer(m, i):
            out[f + "gate.weight"] = (m.n_experts, H)
            if m.use_expert_bias:
                out[p + EXPERT_BIAS] = (m.n_experts,)
            for e in range(m.n_experts):
                out[f"{f}experts.{e}.w1.weight"] = (m.moe_inter, H)
                out[f"{f}experts.{e}.w3.weight"] = (m.moe_inter, H)
                out[f"{f}experts.{e}.w2.weight"] = (H, m.moe_inter)
        else:
            out[f + "w1.weight"] = (m.inter, H)
            out[f + "w3.weight"] = (m.inter, H)
            out[f + "w2.weight"] = (H, m.inter)
    return out


def expected_names(m):
    return list(expected_shapes(m))


def check_shapes(m):
    bad = [f"{n} {m.ckpt.shape(n)} (want {list(s)})" for n, s in expected_shapes(m).items()
           if m.ckpt.has(n) and list(m.ckpt.shape(n)) != list(s)]
    if bad:
        raise ValueError(f"{m.ckpt.dir}: tensor shapes differ from the {m.type} config: {bad[:6]}")


# ----------------------------------------------------------------------------------------------------
# layers (vectorised)
# ----------------------------------------------------------------------------------------------------

def _opt(m, name, enabled):
    return m.ckpt[name] if enabled else None


def split_in_proj(m, bcx):
    """in_proj's output [S, 3H] -> (B, C, x), each [S, H], in that order (BCx.chunk(3))."""
    H = m.hidden
    return bcx[:, :H], bcx[:, H:2 * H], bcx[:, 2 * H:]


def conv1d_padded(x, w, b=None):
    """torch.nn.Conv1d(C, C, K, groups=C, padding=K-1) over time, the output cut to the first S positions.
    x [S, C]; w [C, 1, K]; b [C] or None. The input is padded with K-1 zeros at both ends; output position t
    (of S + K - 1) is sum_j w[c, 0, j] * padded[t + j, c] (+ b[c]); the first S are kept (the causal ones)."""
    s, ch = x.shape
    k = w.shape[-1]
    z = np.zeros((k - 1, ch), dtype=F32)
    xp = np.concatenate([z, np.asarray(x, dtype=F32), z], axis=0)
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=0)       # [S + K - 1, C, K]
    out = np.einsum("tck,ck->tc", win, np.asarray(w, dtype=F32)[:, 0, :]).astype(F32)
    if b is not None:
        out = out + b[None, :]
    return out[:s].astype(F32)


def short_conv(m, i, x):
    """Lfm2MoeShortConv.slow_forward without a cache, over the whole sequence."""
    W = m.ckpt
    a = f"model.layers.{i}.conv."
    bcx = linear(x, W[a + "in_proj.weight"], _opt(m, a + "in_proj.bias", m.conv_bias))
    B, C, xx = split_in_proj(m, bcx)
    conv = conv1d_padded((B * xx).astype(F32), W[a + "conv.weight"], _opt(m, a + "conv.bias", m.conv_bias))
    return linear((C * conv).astype(F32), W[a + "out_proj.weight"], _opt(m, a + "out_proj.bias", m.conv_bias))


def qk_rope(q, k, cos, sin):
    """The rotary embedding of q [H, S, D] and k [Hkv, S, D] (after their per-head norms)."""
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def attention_layer(m, i, x, positions):
    """Lfm2MoeAttention: per-head q/k RMSNorm, then RoPE; causal GQA; out_proj."""
    W = m.ckpt
    a = f"model.layers.{i}.self_attn."
    s = x.shape[0]
    D = m.head_dim
    q = linear(x, W[a + "q_proj.weight"]).reshape(s, m.n_heads, D)
    k = linear(x, W[a + "k_proj.weight"]).reshape(s, m.n_kv, D)
    v = linear(x, W[a + "v_proj.weight"]).reshape(s, m.n_kv, D)
    q = rms_norm(q, W[a + "q_layernorm.weight"], m.eps).transpose(1, 0, 2)
    k = rms_norm(k, W[a + "k_layernorm.weight"], m.eps).transpose(1, 0, 2)
    v = v.transpose(1, 0, 2)
    cos, sin = rope_cos_sin(positions, m.inv_freq)
    q, k = qk_rope(q, k, cos, sin)
    o = attention(q, k, v, m.scale)
    return linear(o, W[a + "out_proj.weight"])


def swiglu(W, prefix, x):
    """Lfm2MoeMLP: w2(silu(w1 x) * w3 x)."""
    return linear(silu(linear(x, W[prefix + "w1.weight"])) * linear(x, W[prefix + "w3.weight"]),
                  W[prefix + "w2.weight"])


def route(m, i, x):
    """(topk_idx [S, k], topk_weight [S, k]) of the MoE layer i."""
    p = f"model.layers.{i}."
    scores = sigmoid(linear(x, m.ckpt[p + "feed_forward.gate.weight"]))
    bias = m.ckpt[p + EXPERT_BIAS] if m.use_expert_bias else None
    return select_experts_lfm2(scores, bias, m.top_k, m.norm_topk, m.routed_scale)


def moe(m, i, x):
    W = m.ckpt
    f = f"model.layers.{i}.feed_forward."
    idx, w = route(m, i, x)
    out = np.zeros_like(x)
    for e in range(m.n_experts):
        tok, slot = np.nonzero(idx == e)
        if tok.size == 0:
            continue
        y = swiglu(W, f"{f}experts.{e}.", x[tok])
        np.add.at(out, tok, y * w[tok, slot][:, None])
    return out.astype(F32)


def feed_forward(m, i, x):
    if is_moe_layer(m, i):
        return moe(m, i, x)
    return swiglu(m.ckpt, f"model.layers.{i}.feed_forward.", x)


def final_norm(m, h):
    return rms_norm(h, m.ckpt["model.embedding_norm.weight"], m.eps)


def forward(m, ids):
    """Lfm2MoeForCausalLM: per layer h += operator(operator_norm(h)) (attention or short conv),
    h += feed_forward(ffn_norm(h)); logits = lm_head(embedding_norm(h))."""
    check_shapes(m)
    W = m.ckpt
    h = m.embed(ids)
    positions = np.arange(h.shape[0])
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        x = rms_norm(h, W[p + "operator_norm.weight"], m.eps)
        if m.layer_types[i] == "full_attention":
            op = attention_layer(m, i, x, positions)
        else:
            op = short_conv(m, i, x)
        h = (h + op).astype(F32)
        x = rms_norm(h, W[p + "ffn_norm.weight"], m.eps)
        h = (h + feed_forward(m, i, x)).astype(F32)
    head = W["model.embed_tokens.weight"] if m.tie else W["lm_head.weight"]
    return linear(final_norm(m, h), head)
