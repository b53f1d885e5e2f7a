"""granitemoehybrid (GraniteMoeHybridForCausalLM: IBM Granite 4.0-H, Mamba2 + attention + MoE) for the numpy
reference (moe_reference.py).

Written from transformers' modular_granitemoehybrid.py / configuration_granitemoehybrid.py (the decoder layer,
the model's position_embedding_type switch) and bamba's modeling_bamba.py (BambaMixer.torch_forward, the Mamba2
mixer GraniteMoeHybridMambaLayer is; BambaRMSNormGated). What this type brings over granitemoeshared:
  - `layer_types` (alias `layers_block_type`): "mamba" or "attention" per layer; missing, null or [] = all mamba;
  - attention layers: GraniteMoe's Llama attention (scale attention_multiplier, q/k/v/o biases iff
    attention_bias) with NeoX RoPE only when position_embedding_type == "rope"; null or "nope" (Granite 4.0-H's
    value) = no positional embedding at all;
  - mamba layers (the Mamba2 mixer; d_inner = mamba_expand * hidden, P = d_inner / n_heads, G groups, N d_state,
    conv_dim = d_inner + 2 G N): in_proj [d_inner + conv_dim + n_heads, H] (+ bias iff mamba_proj_bias) gives,
    in this order, z [d_inner] (the gate), xBC [conv_dim], dt [n_heads]; xBC goes through a depthwise causal
    conv1d (weight [conv_dim, 1, K], bias iff mamba_conv_bias, zeros before the first token) and SiLU, then splits
    into x [d_inner] (head h = x[h P:(h+1) P]), B [G N], C [G N] (head h reads group h // (n_heads / G));
    dt = softplus(dt + dt_bias), A = -exp(A_log); per head the state S [P, N]:
    S = exp(dt A) S + dt x B^T, y = S C + D x; then the gated RMSNorm over the whole d_inner (no groups):
    y = y * silu(z), y = y * rsqrt(mean(y^2) + rms_norm_eps) * norm.weight; out = out_proj(y) (+ bias iff
    mamba_proj_bias);
  - every layer: the shared MLP (shared_mlp.input_linear [2S, H] gate rows first, output_linear [H, S]) and, iff
    num_local_experts > 0, GraniteMoe's routed experts (block_sparse_moe.*) added to it; the four multipliers
    as granitemoe.
The vectorised pass runs the chunked SSD scan of torch_forward (chunks of `Model.mamba_chunk`, from
mamba_chunk_size: segment sums inside a chunk, the state carried from chunk to chunk); ssd_recurrent is the
token-by-token recurrence (and the naive pass in moe_reference_naive.py has its own, in float64).
"""

import math

import numpy as np

import moe_reference_granite as granite
from moe_reference_ops import F32, apply_rope, attention, linear, rms_norm, silu

TYPES = ("granitemoehybrid",)
LAYER_KINDS = ("mamba", "attention")
# GraniteMoeHybridConfig defaults for keys a config.json may omit (null counts as missing, except for the four
# multipliers, as granitemoe). num_key_value_heads: missing or null means num_attention_heads.
HYBRID_DEFAULTS = dict(granite.GRANITE_DEFAULTS, shared_intermediate_size=1024, mamba_n_heads=128,
                       mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256,
                       mamba_conv_bias=True, mamba_proj_bias=False)
POSITION_TYPES = (None, "nope", "rope")


def _val(c, key):
    v = c.get(key)
    return HYBRID_DEFAULTS[key] if v is None else v


def _int(c, key, default=None, lo=0):
    v = c.get(key)
    v = (HYBRID_DEFAULTS[key] if default is None else default) if v is None else v
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"granitemoehybrid: {key} must be an integer >= {lo}, got {v!r}")
    return v


