"""The slow, deliberately different token-by-token implementation of the numpy reference
(moe_reference.py), used by check_logits.py's self-test through Model.forward(ids, naive=True).
"""

import math

import numpy as np

import moe_reference_gpt_oss as gpt_oss
from moe_reference_ops import F32, linear, rms_norm

# ----------------------------------------------------------------------------------------------------
# A deliberately different, slow implementation used by the self-test: one token at a time with a KV
# cache, per-head loops, RoPE as explicit 2-D rotations of (i, i+d/2) pairs (NeoX; GLM: of the first
# rotary_dim dims only) or of the original interleaved (2i, 2i+1) pairs (DeepSeek, no de-interleave; ERNIE,
# without the repeated cos/sin tables), angles and cos/sin in float64, and per-token routing in python floats
# (softmax or sigmoid, biases, groups, sorting, ERNIE's norm_min clamp; gpt-oss: sort the biased logits, a softmax
# of the k chosen, the attention sink as one more exp term in each softmax denominator, the experts as
# matrix-vector products on the [E, out, in] orientation the MXFP4 blocks are stored in, even rows gate and odd
# rows up, the clamps and the sigmoid in python floats). It shares only the projections/norm/MLP primitives
# (and the checkpoint reader) with Model.
# ----------------------------------------------------------------------------------------------------

def _rotate_pairs_neox(x, pos, inv_freq, mscale=1.0):
    """Rotates (i, i + rd/2) for i < rd/2 with rd = 2 * len(inv_freq), times mscale; dims >= rd are copied."""
    h = len(inv_freq)
    out = np.array(x, copy=True)
    for i in range(h):
        a = pos * float(inv_freq[i])
        c, s = math.cos(a) * mscale, math.sin(a) * mscale
        x1, x2 = x[..., i].astype(np.float64), x[..., i + h].astype(np.float64)
        out[..., i] = x1 * c - x2 * s
        out[..., i + h] = x2 * c + x1 * s
    return out


