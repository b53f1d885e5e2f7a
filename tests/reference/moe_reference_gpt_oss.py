"""gpt_oss (GptOssForCausalLM: gpt-oss-20b, gpt-oss-120b) for the numpy reference (moe_reference.py).

Written from transformers' modeling_gpt_oss.py / modular_gpt_oss.py, configuration_gpt_oss.py,
integrations/mxfp4.py and modeling_rope_utils.py (4.55 to 5.x). What it brings over the other types:
  - attention: q/k/v/o biases (attention_bias, always on in released configs), GQA, head_dim from the config,
    a learned logit per query head (`self_attn.sinks` [H]) appended to every softmax row and dropped after it;
  - `layer_types`: per layer "sliding_attention" (key j visible to query i iff 0 <= i - j < sliding_window)
    or "full_attention" (causal); default alternating, sliding first;
  - RoPE: NeoX halves on the whole head (transformers' _apply_rotary_emb), YaRN from modeling_rope_utils
    (gpt-oss: factor 32, beta 32/1, truncate false, original 4096, theta 150000), cos/sin times the YaRN
    attention factor;
  - MoE on every layer: router `mlp.router.{weight,bias}`; the experts are the top-k of the biased logits,
    weighted by the softmax over those k logits only; fused experts `mlp.experts.gate_up_proj` [E, H, 2I]
    (x @ W, gate = even columns, up = odd columns) and `down_proj` [E, I, H] with biases [E, 2I] / [E, H];
    the clamped SwiGLU (up + 1) * gate * sigmoid(alpha * gate) after gate <= limit, |up| <= limit; the down
    bias is inside the routing weight;
  - MXFP4 checkpoints (quantization_config quant_method "mxfp4"): the experts are stored as
    `gate_up_proj_blocks` U8 [E, 2I, H/32, 16] + `gate_up_proj_scales` U8 [E, 2I, H/32] and `down_proj_*`
    [E, H, I/32, 16] / [E, H, I/32]; dequantized in that [E, out, in] orientation then transposed to the
    runtime [E, in, out] (transformers' convert_moe_packed_tensors ends with transpose(1, 2)). Without
    quantization (or with `model.layers.N.mlp.experts` in modules_to_not_convert) the dense runtime
    tensors `gate_up_proj` / `down_proj` are read instead.
"""

import numpy as np

from moe_reference_ops import (F32, gpt_oss_swiglu, hf_yarn_inv_freq_and_attention_factor, linear, rope_inv_freq,
                               select_experts_gpt_oss)

# GptOssConfig's defaults for keys a config.json may omit (null counts as missing, except where noted in
# init_gpt_oss: num_key_value_heads, head_dim and sliding_window, whose null has its own meaning).
GPT_OSS_DEFAULTS = dict(num_hidden_layers=36, num_local_experts=128, vocab_size=201088, hidden_size=2880,
                        intermediate_size=2880, head_dim=64, num_attention_heads=64, num_key_value_heads=8,
                        sliding_window=128, tie_word_embeddings=False, max_position_embeddings=131072,
                        rms_norm_eps=1e-5, num_experts_per_tok=4, swiglu_limit=7.0, swiglu_alpha=1.702,
                        attention_bias=True, rope_theta=150000.0)
# GptOssConfig's rope_scaling / rope_parameters when the config has none.
GPT_OSS_DEFAULT_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                        "original_max_position_embeddings": 4096}
LAYER_TYPES = ("sliding_attention", "full_attention")
EXPERT_PARAMS = ("gate_up_proj", "down_proj")


def _int(c, key, default):
    v = c.get(key)
    v = default if v is None else v
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"gpt_oss: {key} must be an integer, got {v!r}")
    return v


