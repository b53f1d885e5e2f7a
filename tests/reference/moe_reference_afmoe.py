"""afmoe (AfmoeForCausalLM: Arcee AI's AFMoE, Trinity-Nano 6B-A1B, Trinity-Mini 26B-A3B) for the numpy reference
(moe_reference.py).

Written from transformers' modular_afmoe.py / modeling_afmoe.py / configuration_afmoe.py (AfmoeConfig,
AfmoeTokenChoiceRouter, AfmoeExperts, AfmoeMoE, AfmoeAttention, AfmoeDecoderLayer, AfmoeModel) and masking_utils'
sliding-window mask. What this type is:
  - `layer_types`: "sliding_attention" or "full_attention" per layer; without it layer i is "full_attention" iff
    (i + 1) % global_attn_every_n_layers == 0 (layers 3, 7, 11, ... with the default 4), else "sliding_attention";
    any other value is refused here (transformers would treat it as a full layer without RoPE and then fail to find
    its mask);
  - embeddings: h = embed_tokens[ids], times sqrt(hidden_size) iff mup_enabled (the released Trinity configs set it);
  - every layer, with FOUR RMSNorms: h = h + post_attention_layernorm(attn(input_layernorm(h)));
    h = h + post_mlp_layernorm(mlp(pre_mlp_layernorm(h))); after the last layer model.norm, then lm_head (tied to
    embed_tokens only iff tie_word_embeddings, false by default);
  - attention (AfmoeAttention): q/k/v_proj [heads*D, H] / [kv*D, H] / [kv*D, H], o_proj [H, heads*D], no biases;
    gate_proj [heads*D, H] (no bias); D = head_dim (a config key, 128 by default, NOT hidden / heads);
    q_norm / k_norm: RMSNorm over D per head (eps rms_norm_eps); then NeoX rotate-half RoPE over the whole D ONLY on
    "sliding_attention" layers (the full-attention layers have no positional embedding at all); causal GQA softmax
    with scale D^-0.5; on sliding layers query t sees key u iff 0 <= t - u < sliding_window (masking_utils'
    sliding_window_overlay: kv_idx > q_idx - sliding_window: the current token and the W - 1 before it);
    o_proj(attn_out * sigmoid(gate_proj(x)));
  - mlp: layers < num_dense_layers a SwiGLU mlp.{gate,up,down}_proj of intermediate_size; the others AfmoeMoE:
    s = sigmoid(mlp.router.gate(x)) in fp32 [E]; the top_k experts of s + mlp.expert_bias (float32 [E]); their
    weights the UNBIASED s, / (sum + 1e-20) always (route_norm is not read by transformers), times route_scale;
    routed experts mlp.experts.{e}.{gate,up,down}_proj of moe_intermediate_size; plus, ungated, the shared experts
    mlp.shared_experts.{gate,up,down}_proj of moe_intermediate_size * num_shared_experts;
  - every RMSNorm: weight * x * rsqrt(mean(x^2) + rms_norm_eps).
The token-by-token pass in moe_reference_naive.py (forward_afmoe) has its own float64 KV cache trimmed to the window.
"""

import math

import numpy as np

from moe_reference_ops import (F32, apply_rope, attention, linear, rms_norm, rope_cos_sin, rope_inv_freq,
                               select_experts_afmoe, sigmoid, silu)

TYPES = ("afmoe",)
LAYER_KINDS = ("sliding_attention", "full_attention")
# AfmoeConfig defaults for keys a config.json may omit (null counts as missing here, except sliding_window, see
# init). num_key_value_heads has none (= num_attention_heads).
AFMOE_DEFAULTS = dict(vocab_size=200192, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=1408,
                      num_hidden_layers=32, num_dense_layers=1, num_attention_heads=16, head_dim=128,
                      hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0,
                      num_experts=64, num_experts_per_tok=6, num_shared_experts=2, route_scale=1.0,
                      global_attn_every_n_layers=4, sliding_window=1024, mup_enabled=False)
