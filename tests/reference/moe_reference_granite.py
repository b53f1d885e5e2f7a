"""granitemoe (GraniteMoeForCausalLM: IBM Granite 3.0 / 3.1 MoE, PowerMoE) and granitemoeshared
(GraniteMoeSharedForCausalLM: Granite MoE with a shared MLP) for the numpy reference (moe_reference.py).

Written from transformers' modular_granitemoe.py / configuration_granitemoe.py (GraniteMoeMoE, the Llama
attention with `self.scaling = config.attention_multiplier`, the Mixtral decoder layer with the residual
multiplier), jetmoe's JetMoeTopKGating / JetMoeParallelExperts (which GraniteMoe reuses), and
modular_granitemoeshared.py / configuration_granitemoeshared.py. What these types bring over the others:
  - four scalar multipliers: the embeddings are multiplied by `embedding_multiplier`; each branch (attention
    and MLP) by `residual_multiplier` before it is added to the residual stream; the attention scores by
    `attention_multiplier` (instead of head_dim^-0.5); the logits are divided by `logits_scaling`;
  - Llama attention: q/k/v/o projections, all four with a bias iff `attention_bias`, GQA, NeoX RoPE over the
    whole head, head_dim = hidden_size / num_attention_heads;
  - every layer is MoE (`block_sparse_moe`): router `router.layer.weight` [E, H] without bias; the experts are
    the top-k router logits (fp32), weighted by the softmax over those k logits (the same weights as a softmax
    over all experts then top-k renormalised); the experts are two fused parallel-expert tensors,
    `input_linear.weight` [E, 2I, H] (y = W_e x; rows [0, I) the gate, [I, 2I) the up) and
    `output_linear.weight` [E, H, I]: out = W_o (silu(gate) * up);
  - granitemoeshared: when `shared_intermediate_size` S > 0, `shared_mlp.input_linear.weight` [2S, H] (gate rows
    first) and `shared_mlp.output_linear.weight` [H, S], added to the MoE output without a gate, before the
    residual multiplier.
"""

import numpy as np

from moe_reference_ops import F32, linear, rms_norm, rope_inv_freq, select_experts_granite, silu

TYPES = ("granitemoe", "granitemoeshared")
# GraniteMoeConfig / GraniteMoeSharedConfig defaults for keys a config.json may omit (null counts as missing,
# except for the four multipliers: see init). num_key_value_heads: missing or null means num_attention_heads.
GRANITE_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6,
                        tie_word_embeddings=False, rope_theta=10000.0, attention_bias=False, embedding_multiplier=1.0,
                        logits_scaling=1.0, residual_multiplier=1.0, attention_multiplier=1.0, num_local_experts=8,
                        num_experts_per_tok=2, shared_intermediate_size=0)
MULTIPLIERS = ("embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier")
ROUTER = "block_sparse_moe.router.layer.weight"
EXPERTS_IN = "block_sparse_moe.input_linear.weight"
EXPERTS_OUT = "block_sparse_moe.output_linear.weight"
SHARED_IN = "shared_mlp.input_linear.weight"
SHARED_OUT = "shared_mlp.output_linear.weight"


def _val(c, key, d=GRANITE_DEFAULTS):
    v = c.get(key)
    return d[key] if v is None else v


def _int(c, key, default=None, lo=0):
    v = c.get(key)
    v = (GRANITE_DEFAULTS[key] if default is None else default) if v is None else v
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"granitemoe: {key} must be an integer >= {lo}, got {v!r}")
    return v


def init(m, c):
    """Sets the attributes Model's GQA attention (std_attention), the MoE and the slow path read, from a
    granitemoe / granitemoeshared config.json."""
    t = m.type
    m.hidden = _int(c, "hidden_size", lo=1)
    m.n_layers = _int(c, "num_hidden_layers")
    m.n_heads = _int(c, "num_attention_heads", lo=1)
    m.vocab = _int(c, "vocab_size", lo=1)
    m.n_kv = _int(c, "num_key_value_heads", m.n_heads, lo=1)   # GraniteMoeConfig: None -> num_attention_heads
    if m.n_heads % m.n_kv:
        raise ValueError(f"{t}: num_attention_heads {m.n_heads} is not a multiple of num_key_value_heads {m.n_kv}")
    if m.hidden % m.n_heads:
        raise ValueError(f"{t}: hidden_size {m.hidden} is not a multiple of num_attention_heads {m.n_heads}")
    m.head_dim = m.hidden // m.n_heads
    hd = c.get("head_dim")
    if hd is not None and hd != m.head_dim:
        # transformers 4.45-4.5x's GraniteMoeAttention always uses hidden // heads; the newest (LlamaAttention)
        # would honour a head_dim key, which the config class does not define. Refused rather than chosen.
        raise NotImplementedError(f"{t}: head_dim {hd!r} != hidden_size / num_attention_heads = {m.head_dim}")
    act = _val(c, "hidden_act")
    if act != "silu":
        raise NotImplementedError(f"{t} hidden_act {act!r} (only silu)")
    m.eps = float(_val(c, "rms_norm_eps"))
    m.tie = bool(_val(c, "tie_word_embeddings"))
    m.inter = _int(c, "intermediate_size", lo=1)
    m.n_experts = _int(c, "num_local_experts", lo=1)
    m.top_k = _int(c, "num_experts_per_tok", lo=1)
    if m.top_k > m.n_experts:
        raise ValueError(f"{t}: num_experts_per_tok {m.top_k} must be in [1, num_local_experts {m.n_experts}]")
    # GraniteMoeSharedConfig only: 0 means no shared MLP. GraniteMoeConfig has no such key (a stray one is ignored).
    m.shared_inter = _int(c, "shared_intermediate_size") if t == "granitemoeshared" else 0
    # The multipliers: a missing key takes the class default 1.0; an explicit null would be stored as None and
    # fail in transformers (x * None), or for attention_multiplier silently become SDPA's head_dim^-0.5 under
    # the sdpa backend and fail under eager: refused.
    for key in MULTIPLIERS:
        v = c.get(key, GRANITE_DEFAULTS[key])
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{t}: {key} must be a number, got {v!r}")
        setattr(m, key, float(v))
    if m.logits_scaling == 0:
        raise ValueError(f"{t}: logits_scaling 0 (the logits are divided by it)")
    m.router = "granite"
    m.qkv_bias = m.o_bias = bool(_val(c, "attention_bias"))   # LlamaAttention: q, k, v and o
    m.clip_qkv = None
    m.qk_norm_per_head = False
    m.scale = m.attention_multiplier                            # GraniteMoeAttention.scaling
    _init_rope(m, c)