def init(m, c):
    """Sets the attributes the hybrid forward, the MoE and the naive pass read, from a granitemoehybrid
    config.json."""
    t = m.type
    m.hidden = _int(c, "hidden_size", lo=1)
    m.n_layers = _int(c, "num_hidden_layers", lo=1)
    m.n_heads = _int(c, "num_attention_heads", lo=1)
    m.vocab = _int(c, "vocab_size", lo=1)
    m.n_kv = _int(c, "num_key_value_heads", m.n_heads, lo=1)
    if m.n_heads % m.n_kv:
        raise ValueError(f"{t}: num_attention_heads {m.n_heads} is not a multiple of num_key_value_heads {m.n_kv}")
    if m.hidden % m.n_heads:
        raise ValueError(f"{t}: hidden_size {m.hidden} is not a multiple of num_attention_heads {m.n_heads}")
    m.head_dim = m.hidden // m.n_heads
    hd = c.get("head_dim")
    if hd is not None and hd != m.head_dim:
        # GraniteMoeHybridAttention: getattr(config, "head_dim", hidden // heads); the config class defines no
        # head_dim, so only a stray key would change it. Refused rather than chosen (as granitemoe).
        raise NotImplementedError(f"{t}: head_dim {hd!r} != hidden_size / num_attention_heads = {m.head_dim}")
    act = _val(c, "hidden_act")
    if act != "silu":
        raise NotImplementedError(f"{t} hidden_act {act!r} (only silu: the experts, the shared MLP, the conv1d)")
    m.eps = float(_val(c, "rms_norm_eps"))
    m.tie = bool(_val(c, "tie_word_embeddings"))
    # MoE: num_local_experts 0 = dense (the shared MLP alone; intermediate_size and num_experts_per_tok unread).
    m.n_experts = _int(c, "num_local_experts")
    if m.n_experts > 0:
        m.inter = _int(c, "intermediate_size", lo=1)
        m.top_k = _int(c, "num_experts_per_tok", lo=1)
        if m.top_k > m.n_experts:
            raise ValueError(f"{t}: num_experts_per_tok {m.top_k} must be in [1, num_local_experts {m.n_experts}]")
    else:
        m.inter, m.top_k = 0, 0
    m.shared_inter = _int(c, "shared_intermediate_size")
    if m.shared_inter < 1:
        # GraniteMoeHybridDecoderLayer always builds and calls shared_mlp: width 0 would be [0, H] tensors adding
        # nothing. No published config does that; refused.
        raise NotImplementedError(f"{t}: shared_intermediate_size {m.shared_inter} (the shared MLP is always there)")
    for key in granite.MULTIPLIERS:
        v = c.get(key, HYBRID_DEFAULTS[key])
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{t}: {key} must be a number, got {v!r}")
        setattr(m, key, float(v))
    if m.logits_scaling == 0:
        raise ValueError(f"{t}: logits_scaling 0 (the logits are divided by it)")
    m.router = "granite"
    m.qkv_bias = m.o_bias = bool(_val(c, "attention_bias"))
    m.clip_qkv = None
    m.qk_norm_per_head = False
    m.scale = m.attention_multiplier
    _init_layers(m, c)
    _init_mamba(m, c)
    pe = c.get("position_embedding_type")
    if pe not in POSITION_TYPES:
        # transformers builds the rotary embedding iff the value is "rope" and takes anything else as none;
        # the docstring allows [None, "rope"], the published configs say "nope". Other values: refused.
        raise NotImplementedError(f"{t}: position_embedding_type {pe!r} (only null, 'nope', 'rope')")
    m.use_rope = pe == "rope"
    if m.use_rope:
        granite._init_rope(m, c)
    else:
        m.inv_freq, m.rotary_dim, m.rope_type = None, 0, "none"
        m.rope_linear_factor, m.rope_mscale = 1.0, 1.0


def _init_layers(m, c):
    kinds = c.get("layer_types")
    if kinds is None:
        kinds = c.get("layers_block_type")          # GraniteMoeHybridConfig.attribute_map alias
    if not kinds:                                   # layers_block_type: null or [] -> every layer mamba
        kinds = ["mamba"] * m.n_layers
    if not isinstance(kinds, list) or len(kinds) != m.n_layers or any(k not in LAYER_KINDS for k in kinds):
        raise ValueError(f"{m.type}: layer_types {kinds!r}: want {m.n_layers} of {LAYER_KINDS}")
    m.layer_types = list(kinds)