ROUTER_EPS = 1e-20   # AfmoeTokenChoiceRouter: top_scores / (top_scores.sum() + 1e-20)
EXPERT_BIAS = "mlp.expert_bias"
ROUTER_GATE = "mlp.router.gate.weight"
# Keys of the released Trinity configs that AfmoeConfig does not read (they land in kwargs): accepted only with the
# value the transformers code hard-wires. null = absent.
EXTRA_KEYS = dict(route_norm=True, score_func="sigmoid", n_group=1, topk_group=1, num_expert_groups=1,
                  num_limited_groups=1)


def _val(c, key):
    v = c.get(key)
    return AFMOE_DEFAULTS[key] if v is None else v


def _int(c, key, lo=0):
    v = _val(c, key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"afmoe: {key} must be an integer >= {lo}, got {v!r}")
    return v


def _bool(c, key):
    v = _val(c, key)
    if not isinstance(v, bool):
        raise ValueError(f"afmoe: {key} must be true or false, got {v!r}")
    return v


def _num(c, key):
    v = _val(c, key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"afmoe: {key} must be a number, got {v!r}")
    return float(v)


def init(m, c):
    """Sets the attributes the afmoe forward, the naive pass and the layout check read, from a config.json."""
    t = m.type
    m.hidden = _int(c, "hidden_size", lo=1)
    m.n_layers = _int(c, "num_hidden_layers", lo=1)
    m.n_heads = _int(c, "num_attention_heads", lo=1)
    kv = c.get("num_key_value_heads")
    m.n_kv = m.n_heads if kv is None else kv
    if isinstance(m.n_kv, bool) or not isinstance(m.n_kv, int) or m.n_kv < 1:
        raise ValueError(f"{t}: num_key_value_heads must be an integer >= 1, got {m.n_kv!r}")
    if m.n_heads % m.n_kv:
        raise ValueError(f"{t}: num_attention_heads {m.n_heads} is not a multiple of num_key_value_heads {m.n_kv}")
    m.vocab = _int(c, "vocab_size", lo=1)
    hd = _val(c, "head_dim")
    if isinstance(hd, bool) or not isinstance(hd, int) or hd < 2 or hd % 2:
        raise ValueError(f"{t}: head_dim {hd!r} must be an even integer >= 2 (the rotary embedding covers it)")
    m.head_dim = hd
    m.scale = hd ** -0.5
    act = _val(c, "hidden_act")
    if act != "silu":
        raise NotImplementedError(f"{t} hidden_act {act!r} (only silu)")
    if c.get("attention_bias") not in (None, False):
        # AfmoeConfig sets attention_bias = False, but PreTrainedConfig's kwargs (set after it) would turn a
        # config.json `attention_bias: true` into biases on q/k/v/o. No released config has it.
        raise ValueError(f"{t}: attention_bias {c['attention_bias']!r} (only false: AFMoE's projections have no bias)")
    for key, want in EXTRA_KEYS.items():
        v = c.get(key)
        if v is not None and (v != want or isinstance(v, bool) != isinstance(want, bool)):
            raise ValueError(f"{t}: {key} {v!r} is not supported (transformers' AFMoE router hard-wires {key} = "
                             f"{want!r})")
    m.eps = _num(c, "rms_norm_eps")
    m.tie = _bool(c, "tie_word_embeddings")
    m.mup = _bool(c, "mup_enabled")
    m.inter = _int(c, "intermediate_size", lo=1)
    m.moe_inter = _int(c, "moe_intermediate_size", lo=1)
    m.n_dense = _int(c, "num_dense_layers")
    m.n_experts = _int(c, "num_experts", lo=1)
    m.top_k = _int(c, "num_experts_per_tok", lo=1)
    m.n_shared = _int(c, "num_shared_experts", lo=1)
    if m.n_dense < m.n_layers and m.top_k > m.n_experts:
        raise ValueError(f"{t}: num_experts_per_tok {m.top_k} must be in [1, num_experts {m.n_experts}]")
    m.route_scale = _num(c, "route_scale")
    m.router = "afmoe"
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
        n = _int(c, "global_attn_every_n_layers", lo=1)
        kinds = ["full_attention" if (i + 1) % n == 0 else "sliding_attention" for i in range(m.n_layers)]
    if not isinstance(kinds, list) or len(kinds) != m.n_layers or any(k not in LAYER_KINDS for k in kinds):
        raise ValueError(f"{t}: layer_types {kinds!r}: want {m.n_layers} of {LAYER_KINDS}")
    m.layer_types = list(kinds)
    m.window = None
    if "sliding_attention" in kinds:
        # null is refused, not defaulted: transformers keeps None and its sliding-window mask then fails.
        if "sliding_window" in c and c["sliding_window"] is None:
            raise ValueError(f"{t}: sliding_window is null but layer_types has sliding_attention layers")
        m.window = _int(c, "sliding_window", lo=1)