def _rotate_pairs_interleaved(x, pos, inv_freq):
    d = x.shape[-1]
    out = np.empty_like(x)
    for i in range(d // 2):
        a = pos * float(inv_freq[i])
        c, s = math.cos(a), math.sin(a)
        x1, x2 = x[..., 2 * i].astype(np.float64), x[..., 2 * i + 1].astype(np.float64)
        out[..., 2 * i] = x1 * c - x2 * s
        out[..., 2 * i + 1] = x2 * c + x1 * s
    return out


class NaiveRunner:
    def __init__(self, model):
        self.m = model

    def _route_token_noaux(self, gate_logits, bias):
        """DeepSeek-V3 / GLM-4.5 noaux_tc, one token, python floats."""
        m = self.m
        n = len(gate_logits)
        score = [1.0 / (1.0 + math.exp(-v)) for v in gate_logits]
        biased = [score[e] + float(bias[e]) for e in range(n)]
        size = n // m.n_group
        group_total = []
        for g in range(m.n_group):
            best = sorted(biased[g * size:(g + 1) * size], reverse=True)
            group_total.append(best[0] + best[1])
        kept = sorted(range(m.n_group), key=lambda g: (-group_total[g], g))[:m.topk_group]
        masked = [biased[e] if (e // size) in kept else 0.0 for e in range(n)]
        chosen = sorted(range(n), key=lambda e: (-masked[e], e))[:m.top_k]
        ws = [score[e] for e in chosen]
        if m.norm_topk:
            tot = sum(ws) + 1e-20
            ws = [v / tot for v in ws]
        return chosen, [v * m.routed_scale for v in ws]

    def _route_token_ernie(self, probs, bias):
        """ERNIE 4.5, one token, python floats: choose by prob + bias, weigh by prob / max(sum, norm_min)."""
        m = self.m
        n = len(probs)
        biased = [probs[e] + float(bias[0, e]) for e in range(n)]
        chosen = sorted(range(n), key=lambda e: (-biased[e], e))[:m.top_k]
        ws = [probs[e] for e in chosen]
        tot = max(sum(ws), m.norm_min)
        return chosen, [v / tot for v in ws]

    def _route_token(self, p, x):
        m = self.m
        gate = m.ckpt[(p + "block_sparse_moe.gate.weight") if m.type == "mixtral" else (p + "mlp.gate.weight")]
        logits = [float(np.dot(gate[e].astype(np.float64), x.astype(np.float64))) for e in range(gate.shape[0])]
        if m.router == "noaux_tc":
            return self._route_token_noaux(logits, m.ckpt[p + "mlp.gate.e_score_correction_bias"])
        mx = max(logits)
        ex = [math.exp(v - mx) for v in logits]
        z = sum(ex)
        probs = [v / z for v in ex]
        if m.router == "ernie":
            bias = m.ckpt[p + "mlp.moe_statics.e_score_correction_bias"]
            if bias.shape != (1, len(probs)):
                raise ValueError(f"{p}mlp.moe_statics.e_score_correction_bias: shape {list(bias.shape)}")
            return self._route_token_ernie(probs, bias)
        cand = list(range(len(probs)))
        deepseek = m.type == "deepseek_v2" or m.router == "deepseek_v2"
        if deepseek and m.topk_method == "group_limited_greedy":
            gsz = len(probs) // m.n_group
            gscore = [max(probs[g * gsz:(g + 1) * gsz]) for g in range(m.n_group)]
            keep = sorted(range(m.n_group), key=lambda g: -gscore[g])[:m.topk_group]
            cand = [e for e in cand if e // gsz in keep]
        chosen = sorted(cand, key=lambda e: -probs[e])[:m.top_k]
        ws = [probs[e] for e in chosen]
        if deepseek:
            if m.top_k > 1 and m.norm_topk:
                tot = sum(ws) + 1e-20
                ws = [v / tot for v in ws]
            else:
                ws = [v * m.routed_scale for v in ws]
        elif m.norm_topk:
            tot = sum(ws)
            ws = [v / tot for v in ws]
        return chosen, ws

    def _mlp_token_gpt_oss(self, i, x):
        """gpt-oss, one token: route on the biased logits, run each chosen expert as W x on the stored
        [out, in] orientation, gate/up from the even/odd output rows, clamped SwiGLU in python floats."""
        m = self.m
        p = f"model.layers.{i}.mlp."
        x64 = x.astype(np.float64)
        rw, rb = m.ckpt[p + "router.weight"], m.ckpt[p + "router.bias"]
        logits = [float(np.dot(rw[e].astype(np.float64), x64)) + float(rb[e]) for e in range(rw.shape[0])]
        chosen = sorted(range(len(logits)), key=lambda e: (-logits[e], e))[:m.top_k]
        top = max(logits[e] for e in chosen)
        ex = [math.exp(logits[e] - top) for e in chosen]
        gu, dn = gpt_oss.expert_weights_stored(m, i)   # [E, 2I, H], [E, H, I]
        bgu, bdn = m.ckpt[p + "experts.gate_up_proj_bias"], m.ckpt[p + "experts.down_proj_bias"]
        lim, alpha = m.swiglu_limit, m.swiglu_alpha
        acc = np.zeros(x.shape, dtype=np.float64)
        for e, wgt in zip(chosen, ex):
            h = gu[e].astype(np.float64) @ x64 + bgu[e].astype(np.float64)
            act = np.zeros(dn.shape[2], dtype=np.float64)
            for j in range(dn.shape[2]):
                g = min(float(h[2 * j]), lim)
                u = max(-lim, min(float(h[2 * j + 1]), lim))
                a = alpha * g
                sig = 1.0 / (1.0 + math.exp(-a)) if a >= 0 else math.exp(a) / (1.0 + math.exp(a))
                act[j] = (u + 1.0) * g * sig
            acc += (wgt / sum(ex)) * (dn[e].astype(np.float64) @ act + bdn[e].astype(np.float64))
        return acc.astype(F32)

    def _mlp_token(self, i, x):
        m = self.m
        if m.type == "gpt_oss":
            return self._mlp_token_gpt_oss(i, x)
        p = f"model.layers.{i}."
        xr = x[None, :]
        if not m.is_moe_layer(i):
            return m.gated_mlp(p + "mlp", xr)[0]
        chosen, ws = self._route_token(p, x)
        acc = np.zeros(x.shape, dtype=np.float64)
        for e, wgt in zip(chosen, ws):
            acc += wgt * m.expert(p, e, xr)[0].astype(np.float64)
        if m.type == "qwen2_moe" and m.has_shared_expert:
            g = float(np.dot(m.ckpt[p + "mlp.shared_expert_gate.weight"][0].astype(np.float64), x.astype(np.float64)))
            acc += (1.0 / (1.0 + math.exp(-g))) * m.gated_mlp(p + "mlp.shared_expert", xr)[0].astype(np.float64)
        if m.type in ("deepseek_v2", "deepseek_v3", "glm4_moe", "glm4_moe_lite", "ernie4_5_moe") and m.n_shared > 0:
            acc += m.gated_mlp(p + "mlp.shared_experts", xr)[0].astype(np.float64)
        return acc.astype(F32)

    def _attend(self, q, keys, vals, scale, sink=None):
        """q [D]; keys [T, D]; vals [T, Dv] (all past + current), float64 softmax. sink (gpt-oss): one more
        logit whose exp joins the denominator only."""
        sc = [float(np.dot(q.astype(np.float64), kk.astype(np.float64))) * scale for kk in keys]
        mx = max(sc) if sink is None else max(max(sc), sink)
        ex = [math.exp(v - mx) for v in sc]
        z = sum(ex) + (0.0 if sink is None else math.exp(sink - mx))
        out = np.zeros(vals[0].shape, dtype=np.float64)
        for e, vv in zip(ex, vals):
            out += (e / z) * vv.astype(np.float64)
        return out

    def forward(self, ids):
        m = self.m
        W = m.ckpt
        H = m.n_heads
        caches = [([], []) for _ in range(m.n_layers)]  # per layer: list over time of per-head K/V
        rows = []
        inv = m.inv_freq.astype(np.float64)
        for t, tok in enumerate(ids):
            pos = t / m.rope_linear_factor
            h = m.embed([tok])[0]
            for i in range(m.n_layers):
                p = f"model.layers.{i}."
                x = rms_norm(h[None, :], W[p + "input_layernorm.weight"], m.eps)
                kc, vc = caches[i]
                if m.type in ("deepseek_v2", "deepseek_v3", "glm4_moe_lite"):
                    q_nope, q_pe, k_pe, k_nope, v = m.mla_project(p, x)  # S = 1
                    rot = _rotate_pairs_interleaved if getattr(m, "rope_interleave", True) else _rotate_pairs_neox
                    q_pe = rot(q_pe[:, 0, :], pos, inv) * m.rope_mscale
                    k_pe = rot(k_pe[0], pos, inv) * m.rope_mscale
                    kc.append([np.concatenate([k_nope[hh, 0], k_pe]) for hh in range(H)])
                    vc.append([v[hh, 0] for hh in range(H)])
                    heads = []
                    for hh in range(H):
                        qh = np.concatenate([q_nope[hh, 0], q_pe[hh]])
                        heads.append(self._attend(qh, [kk[hh] for kk in kc], [vv[hh] for vv in vc], m.softmax_scale))
                    bias = W[p + "self_attn.o_proj.bias"] if m.attention_bias else None
                else:
                    q, k, v = m.std_qkv(p, x)  # [H,1,D], [Hkv,1,D]
                    if m.type == "ernie4_5_moe":  # adjacent pairs over the whole head
                        q = _rotate_pairs_interleaved(q[:, 0, :], pos, inv)
                        k = _rotate_pairs_interleaved(k[:, 0, :], pos, inv)
                    else:
                        q = _rotate_pairs_neox(q[:, 0, :], pos, inv, m.rope_mscale)
                        k = _rotate_pairs_neox(k[:, 0, :], pos, inv, m.rope_mscale)
                    kc.append([k[j] for j in range(m.n_kv)])
                    vc.append([v[j, 0] for j in range(m.n_kv)])
                    win = m.sliding_window(i)
                    lo = 0 if win is None else max(0, t - win + 1)
                    heads = []
                    group = H // m.n_kv
                    sinks = W[p + "self_attn.sinks"] if m.type == "gpt_oss" else None
                    for hh in range(H):
                        j = hh // group
                        heads.append(self._attend(q[hh], [kk[j] for kk in kc[lo:]], [vv[j] for vv in vc[lo:]], m.scale,
                                                  None if sinks is None else float(sinks[hh])))
                    bias = W[p + "self_attn.o_proj.bias"] if m.o_bias else None
                o = np.concatenate(heads).astype(F32)[None, :]
                h = h + linear(o, W[p + "self_attn.o_proj.weight"], bias)[0]
                x = rms_norm(h[None, :], W[p + "post_attention_layernorm.weight"], m.eps)[0]
                h = h + self._mlp_token(i, x)
            rows.append(m.lm_head(h[None, :])[0])
        return np.stack(rows).astype(F32)