def _init_mamba(m, c):
    t = m.type
    m.mamba_heads = _int(c, "mamba_n_heads", lo=1)
    m.mamba_groups = _int(c, "mamba_n_groups", lo=1)
    m.mamba_state = _int(c, "mamba_d_state", lo=1)
    m.mamba_conv = _int(c, "mamba_d_conv", lo=1)
    m.mamba_expand = _int(c, "mamba_expand", lo=1)
    m.mamba_chunk = _int(c, "mamba_chunk_size", lo=1)
    m.mamba_inner = m.mamba_expand * m.hidden
    if m.mamba_inner % m.mamba_heads:
        raise ValueError(f"{t}: mamba_n_heads {m.mamba_heads} must divide mamba_expand * hidden_size {m.mamba_inner}")
    dh = c.get("mamba_d_head", "auto")
    if dh is None or dh == "auto":
        dh = m.mamba_inner // m.mamba_heads
    if isinstance(dh, bool) or not isinstance(dh, int) or dh * m.mamba_heads != m.mamba_inner:
        raise ValueError(f"{t}: mamba_d_head {dh!r} x mamba_n_heads {m.mamba_heads} != mamba_expand * hidden_size "
                         f"{m.mamba_inner}")
    m.mamba_head_dim = dh
    if m.mamba_heads % m.mamba_groups:
        raise ValueError(f"{t}: mamba_n_groups {m.mamba_groups} must divide mamba_n_heads {m.mamba_heads}")
    m.mamba_conv_dim = m.mamba_inner + 2 * m.mamba_groups * m.mamba_state
    m.mamba_conv_bias = bool(_val(c, "mamba_conv_bias"))
    m.mamba_proj_bias = bool(_val(c, "mamba_proj_bias"))
    lim = c.get("time_step_limit")
    if lim is not None and not (isinstance(lim, (list, tuple)) and len(lim) == 2 and lim[0] == 0
                                and lim[1] == math.inf):
        # Not a GraniteMoeHybridConfig key (the mixer's limit is (0, inf), a no-op clamp); refused if set otherwise.
        raise NotImplementedError(f"{t}: time_step_limit {lim!r} (only (0, inf))")


# ----------------------------------------------------------------------------------------------------
# names
# ----------------------------------------------------------------------------------------------------

def expected_shapes(m):
    """{name: shape} of the HF checkpoint for this config."""
    H, V = m.hidden, m.vocab
    out = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not m.tie:
        out["lm_head.weight"] = (V, H)
    di, cd, nh, K = m.mamba_inner, m.mamba_conv_dim, m.mamba_heads, m.mamba_conv
    D = m.head_dim
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (H,)
        out[p + "post_attention_layernorm.weight"] = (H,)
        if m.layer_types[i] == "mamba":
            a = p + "mamba."
            out[a + "in_proj.weight"] = (di + cd + nh, H)
            if m.mamba_proj_bias:
                out[a + "in_proj.bias"] = (di + cd + nh,)
            out[a + "conv1d.weight"] = (cd, 1, K)
            if m.mamba_conv_bias:
                out[a + "conv1d.bias"] = (cd,)
            out[a + "dt_bias"] = (nh,)
            out[a + "A_log"] = (nh,)
            out[a + "D"] = (nh,)
            out[a + "norm.weight"] = (di,)
            out[a + "out_proj.weight"] = (H, di)
            if m.mamba_proj_bias:
                out[a + "out_proj.bias"] = (H,)
        else:
            a = p + "self_attn."
            for name, o, n in (("q_proj", m.n_heads * D, H), ("k_proj", m.n_kv * D, H), ("v_proj", m.n_kv * D, H),
                               ("o_proj", H, m.n_heads * D)):
                out[a + name + ".weight"] = (o, n)
                if m.qkv_bias:
                    out[a + name + ".bias"] = (o,)
        if m.n_experts > 0:
            E, I = m.n_experts, m.inter
            out[p + granite.ROUTER] = (E, H)
            out[p + granite.EXPERTS_IN] = (E, 2 * I, H)
            out[p + granite.EXPERTS_OUT] = (E, H, I)
        out[p + granite.SHARED_IN] = (2 * m.shared_inter, H)
        out[p + granite.SHARED_OUT] = (H, m.shared_inter)
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

def softplus(x):
    """torch's F.softplus (beta 1, threshold 20): x above 20, else log(1 + exp(x))."""
    x = np.asarray(x, dtype=F32)
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, F32(20))))).astype(F32)


def causal_conv1d(x, w, b=None, state=None):
    """Depthwise causal conv over time, before the activation. x [S, C]; w [C, K] (conv1d.weight [C, 1, K]
    squeezed); b [C] or None; state [K-1, C] the inputs before x (zeros if None: nn.Conv1d's padding K-1 with the
    outputs cut to the first S). out[t, c] = b[c] + sum_j w[c, j] * xx[t + j, c] with xx the state followed by x
    (w[c, K-1] multiplies the current input). Returns (out [S, C], new state = the last K-1 rows of xx)."""
    k = w.shape[1]
    if state is None:
        state = np.zeros((k - 1, x.shape[1]), dtype=F32)
    xx = np.concatenate([state, x], axis=0).astype(F32)
    s = x.shape[0]
    out = np.zeros(x.shape, dtype=F32)
    for j in range(k):
        out += xx[j:j + s] * w[:, j][None, :]
    if b is not None:
        out += b[None, :]
    return out.astype(F32), xx[xx.shape[0] - (k - 1):]