def init_gpt_oss(m, c):
    """Sets the attributes Model's GQA path, the MoE and the slow path read, from a gpt_oss config.json."""
    d = GPT_OSS_DEFAULTS
    m.hidden = _int(c, "hidden_size", d["hidden_size"])
    m.n_layers = _int(c, "num_hidden_layers", d["num_hidden_layers"])
    m.n_heads = _int(c, "num_attention_heads", d["num_attention_heads"])
    m.vocab = _int(c, "vocab_size", d["vocab_size"])
    # GptOssConfig: num_key_value_heads defaults to 8; an explicit null means num_attention_heads.
    m.n_kv = _int(c, "num_key_value_heads", m.n_heads) if "num_key_value_heads" in c else d["num_key_value_heads"]
    if m.n_kv < 1 or m.n_heads % m.n_kv:
        raise ValueError(f"gpt_oss: num_attention_heads {m.n_heads} is not a multiple of num_key_value_heads {m.n_kv}")
    # head_dim defaults to 64; an explicit null means hidden_size // num_attention_heads.
    m.head_dim = _int(c, "head_dim", m.hidden // m.n_heads) if "head_dim" in c else d["head_dim"]
    m.eps = float(c.get("rms_norm_eps") or d["rms_norm_eps"])
    m.tie = bool(c.get("tie_word_embeddings", d["tie_word_embeddings"]) or False)
    m.inter = _int(c, "intermediate_size", d["intermediate_size"])
    m.n_experts = _int(c, "num_local_experts", d["num_local_experts"])
    if c.get("num_experts") is not None:   # attribute_map: num_experts -> num_local_experts
        if c.get("num_local_experts") is not None and c["num_experts"] != c["num_local_experts"]:
            raise ValueError(f"gpt_oss: num_experts {c['num_experts']!r} differs from num_local_experts "
                             f"{c['num_local_experts']!r}")
        m.n_experts = _int(c, "num_experts", d["num_local_experts"])
    m.top_k = _int(c, "num_experts_per_tok", d["num_experts_per_tok"])
    if not (1 <= m.top_k <= m.n_experts):
        raise ValueError(f"gpt_oss: num_experts_per_tok {m.top_k} must be in [1, num_local_experts {m.n_experts}]")
    # The experts' clamp and gain: swiglu_limit is read by transformers' MXFP4 experts and by the newest
    # config class, swiglu_alpha by the newest config class; the eager experts of 4.55-4.57 hard-code 7.0 and
    # 1.702 (the released values).
    m.swiglu_limit = float(c.get("swiglu_limit") if c.get("swiglu_limit") is not None else d["swiglu_limit"])
    m.swiglu_alpha = float(c.get("swiglu_alpha") if c.get("swiglu_alpha") is not None else d["swiglu_alpha"])
    if c.get("attention_bias") is not None and not c["attention_bias"]:
        raise NotImplementedError("gpt_oss attention_bias false: transformers 4.55-5.0 always build q/k/v/o biases "
                                  "(the config value is ignored there), the newest honour it")
    m.qkv_bias = m.o_bias = True
    m.clip_qkv = None
    m.qk_norm_per_head = False
    m.scale = m.head_dim ** -0.5
    # Layers: sliding or full attention.
    kinds = c.get("layer_types")
    if kinds is None:
        kinds = [LAYER_TYPES[0] if (i + 1) % 2 else LAYER_TYPES[1] for i in range(m.n_layers)]
    kinds = list(kinds)
    if len(kinds) != m.n_layers or any(k not in LAYER_TYPES for k in kinds):
        raise ValueError(f"gpt_oss layer_types {kinds!r}: want {m.n_layers} of {LAYER_TYPES}")
    window = c["sliding_window"] if "sliding_window" in c else d["sliding_window"]   # null: no window
    if window is not None and "sliding_window" in c:
        window = _int(c, "sliding_window", 0)
    if LAYER_TYPES[0] in kinds and (window is None or window < 1):
        raise ValueError(f"gpt_oss: sliding_attention layers need a sliding_window >= 1, got {window!r}")
    m.layer_types = kinds
    m.layer_windows = [window if k == LAYER_TYPES[0] else None for k in kinds]
    _init_gpt_oss_rope(m, c, d)


def _init_gpt_oss_rope(m, c, d):
    """RoPE over the whole head: the rope_scaling dict (transformers 4.x), else rope_parameters (5.x), else
    GptOssConfig's YaRN default. rope_theta from that dict, else the top-level key, else 150000."""
    rp = c.get("rope_scaling") or c.get("rope_parameters") or dict(GPT_OSS_DEFAULT_ROPE)
    kind = rp.get("rope_type", rp.get("type")) or "default"
    m.theta = float(rp.get("rope_theta") or c.get("rope_theta") or d["rope_theta"])
    partial = rp.get("partial_rotary_factor", c.get("partial_rotary_factor"))
    if partial is not None and float(partial) != 1.0:
        raise NotImplementedError(f"gpt_oss partial_rotary_factor {partial} (transformers rotates both halves of "
                                  f"the whole head and could not broadcast a smaller table)")
    m.rotary_dim = m.head_dim
    m.rope_linear_factor = 1.0
    m.rope_mscale = 1.0
    max_pos = _int(c, "max_position_embeddings", d["max_position_embeddings"])
    if kind == "default":
        m.inv_freq = rope_inv_freq(m.head_dim, m.theta)
    elif kind == "linear":
        m.inv_freq = rope_inv_freq(m.head_dim, m.theta)
        m.rope_linear_factor = float(rp["factor"])
    elif kind == "yarn":
        m.inv_freq, m.rope_mscale = hf_yarn_inv_freq_and_attention_factor(
            m.head_dim, m.theta, rp, max_pos, original_max=c.get("original_max_position_embeddings"))
    else:
        raise NotImplementedError(f"gpt_oss rope type {kind!r} (only default, linear, yarn)")
    m.rope_type = kind


def experts_mxfp4(m, i):
    """True if layer i's experts are read as MXFP4 blocks/scales (quant_method mxfp4 and the module
    model.layers.i.mlp.experts not matched by modules_to_not_convert), else as the dense runtime tensors."""
    return m.ckpt.quant_method == "mxfp4" and not m.ckpt.mxfp4_kept(f"model.layers.{i}.mlp.experts")


def expected_names(m):
    names = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if m.tie else ["lm_head.weight"])
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight", p + "self_attn.sinks",
                  p + "mlp.router.weight", p + "mlp.router.bias"]
        names += [f"{p}self_attn.{w}_proj.{k}" for w in "qkvo" for k in ("weight", "bias")]
        e = p + "mlp.experts."
        names += [e + w + "_bias" for w in EXPERT_PARAMS]
        if experts_mxfp4(m, i):
            names += [e + w + sfx for w in EXPERT_PARAMS for sfx in ("_blocks", "_scales")]
        else:
            names += [e + w for w in EXPERT_PARAMS]
    return names