def _init_rope(m, c):
    """rope_theta: rope_parameters["rope_theta"] (transformers 5), else rope_scaling's, else the top-level key, else
    10000 (AfmoeConfig). Only the default rope type, one set of parameters for every layer."""
    t = m.type
    rp = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if not isinstance(rp, dict) or any(isinstance(v, dict) for v in rp.values()):
        raise ValueError(f"{t}: rope_parameters {rp!r} must be one object (not per layer type)")
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

MLP3 = ("gate_proj", "up_proj", "down_proj")


def _mlp_shapes(out, prefix, H, inter):
    out[prefix + "gate_proj.weight"] = (inter, H)
    out[prefix + "up_proj.weight"] = (inter, H)
    out[prefix + "down_proj.weight"] = (H, inter)


def expected_shapes(m):
    """{name: shape} of the HF state dict (per-expert gate/up/down_proj, the released layout) for this config."""
    H, V, D = m.hidden, m.vocab, m.head_dim
    out = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not m.tie:
        out["lm_head.weight"] = (V, H)
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm", "post_mlp_layernorm"):
            out[p + n + ".weight"] = (H,)
        a = p + "self_attn."
        out[a + "q_proj.weight"] = (m.n_heads * D, H)
        out[a + "k_proj.weight"] = (m.n_kv * D, H)
        out[a + "v_proj.weight"] = (m.n_kv * D, H)
        out[a + "gate_proj.weight"] = (m.n_heads * D, H)
        out[a + "o_proj.weight"] = (H, m.n_heads * D)
        out[a + "q_norm.weight"] = (D,)
        out[a + "k_norm.weight"] = (D,)
        if is_moe_layer(m, i):
            out[p + ROUTER_GATE] = (m.n_experts, H)
            out[p + EXPERT_BIAS] = (m.n_experts,)
            _mlp_shapes(out, p + "mlp.shared_experts.", H, m.moe_inter * m.n_shared)
            for e in range(m.n_experts):
                _mlp_shapes(out, f"{p}mlp.experts.{e}.", H, m.moe_inter)
        else:
            _mlp_shapes(out, p + "mlp.", H, m.inter)
    return out


def expected_names(m):
    return list(expected_shapes(m))


def check_shapes(m):
    bad = [f"{n} {m.ckpt.shape(n)} (want {list(s)})" for n, s in expected_shapes(m).items()
           if m.ckpt.has(n) and list(m.ckpt.shape(n)) != list(s)]
    if bad:
        raise ValueError(f"{m.ckpt.dir}: tensor shapes differ from the {m.type} config: {bad[:6]}")


# ----------------------------------------------------------------------------------------------------
# layers (vectorised); module-level functions, so that the self-test can plant bugs in them
# ----------------------------------------------------------------------------------------------------

def embed_scale(m):
    """AfmoeModel: inputs_embeds * hidden_size ** 0.5 iff mup_enabled."""
    return math.sqrt(m.hidden) if m.mup else 1.0


def uses_rope(m, i):
    """AfmoeAttention.is_local_attention: the rotary embedding only on sliding_attention layers."""
    return m.layer_types[i] == "sliding_attention"


def layer_window(m, i):
    """The sliding window of layer i (keys t - W + 1 .. t visible to query t), None on full layers."""
    return m.window if m.layer_types[i] == "sliding_attention" else None


def attend(q, k, v, scale, window):
    """Causal GQA softmax attention; with a window W query t sees keys u with t - u < W (moe_reference_ops)."""
    return attention(q, k, v, scale, window)


def output_gate(o, g):
    """attn_output * sigmoid(gate_proj(x)), elementwise over [S, heads * D]."""
    return (o * sigmoid(g)).astype(F32)


def post_norm(m, h, name):
    """post_attention_layernorm / post_mlp_layernorm on a sublayer's output, before the residual add."""
    return rms_norm(h, m.ckpt[name], m.eps)