def gated_rms_norm(y, z, w, eps):
    """BambaRMSNormGated (norm_before_gate False): y * silu(z), then RMSNorm over the last dim, then * w."""
    return rms_norm(np.asarray(y, dtype=F32) * silu(np.asarray(z, dtype=F32)), w, eps)


def _heads(bc, n_heads):
    """[S, G, N] -> [S, n_heads, N]: head h reads group h // (n_heads / G) (repeat_interleave)."""
    return np.repeat(bc, n_heads // bc.shape[1], axis=1)


def ssd_recurrent(x, dt, A, B, C, state=None):
    """The Mamba2 scan one token at a time. x [S, nh, P]; dt [S, nh] (after softplus); A [nh] (negative);
    B, C [S, G, N]. Per head: S = exp(dt A) S + dt x B^T; y = S C. Returns (y [S, nh, P] without the D term,
    final state [nh, P, N])."""
    s, nh, p = x.shape
    Bh, Ch = _heads(B, nh), _heads(C, nh)
    S = np.zeros((nh, p, B.shape[-1]), dtype=F32) if state is None else np.array(state, dtype=F32)
    y = np.zeros(x.shape, dtype=F32)
    for t in range(s):
        dA = np.exp(dt[t] * A).astype(F32)                                           # [nh]
        S = (dA[:, None, None] * S + (dt[t][:, None] * x[t])[:, :, None] * Bh[t][:, None, :]).astype(F32)
        y[t] = np.einsum("hpn,hn->hp", S, Ch[t])
    return y, S


def segment_sum(a):
    """a [..., n] -> [..., n, n] with [t, s] = a[s+1] + ... + a[t] for s <= t (0 on the diagonal), -inf above:
    a cumulative sum of a masked copy (as transformers' segment_sum), not a difference of cumulative sums."""
    n = a.shape[-1]
    rep = np.broadcast_to(a[..., :, None], a.shape + (n,))                    # rep[..., k, s] = a[k]
    strict = np.tril(np.ones((n, n), dtype=bool), -1)                         # k > s
    seg = np.cumsum(np.where(strict, rep, F32(0)), axis=-2, dtype=F32)      # sum over s < k <= t
    return np.where(np.tril(np.ones((n, n), dtype=bool)), seg, F32(-np.inf)).astype(F32)


def ssd_chunked(x, dt, A, B, C, chunk, state=None):
    """The same scan in chunks of `chunk` tokens (the last may be shorter), as torch_forward's SSD: with
    a_t = dt_t A, xd_t = dt_t x_t, Acum the cumulative sum of a inside the chunk and S0 the state before it,
      y_t = sum_{s <= t} (C_t . B_s) exp(segsum[t, s]) xd_s + exp(Acum_t) S0 C_t,
      S_end = exp(Acum_last) S0 + sum_s exp(Acum_last - Acum_s) xd_s B_s^T.
    Returns (y [S, nh, P] without the D term, final state [nh, P, N])."""
    s, nh, p = x.shape
    Bh, Ch = _heads(B, nh).astype(F32), _heads(C, nh).astype(F32)
    S = np.zeros((nh, p, B.shape[-1]), dtype=F32) if state is None else np.array(state, dtype=F32)
    y = np.zeros(x.shape, dtype=F32)
    for c0 in range(0, s, chunk):
        c1 = min(c0 + chunk, s)
        a = (dt[c0:c1] * A[None, :]).T.astype(F32)                                  # [nh, n]
        xd = (x[c0:c1] * dt[c0:c1][:, :, None]).astype(F32)                          # [n, nh, P]
        bc, cc = Bh[c0:c1], Ch[c0:c1]                                                # [n, nh, N]
        acum = np.cumsum(a, axis=-1, dtype=F32)                                      # [nh, n]
        L = np.exp(segment_sum(a))                                                   # [nh, t, s]
        cb = np.einsum("thn,shn->hts", cc, bc)
        y_diag = np.einsum("hts,shp->thp", cb * L, xd)
        y_off = np.einsum("hpn,thn->thp", S, cc) * np.exp(acum).T[:, :, None]
        y[c0:c1] = y_diag + y_off
        decay = np.exp(acum[:, -1:] - acum)                                          # [nh, n]
        S = (np.exp(acum[:, -1])[:, None, None] * S
             + np.einsum("shp,shn->hpn", xd * decay.T[:, :, None], bc)).astype(F32)
    return y.astype(F32), S


# ----------------------------------------------------------------------------------------------------
# layers (vectorised)
# ----------------------------------------------------------------------------------------------------

def split_in_proj(m, zxbcdt):
    """in_proj's output [S, d_inner + conv_dim + n_heads] -> (z [S, d_inner], xBC [S, conv_dim], dt [S, nh])."""
    di, cd = m.mamba_inner, m.mamba_conv_dim
    return zxbcdt[:, :di], zxbcdt[:, di:di + cd], zxbcdt[:, di + cd:]


def split_xbc(m, xbc):
    """The conv's output [S, conv_dim] -> (x [S, nh, P], B [S, G, N], C [S, G, N])."""
    s = xbc.shape[0]
    di, gn = m.mamba_inner, m.mamba_groups * m.mamba_state
    return (xbc[:, :di].reshape(s, m.mamba_heads, m.mamba_head_dim),
            xbc[:, di:di + gn].reshape(s, m.mamba_groups, m.mamba_state),
            xbc[:, di + gn:].reshape(s, m.mamba_groups, m.mamba_state))


def _opt(m, name, enabled):
    return m.ckpt[name] if enabled else None


def mamba_mixer(m, i, x):
    """GraniteMoeHybridMambaLayer (BambaMixer.torch_forward without a cache) over the whole sequence."""
    W = m.ckpt
    a = f"model.layers.{i}.mamba."
    s = x.shape[0]
    z, xbc, dt = split_in_proj(m, linear(x, W[a + "in_proj.weight"], _opt(m, a + "in_proj.bias", m.mamba_proj_bias)))
    xbc, _ = causal_conv1d(xbc, W[a + "conv1d.weight"][:, 0, :], _opt(m, a + "conv1d.bias", m.mamba_conv_bias))
    xs, B, C = split_xbc(m, silu(xbc))
    dt = softplus(dt + W[a + "dt_bias"].astype(F32))
    A = (-np.exp(W[a + "A_log"].astype(F32))).astype(F32)
    y, _ = ssd_chunked(xs, dt, A, B, C, m.mamba_chunk)
    y = y + W[a + "D"].astype(F32)[None, :, None] * xs
    y = gated_rms_norm(y.reshape(s, m.mamba_inner), z, W[a + "norm.weight"], m.eps)
    return linear(y, W[a + "out_proj.weight"], _opt(m, a + "out_proj.bias", m.mamba_proj_bias))


def attention_layer(m, i, x, positions):
    """GraniteMoeHybridAttention: GraniteMoe's Llama attention, RoPE only with position_embedding_type rope."""
    p = f"model.layers.{i}."
    q, k, v = m.std_qkv(p, x)
    if m.use_rope:
        cos, sin = m.rope_tables(positions)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    o = attention(q, k, v, m.scale)
    return linear(o, m.ckpt[p + "self_attn.o_proj.weight"], _opt(m, p + "self_attn.o_proj.bias", m.o_bias))


def mlp(m, i, x):
    """block_sparse_moe(x) + shared_mlp(x) (num_local_experts > 0; granitemoeshared's MoE), else shared_mlp(x)."""
    if m.n_experts > 0:
        return granite.moe(m, i, x)                 # adds the shared MLP (shared_inter >= 1 here)
    s_in, s_out = granite.shared_weights(m, i)
    S = m.shared_inter
    y = linear(x, s_in)
    return linear(silu(y[:, :S]) * y[:, S:], s_out)


def forward(m, ids):
    """GraniteMoeHybridForCausalLM: h = embed * embedding_multiplier; per layer
    h += mixer(norm(h)) * residual_multiplier (mamba or attention), h += mlp(norm(h)) * residual_multiplier;
    logits = lm_head(norm(h)) / logits_scaling."""
    check_shapes(m)
    W = m.ckpt
    h = (m.embed(ids) * F32(m.embedding_multiplier)).astype(F32)
    positions = np.arange(h.shape[0])
    r = F32(m.residual_multiplier)
    for i in range(m.n_layers):
        p = f"model.layers.{i}."
        x = rms_norm(h, W[p + "input_layernorm.weight"], m.eps)
        mix = mamba_mixer(m, i, x) if m.layer_types[i] == "mamba" else attention_layer(m, i, x, positions)
        h = (h + mix * r).astype(F32)
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], m.eps)
        h = (h + mlp(m, i, x) * r).astype(F32)
    return (m.lm_head(h) / F32(m.logits_scaling)).astype(F32)
