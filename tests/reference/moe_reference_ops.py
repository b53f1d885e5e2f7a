"""Numerical helpers of the numpy reference (moe_reference.py), all float32 in, float32 out: RMSNorm,
linear, activations, softmax, RoPE (NeoX, partial, de-interleaved, and ERNIE's interleaved form), DeepSeek-V2
YaRN and the YaRN of transformers' modeling_rope_utils, attention with a causal (optionally sliding-window)
mask and optional per-head attention sinks (gpt-oss), expert selection per architecture (softmax top-k,
DeepSeek-V2 MoEGate, the DeepSeek-V3 / GLM-4.5 "noaux_tc" sigmoid router, ERNIE 4.5's softmax router with a
selection-only bias, gpt-oss's top-k of biased logits with a softmax over the k, GraniteMoe's top-k of the
logits with a softmax over the k, LFM2-MoE's sigmoid router with a selection-only bias and a 1e-6 in the
normalisation, AFMoE's sigmoid router with a selection-only bias, a 1e-20 and route_scale), and gpt-oss's clamped
SwiGLU.
"""

import math

import numpy as np

F32 = np.float32


# ----------------------------------------------------------------------------------------------------
# Numerical helpers (all float32 in, float32 out)
# ----------------------------------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    """HF LlamaRMSNorm-style: x * rsqrt(mean(x^2, -1) + eps) * weight, in fp32."""
    x = np.asarray(x, dtype=F32)
    var = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
    return (x * (F32(1.0) / np.sqrt(var + F32(eps)))) * weight


def linear(x, w, b=None):
    """nn.Linear: x @ W^T (+ b). W is [out, in]."""
    y = x @ w.T
    if b is not None:
        y = y + b
    return y.astype(F32, copy=False)


def silu(x):
    with np.errstate(over="ignore"):
        return (x / (F32(1.0) + np.exp(-x))).astype(F32, copy=False)


def sigmoid(x):
    with np.errstate(over="ignore"):
        return (F32(1.0) / (F32(1.0) + np.exp(-x))).astype(F32, copy=False)


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(F32, copy=False)


def rope_inv_freq(dim, base):
    """1 / base^(arange(0, dim, 2) / dim). Computed in float64, rounded to float32 (HF computes the
    power in float32; the two agree to ~1 ulp)."""
    return (1.0 / (float(base) ** (np.arange(0, dim, 2, dtype=np.float64) / dim))).astype(F32)


def rope_cos_sin(positions, inv_freq, mscale=1.0):
    """NeoX/HF layout cos/sin tables [S, dim]: emb = cat(freqs, freqs). The angle t * inv_freq is
    formed in float32 as HF does (outer product of float32 tensors); cos/sin are evaluated in float64
    and rounded to float32."""
    t = np.asarray(positions, dtype=F32)
    freqs = (t[:, None] * inv_freq[None, :]).astype(F32)
    emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)
    cos = (np.cos(emb) * mscale).astype(F32)
    sin = (np.sin(emb) * mscale).astype(F32)
    return cos, sin


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def apply_rope(x, cos, sin):
    """x [..., S, d]; cos/sin [S, d]."""
    return (x * cos + rotate_half(x) * sin).astype(F32, copy=False)


def apply_partial_rope(x, cos, sin):
    """GLM partial rotary: NeoX rope on the first rotary_dim = cos.shape[-1] dims of each head, the rest
    passes through unchanged."""
    rd = cos.shape[-1]
    if rd == x.shape[-1]:
        return apply_rope(x, cos, sin)
    return np.concatenate([apply_rope(x[..., :rd], cos, sin), x[..., rd:]], axis=-1).astype(F32, copy=False)


def rotate_half_interleaved(x):
    """ERNIE 4.5 (the GLM-style rotate_half of modeling_ernie4_5*.py): each adjacent pair (x[2i], x[2i+1])
    becomes (-x[2i+1], x[2i])."""
    out = np.empty_like(x)
    out[..., 0::2] = -x[..., 1::2]
    out[..., 1::2] = x[..., 0::2]
    return out


def apply_rope_interleaved(x, cos, sin):
    """ERNIE 4.5 RoPE over the whole head: x [..., S, d]; cos/sin the NeoX tables [S, d] (cat(freqs, freqs)).
    As transformers does it: the first half of each table, every entry repeated twice (dims 2i and 2i+1 get
    the angle of frequency i), then x * cos + rotate_half_interleaved(x) * sin. This rotates each adjacent
    pair (2i, 2i+1) by pos * inv_freq[i]."""
    h = cos.shape[-1] // 2
    c = np.repeat(cos[..., :h], 2, axis=-1)
    s = np.repeat(sin[..., :h], 2, axis=-1)
    return (x * c + rotate_half_interleaved(x) * s).astype(F32, copy=False)