def _check_shape(m, name, arr, want):
    if tuple(arr.shape) != tuple(want):
        raise ValueError(f"{m.ckpt.dir}: {name} has shape {list(arr.shape)}, expected {list(want)}")


def expert_weights_stored(m, i):
    """(gate_up [E, 2I, H], down [E, H, I]) in the [E, out, in] orientation the MXFP4 blocks are stored in
    (dense checkpoints: the runtime tensors transposed)."""
    p = f"model.layers.{i}.mlp.experts."
    E, H, I = m.n_experts, m.hidden, m.inter
    if experts_mxfp4(m, i):
        gu, dn = m.ckpt.mxfp4(p + "gate_up_proj"), m.ckpt.mxfp4(p + "down_proj")
    else:
        gu, dn = m.ckpt[p + "gate_up_proj"].transpose(0, 2, 1), m.ckpt[p + "down_proj"].transpose(0, 2, 1)
    _check_shape(m, p + "gate_up_proj (as [E, 2I, H])", gu, (E, 2 * I, H))
    _check_shape(m, p + "down_proj (as [E, H, I])", dn, (E, H, I))
    return gu, dn


def expert_weights(m, i):
    """The runtime (GptOssExperts) layout: gate_up_proj [E, H, 2I], gate_up_proj_bias [E, 2I], down_proj
    [E, I, H], down_proj_bias [E, H]; an expert computes x @ gate_up_proj[e] + bias[e]."""
    p = f"model.layers.{i}.mlp.experts."
    E, H, I = m.n_experts, m.hidden, m.inter
    cache = m.__dict__.setdefault("_gpt_oss_experts", {})
    if i not in cache:
        gu, dn = expert_weights_stored(m, i)
        bgu, bdn = m.ckpt[p + "gate_up_proj_bias"], m.ckpt[p + "down_proj_bias"]
        _check_shape(m, p + "gate_up_proj_bias", bgu, (E, 2 * I))
        _check_shape(m, p + "down_proj_bias", bdn, (E, H))
        # Contiguous, so that an MXFP4 and a dense checkpoint of the same values take the same matmul path.
        cache[i] = (np.ascontiguousarray(gu.transpose(0, 2, 1)), bgu, np.ascontiguousarray(dn.transpose(0, 2, 1)), bdn)
    return cache[i]


def route(m, i, x):
    """(topk_idx [S, k], weights [S, k]) of layer i's GptOssTopKRouter."""
    p = f"model.layers.{i}.mlp.router."
    return select_experts_gpt_oss(linear(x, m.ckpt[p + "weight"], m.ckpt[p + "bias"]), m.top_k)


def moe(m, i, x):
    """GptOssMLP: sum over the chosen experts of w * (swiglu(x @ gate_up + b) @ down + b_down)."""
    idx, w = route(m, i, x)
    gu, bgu, dn, bdn = expert_weights(m, i)
    out = np.zeros_like(x)
    for e in range(m.n_experts):
        tok, slot = np.nonzero(idx == e)
        if tok.size == 0:
            continue
        act = gpt_oss_swiglu(x[tok] @ gu[e] + bgu[e], m.swiglu_alpha, m.swiglu_limit)
        y = (act @ dn[e] + bdn[e]).astype(F32)
        np.add.at(out, tok, y * w[tok, slot][:, None])
    return out