def attention_layer(m, i, x, positions):
    """AfmoeAttention: q/k/v/gate projections; per-head q/k RMSNorm; RoPE iff sliding; causal (windowed) GQA;
    the sigmoid output gate; o_proj."""
    W = m.ckpt
    a = f"model.layers.{i}.self_attn."
    s = x.shape[0]
    D = m.head_dim
    q = linear(x, W[a + "q_proj.weight"]).reshape(s, m.n_heads, D)
    k = linear(x, W[a + "k_proj.weight"]).reshape(s, m.n_kv, D)
    v = linear(x, W[a + "v_proj.weight"]).reshape(s, m.n_kv, D)
    g = linear(x, W[a + "gate_proj.weight"])
    q = rms_norm(q, W[a + "q_norm.weight"], m.eps).transpose(1, 0, 2)
    k = rms_norm(k, W[a + "k_norm.weight"], m.eps).transpose(1, 0, 2)
    v = v.transpose(1, 0, 2)
    if uses_rope(m, i):
        cos, sin = rope_cos_sin(positions, m.inv_freq)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    o = attend(q, k, v, m.scale, layer_window(m, i))
    return linear(output_gate(o, g), W[a + "o_proj.weight"])


def swiglu(W, prefix, x):
    """AfmoeMLP (Qwen2MoeMLP): down(silu(gate x) * up x)."""
    return linear(silu(linear(x, W[prefix + "gate_proj.weight"])) * linear(x, W[prefix + "up_proj.weight"]),
                  W[prefix + "down_proj.weight"])


def router_scores(logits):
    """AfmoeTokenChoiceRouter: sigmoid of the router logits, in fp32."""
    return sigmoid(logits)


def route(m, i, x):
    """(topk_idx [S, k], topk_weight [S, k]) of the MoE layer i."""
    p = f"model.layers.{i}."
    scores = router_scores(linear(x, m.ckpt[p + ROUTER_GATE]))
    return select_experts_afmoe(scores, m.ckpt[p + EXPERT_BIAS], m.top_k, m.route_scale)


def shared_mlp(m, i, x):
    """AfmoeMoE.shared_experts: one SwiGLU of width moe_intermediate_size * num_shared_experts, added ungated."""
    return swiglu(m.ckpt, f"model.layers.{i}.mlp.shared_experts.", x)


def moe(m, i, x):
    """AfmoeMoE: the shared experts (no gate) + the routed experts weighted by the router."""
    W = m.ckpt
    f = f"model.layers.{i}.mlp."
    idx, w = route(m, i, x)
    out = np.zeros_like(x)
    for e in range(m.n_experts):
        tok, slot = np.nonzero(idx == e)
        if tok.size == 0:
            continue
        y = swiglu(W, f"{f}experts.{e}.", x[tok])
        np.add.at(out, tok, y * w[tok, slot][:, None])
    return (shared_mlp(m, i, x) + out).astype(F32)


def mlp(m, i, x):
    if is_moe_layer(m, i):
        return moe(m, i, x)
    return swiglu(m.ckpt, f"model.layers.{i}.mlp.", x)


def forward(m, ids):
    """AfmoeForCausalLM: h = embed * sqrt(H) iff mup; per layer h += post_attention_layernorm(attn(input_layernorm(h))),
    h += post_mlp_layernorm(mlp(pre_mlp_layernorm(h))); logits = lm_head(norm(h))."""
    check_shapes(m)
    W = m.ckpt
    h = (m.embed(ids) * F32(embed_scale(m))).astype(F32)
    positions = np.arange(h.shape[0])
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        x = rms_norm(h, W[p + "input_layernorm.weight"], m.eps)
        h = (h + post_norm(m, attention_layer(m, i, x, positions), p + "post_attention_layernorm.weight")).astype(F32)
        x = rms_norm(h, W[p + "pre_mlp_layernorm.weight"], m.eps)
        h = (h + post_norm(m, mlp(m, i, x), p + "post_mlp_layernorm.weight")).astype(F32)
    head = W["model.embed_tokens.weight"] if m.tie else W["lm_head.weight"]
    return linear(rms_norm(h, W["model.norm.weight"], m.eps), head)