def _init_rope(m, c):
    """NeoX RoPE over the whole head (GraniteRotaryEmbedding = Llama's). The rope_scaling dict (transformers
    4.x), else rope_parameters (5.x); rope_theta from that dict, else the top-level key, else 10000. Only the
    default and linear types."""
    rp = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})
    kind = rp.get("rope_type", rp.get("type")) or "default"
    m.theta = float(rp["rope_theta"] if rp.get("rope_theta") is not None else _val(c, "rope_theta"))
    partial = rp.get("partial_rotary_factor", c.get("partial_rotary_factor"))
    partial = 1.0 if partial is None else partial
    if float(partial) != 1.0:
        raise NotImplementedError(f"{m.type} partial_rotary_factor {partial} (Granite rotates the whole head)")
    m.rotary_dim = m.head_dim
    m.inv_freq = rope_inv_freq(m.head_dim, m.theta)
    m.rope_mscale = 1.0
    m.rope_linear_factor = 1.0
    if kind == "linear":
        m.rope_linear_factor = float(rp["factor"])
    elif kind != "default":
        raise NotImplementedError(f"{m.type} rope type {kind!r} (only default, linear)")
    m.rope_type = kind


def expected_names(m):
    names = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if m.tie else ["lm_head.weight"])
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        for w in "qkvo":
            names.append(f"{p}self_attn.{w}_proj.weight")
            if m.qkv_bias:
                names.append(f"{p}self_attn.{w}_proj.bias")
        names += [p + ROUTER, p + EXPERTS_IN, p + EXPERTS_OUT]
        if m.shared_inter > 0:
            names += [p + SHARED_IN, p + SHARED_OUT]
    return names


def _checked(m, name, want):
    a = m.ckpt[name]
    if tuple(a.shape) != tuple(want):
        raise ValueError(f"{m.ckpt.dir}: {name} has shape {list(a.shape)}, expected {list(want)}")
    return a


def expert_weights(m, i):
    """(input_linear [E, 2I, H], output_linear [E, H, I]) of layer i, as stored (GraniteMoeParallelExperts
    computes F.linear(x, weight[e]), i.e. weight[e] is [out, in])."""
    p = f"model.layers.{i}."
    E, H, I = m.n_experts, m.hidden, m.inter
    return _checked(m, p + EXPERTS_IN, (E, 2 * I, H)), _checked(m, p + EXPERTS_OUT, (E, H, I))


def router_weight(m, i):
    return _checked(m, f"model.layers.{i}.{ROUTER}", (m.n_experts, m.hidden))


def shared_weights(m, i):
    p = f"model.layers.{i}."
    S, H = m.shared_inter, m.hidden
    return _checked(m, p + SHARED_IN, (2 * S, H)), _checked(m, p + SHARED_OUT, (H, S))


def route(m, i, x):
    """(topk_idx [S, k], weights [S, k]) of layer i's GraniteMoeTopKGating."""
    return select_experts_granite(linear(x, router_weight(m, i)), m.top_k)


def moe(m, i, x):
    """GraniteMoeMoE (+ granitemoeshared's shared MLP): sum over the chosen experts of
    w * W_o[e] (silu(gate) * up) with [gate | up] = W_in[e] x, plus the ungated shared MLP."""
    idx, w = route(m, i, x)
    w_in, w_out = expert_weights(m, i)
    I = m.inter
    out = np.zeros_like(x)
    for e in range(m.n_experts):
        tok, slot = np.nonzero(idx == e)
        if tok.size == 0:
            continue
        y = linear(x[tok], w_in[e])
        act = silu(y[:, :I]) * y[:, I:]
        np.add.at(out, tok, linear(act, w_out[e]) * w[tok, slot][:, None])
    if m.shared_inter > 0:
        s_in, s_out = shared_weights(m, i)
        S = m.shared_inter
        y = linear(x, s_in)
        out = out + linear(silu(y[:, :S]) * y[:, S:], s_out)
    return out.astype(F32, copy=False)


def forward(m, ids):
    """GraniteMoeForCausalLM: h = embed * embedding_multiplier; per layer h += attn(norm(h)) * residual_multiplier,
    h += moe(norm(h)) * residual_multiplier; logits = lm_head(norm(h)) / logits_scaling."""
    W = m.ckpt
    h = (m.embed(ids) * F32(m.embedding_multiplier)).astype(F32)
    positions = np.arange(h.shape[0])
    r = F32(m.residual_multiplier)
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        x = rms_norm(h, W[p + "input_layernorm.weight"], m.eps)
        h = (h + m.std_attention(i, x, positions) * r).astype(F32)
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], m.eps)
        h = (h + moe(m, i, x) * r).astype(F32)
    return (m.lm_head(h) / F32(m.logits_scaling)).astype(F32)