def deinterleave(x):
    """DeepSeek: x.view(..., d/2, 2).transpose(-1, -2).reshape(..., d): [a0 b0 a1 b1 ..] -> [a0 a1 .. b0 b1 ..]."""
    d = x.shape[-1]
    return x.reshape(x.shape[:-1] + (d // 2, 2)).swapaxes(-1, -2).reshape(x.shape)


# --- DeepSeek-V2 YaRN (DeepseekV2YarnRotaryEmbedding of modeling_deepseek.py) ---

def yarn_find_correction_dim(num_rotations, dim, base=10000, max_position_embeddings=2048):
    return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def yarn_find_correction_range(low_rot, high_rot, dim, base=10000, max_position_embeddings=2048):
    low = math.floor(yarn_find_correction_dim(low_rot, dim, base, max_position_embeddings))
    high = math.ceil(yarn_find_correction_dim(high_rot, dim, base, max_position_embeddings))
    return max(low, 0), min(high, dim - 1)


def yarn_get_mscale(scale=1.0, mscale=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_linear_ramp_mask(lo, hi, dim):
    if lo == hi:
        hi += 0.001
    ramp = (np.arange(dim, dtype=F32) - F32(lo)) / F32(hi - lo)
    return np.clip(ramp, 0, 1).astype(F32)


def deepseek_yarn_inv_freq_and_mscale(dim, base, rope_scaling):
    """Returns (inv_freq [dim/2] float32, cos/sin multiplier) of DeepseekV2YarnRotaryEmbedding."""
    factor = float(rope_scaling["factor"])
    orig = rope_scaling.get("original_max_position_embeddings", 4096)
    beta_fast = rope_scaling.get("beta_fast", 32)
    beta_slow = rope_scaling.get("beta_slow", 1)
    mscale = rope_scaling.get("mscale", 1)
    mscale_all_dim = rope_scaling.get("mscale_all_dim", 0)
    exps = np.arange(0, dim, 2, dtype=np.float64) / dim
    freq_extra = (1.0 / (float(base) ** exps)).astype(F32)
    freq_inter = (1.0 / (factor * float(base) ** exps)).astype(F32)
    low, high = yarn_find_correction_range(beta_fast, beta_slow, dim, base, orig)
    inv_freq_mask = F32(1.0) - yarn_linear_ramp_mask(low, high, dim // 2)
    inv_freq = (freq_inter * (F32(1.0) - inv_freq_mask) + freq_extra * inv_freq_mask).astype(F32)
    m = float(yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim))
    return inv_freq, m


# --- YaRN of transformers' modeling_rope_utils (_compute_yarn_parameters), used by deepseek_v3,
# glm4_moe and glm4_moe_lite (the native HF models; DeepSeek-V2 above follows its remote code) ---

def hf_yarn_inv_freq_and_attention_factor(dim, base, rp, max_position_embeddings, original_max=None):
    """rp: the rope_scaling / rope_parameters dict. Returns (inv_freq [dim/2] float32, cos/sin multiplier).
    Differences from DeepSeek-V2's remote YaRN: the correction range uses original_max_position_embeddings
    (top-level config key first, then rp's, else max_position_embeddings); factor defaults to
    max_position_embeddings / original; the multiplier is rp["attention_factor"] if set, else
    get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) only when BOTH are non-zero, else
    get_mscale(factor) = 0.1 ln(factor) + 1; `truncate` (default true) floors/ceils the range."""
    if original_max is None:
        original_max = rp.get("original_max_position_embeddings") or max_position_embeddings
    factor = rp.get("factor")
    factor = float(max_position_embeddings) / float(original_max) if factor is None else float(factor)
    attention_factor = rp.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = rp.get("mscale"), rp.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_get_mscale(factor)
    beta_fast = rp.get("beta_fast") or 32
    beta_slow = rp.get("beta_slow") or 1
    exps = np.arange(0, dim, 2, dtype=np.float64) / dim
    freq_extra = (1.0 / (float(base) ** exps)).astype(F32)
    freq_inter = (1.0 / (factor * float(base) ** exps)).astype(F32)
    low = yarn_find_correction_dim(beta_fast, dim, base, original_max)
    high = yarn_find_correction_dim(beta_slow, dim, base, original_max)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    extra_mask = F32(1.0) - yarn_linear_ramp_mask(low, high, dim // 2)
    inv_freq = (freq_inter * (F32(1.0) - extra_mask) + freq_extra * extra_mask).astype(F32)
    return inv_freq, float(attention_factor)


# --- routing ---

def topk_desc(x, k):
    """Indices of the k largest per row, in descending order (ties: lower index first)."""
    idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return idx, np.take_along_axis(x, idx, axis=-1)


def select_experts_noaux_tc(scores, bias, top_k, n_group, topk_group, norm_topk, routed_scale,
                           mask_value=0.0):
    """The "noaux_tc" router of DeepSeek-V3 / GLM-4.5 (DeepseekV3TopkRouter, Glm4MoeMoE) given the sigmoid
    scores [S, E] (fp32) and e_score_correction_bias [E]:
      choice = scores + bias; group score = sum of the 2 largest `choice` of each of n_group equal groups;
      keep the topk_group best groups, set `choice` of the other groups' experts to mask_value (0.0 as in
      transformers' masked_fill(..., 0.0)); top_k of `choice`; the weights are the UNBIASED scores of the
      chosen experts, divided by (sum + 1e-20) iff norm_topk_prob, then always * routed_scaling_factor.
    Ties go to the lower index (groups and experts)."""
    s, e = scores.shape
    if n_group < 1 or e % n_group != 0 or e // n_group < 2 or not (1 <= topk_group <= n_group):
        raise ValueError(f"noaux_tc router: {e} experts, n_group {n_group}, topk_group {topk_group}: the groups "
                         f"must split the experts evenly, two or more per group")
    choice = (scores + bias[None, :].astype(F32)).astype(F32)
    grouped = np.sort(choice.reshape(s, n_group, e // n_group), axis=-1)
    gscore = (grouped[..., -1] + grouped[..., -2]).astype(F32)
    gidx, _ = topk_desc(gscore, topk_group)
    gmask = np.zeros(gscore.shape, dtype=bool)
    np.put_along_axis(gmask, gidx, True, axis=-1)
    smask = np.repeat(gmask, e // n_group, axis=-1)
    idx, _ = topk_desc(np.where(smask, choice, F32(mask_value)), top_k)
    w = np.take_along_axis(scores, idx, axis=-1)
    if norm_topk:
        w = w / (np.sum(w, axis=-1, keepdims=True) + F32(1e-20))
    w = w * F32(routed_scale)
    return idx, w.astype(F32)


def select_experts_ernie(probs, bias, top_k, norm_min):
    """The router of ERNIE 4.5 MoE (Ernie4_5_MoeSparseMoeBlock / Ernie4_5_MoeTopKRouter) given the softmax
    probs [S, E] (fp32) and moe_statics.e_score_correction_bias [E]: the experts are the top_k of
    probs + bias (the bias only chooses); their weights are the UNBIASED probs, divided by
    max(sum of the chosen probs, moe_norm_min). No scaling factor, no groups. Ties go to the lower index."""
    choice = (probs + bias[None, :].astype(F32)).astype(F32)
    idx, _ = topk_desc(choice, top_k)
    w = np.take_along_axis(probs, idx, axis=-1)
    w = w / np.maximum(np.sum(w, axis=-1, keepdims=True, dtype=F32), F32(norm_min))
    return idx, w.astype(F32)


def causal_mask(s, sliding_window=None):
    """[S, S] boolean: True where query i may attend key j (j <= i and, with a window W, i - j < W)."""
    i = np.arange(s)[:, None]
    j = np.arange(s)[None, :]
    ok = j <= i
    if sliding_window is not None:
        ok &= (i - j) < sliding_window
    return ok


def attention(q, k, v, scale, sliding_window=None, sinks=None):
    """q [H, S, D], k [Hkv, S, D], v [Hkv, S, Dv] -> [S, H*Dv]. GQA by repeating kv heads
    (query head h reads kv head h // (H/Hkv)), causal, softmax in fp32.
    sinks [H] (gpt-oss): one extra logit per query head appended to every row of scores before the softmax
    (the max is taken over it too) and dropped afterwards, so the kept probabilities sum to less than 1."""
    h, s, _ = q.shape
    rep = h // k.shape[0]
    if rep > 1:
        k = np.repeat(k, rep, axis=0)
        v = np.repeat(v, rep, axis=0)
    scores = (q @ k.transpose(0, 2, 1)) * F32(scale)
    scores = np.where(causal_mask(s, sliding_window)[None], scores, F32(-np.inf))
    if sinks is None:
        probs = softmax(scores, axis=-1)
    else:
        col = np.broadcast_to(np.asarray(sinks, dtype=F32)[:, None, None], (h, s, 1))
        probs = softmax(np.concatenate([scores, col], axis=-1), axis=-1)[..., :-1]
    out = probs @ v
    return out.transpose(1, 0, 2).reshape(s, -1).astype(F32, copy=False)


def select_experts(model_type, probs, top_k, norm_topk, routed_scale=1.0, topk_method="greedy",
                   n_group=1, topk_group=1):
    """Routing of the HF MoE blocks given the router softmax probs [S, E] (fp32).
    qwen2_moe/qwen3_moe/olmoe: top-k of probs, divided by their sum iff norm_topk_prob.
    mixtral: top-k of probs, always divided by their sum.
    deepseek_v2 (MoEGate of modeling_deepseek.py, V2): greedy or group_limited_greedy top-k, then
      `if top_k > 1 and norm_topk_prob: w /= (sum + 1e-20) else: w *= routed_scaling_factor`."""
    k = top_k
    if model_type == "deepseek_v2":
        if topk_method == "group_limited_greedy":
            s, e = probs.shape
            gs = probs.reshape(s, n_group, e // n_group).max(axis=-1)
            gidx, _ = topk_desc(gs, topk_group)
            gmask = np.zeros(gs.shape, dtype=bool)
            np.put_along_axis(gmask, gidx, True, axis=-1)
            smask = np.repeat(gmask, e // n_group, axis=-1)
            idx, w = topk_desc(np.where(smask, probs, F32(0.0)), k)
        else:
            idx, w = topk_desc(probs, k)
        if k > 1 and norm_topk:
            w = w / (np.sum(w, axis=-1, keepdims=True) + F32(1e-20))
        else:
            w = w * F32(routed_scale)
    else:
        idx, w = topk_desc(probs, k)
        if norm_topk or model_type == "mixtral":
            w = w / np.sum(w, axis=-1, keepdims=True)
    return idx, w.astype(F32)


def select_experts_gpt_oss(logits, top_k):
    """gpt-oss (GptOssTopKRouter) given the router logits [S, E] = x @ W^T + b (fp32): the experts are the
    top_k logits; their weights are the softmax over those k logits only. Ties go to the lower index."""
    idx, top = topk_desc(logits, top_k)
    return idx, softmax(top, axis=-1)


def select_experts_granite(logits, top_k):
    """GraniteMoe (GraniteMoeTopKGating = jetmoe's JetMoeTopKGating) given the router logits [S, E] = x @ W^T
    (fp32, no bias): the experts are the top_k logits, in descending order; their weights are the softmax over
    those k logits only, which equals the softmax over all experts restricted to the k and renormalised
    (mixtral's rule). Ties go to the lower index."""
    idx, top = topk_desc(logits, top_k)
    return idx, softmax(top, axis=-1)


def select_experts_lfm2(scores, bias, top_k, norm_topk, routed_scale, eps=1e-6):
    """LFM2-MoE (Lfm2MoeSparseMoeBlock.route_tokens_to_experts) given the sigmoid scores [S, E] (fp32) and
    expert_bias [E] or None (use_expert_bias false): the experts are the top_k of scores + bias (of the scores
    without a bias), in descending order; their weights are the UNBIASED scores, divided by (sum + 1e-6) iff
    norm_topk_prob, then always times routed_scaling_factor. No groups. Ties go to the lower index."""
    choice = scores if bias is None else (scores + np.asarray(bias, dtype=F32)[None, :]).astype(F32)
    idx, _ = topk_desc(choice, top_k)
    w = np.take_along_axis(scores, idx, axis=-1).astype(F32)
    if norm_topk:
        w = w / (np.sum(w, axis=-1, keepdims=True, dtype=F32) + F32(eps))
    w = w * F32(routed_scale)
    return idx, w.astype(F32)


def select_experts_afmoe(scores, bias, top_k, route_scale, eps=1e-20):
    """AFMoE (AfmoeTokenChoiceRouter) given the sigmoid scores [S, E] (fp32) and expert_bias [E] (fp32): the experts
    are the top_k of scores + bias, in descending order; their weights are the UNBIASED scores of those experts,
    always divided by (their sum + 1e-20) (top-1 included: s / (s + 1e-20) = 1), then times route_scale. No groups.
    Ties go to the lower index."""
    choice = (scores + np.asarray(bias, dtype=F32)[None, :]).astype(F32)
    idx, _ = topk_desc(choice, top_k)
    w = np.take_along_axis(scores, idx, axis=-1).astype(F32)
    w = w / (np.sum(w, axis=-1, keepdims=True, dtype=F32) + F32(eps))
    return idx, (w * F32(route_scale)).astype(F32)


def gpt_oss_swiglu(gate_up, alpha=1.702, limit=7.0):
    """The clamped SwiGLU of GptOssExperts on gate_up [..., 2I] (the x @ gate_up_proj + bias output):
    gate = the even columns, up = the odd ones; gate is clamped above at limit, up to [-limit, limit];
    returns (up + 1) * gate * sigmoid(alpha * gate), [..., I]."""
    gate = np.minimum(gate_up[..., 0::2], F32(limit))
    up = np.clip(gate_up[..., 1::2], F32(-limit), F32(limit))
    glu = gate * sigmoid(gate * F32(alpha))
    return ((up + F32(1.0)) * glu).astype(F32, copy=False)
