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
# (and the checkpoint reader) with Model. qwen3_next / qwen3_5_moe (forward_qwen3_next) share nothing but the
# reader: float64 matrix-vector products, the DeltaNet projections split by explicit per-head offsets, an explicit
# conv state (the last K-1 inputs) and one recurrent delta-rule step per token and value head, the gated attention
# with a KV cache and per-head 2-D rotations, routing in python floats. granitemoe / granitemoeshared
# (forward_granite) likewise: float64 matrix-vector products, the multipliers applied as python floats, per-head
# rotations and a KV cache, the router by sorting python floats, the fused experts sliced per expert into gate and up.
# granitemoehybrid (forward_granite_hybrid) adds the Mamba2 mixer one token at a time: in_proj split by explicit
# offsets, an explicit conv state (the last K-1 xBC vectors), the plain recurrence S = exp(dt A) S + dt x B^T per
# head in float64, softplus and the decays in python floats (no chunks); its attention without rotations under
# position_embedding_type nope. lfm2_moe (forward_lfm2) likewise shares only the reader: float64 matrix-vector
# products, in_proj's output split by explicit offsets into B, C, x, an explicit conv state (the previous L-1 B*x
# vectors, zeros before the first token) with one window dot product per channel, per-head q/k norms and 2-D
# rotations with a KV cache, the router by sorting python floats (sigmoid, + expert_bias to choose, the unbiased
# sigmoid to weigh, / (sum + 1e-6)), the per-expert SwiGLU as matrix-vector products. afmoe (forward_afmoe) likewise:
# float64 matrix-vector products, per-head q/k norms, 2-D rotations only on the sliding layers, a KV cache of
# (position, k, v) whose keys a sliding layer filters by t - u < sliding_window, the sigmoid output gate per element in
# python floats, the post norms, the router by sorting python floats (+ expert_bias to choose, the unbiased sigmoid
# / (sum + 1e-20) x route_scale to weigh), the shared experts added ungated.
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

    # --- qwen3_next / qwen3_5_moe: one recurrent step per token, per-head loops, float64 ---

    @staticmethod
    def _zc_norm64(x, w, eps):
        x = np.asarray(x, dtype=np.float64)
        return x / math.sqrt(float(np.mean(x * x)) + eps) * (1.0 + w.astype(np.float64))

    def _gdn_token(self, i, x, st):
        """One Gated DeltaNet step. st: {"conv": list of the previous K-1 conv inputs, "S": per value head
        [dk, dv] float64 states}. The projections are split by explicit offsets per head."""
        m = self.m
        W = m.ckpt
        a = f"{m.prefix}layers.{i}.linear_attn."
        nk, nv, dk, dv = m.lin_nk, m.lin_nv, m.lin_dk, m.lin_dv
        r = nv // nk
        qs, ks, vs, zs, bs, as_ = [], [], [], [], [], []
        if m.type == "qwen3_next":
            qkvz = W[a + "in_proj_qkvz.weight"].astype(np.float64) @ x
            ba = W[a + "in_proj_ba.weight"].astype(np.float64) @ x
            grp = 2 * dk + 2 * r * dv
            for j in range(nk):
                base = j * grp
                qs.append(qkvz[base:base + dk])
                ks.append(qkvz[base + dk:base + 2 * dk])
                for u in range(r):
                    vs.append(qkvz[base + 2 * dk + u * dv:base + 2 * dk + (u + 1) * dv])
                    zs.append(qkvz[base + 2 * dk + r * dv + u * dv:base + 2 * dk + r * dv + (u + 1) * dv])
                    bs.append(float(ba[j * 2 * r + u]))
                    as_.append(float(ba[j * 2 * r + r + u]))
        else:
            qkv = W[a + "in_proj_qkv.weight"].astype(np.float64) @ x
            z = W[a + "in_proj_z.weight"].astype(np.float64) @ x
            bb = W[a + "in_proj_b.weight"].astype(np.float64) @ x
            aa = W[a + "in_proj_a.weight"].astype(np.float64) @ x
            qs = [qkv[j * dk:(j + 1) * dk] for j in range(nk)]
            ks = [qkv[nk * dk + j * dk:nk * dk + (j + 1) * dk] for j in range(nk)]
            vs = [qkv[2 * nk * dk + h * dv:2 * nk * dk + (h + 1) * dv] for h in range(nv)]
            zs = [z[h * dv:(h + 1) * dv] for h in range(nv)]
            bs, as_ = [float(v) for v in bb], [float(v) for v in aa]
        cur = np.concatenate(qs + ks + vs)          # the conv channels: q | k | v
        w = W[a + "conv1d.weight"].astype(np.float64)  # [C, 1, K]
        kk = w.shape[2]
        if not st["conv"]:
            st["conv"] = [np.zeros(cur.shape) for _ in range(kk - 1)]
        hist = st["conv"] + [cur]
        conv = sum(w[:, 0, j] * hist[j] for j in range(kk))
        conv = conv / (1.0 + np.exp(-conv))
        st["conv"] = hist[1:]
        if not st["S"]:
            st["S"] = [np.zeros((dk, dv)) for _ in range(nv)]
        A_log, dt_bias, nw = W[a + "A_log"], W[a + "dt_bias"], W[a + "norm.weight"].astype(np.float64)
        outs = []
        for h in range(nv):
            j = h // r
            q = conv[j * dk:(j + 1) * dk]
            k = conv[nk * dk + j * dk:nk * dk + (j + 1) * dk]
            v = conv[2 * nk * dk + h * dv:2 * nk * dk + (h + 1) * dv]
            q = q / math.sqrt(float(q @ q) + 1e-6) / math.sqrt(dk)
            k = k / math.sqrt(float(k @ k) + 1e-6)
            beta = 1.0 / (1.0 + math.exp(-bs[h]))
            sp = as_[h] + float(dt_bias[h])
            sp = sp if sp > 20 else math.log1p(math.exp(sp))
            decay = math.exp(-math.exp(float(A_log[h])) * sp)
            S = st["S"][h] * decay
            delta = (v - S.T @ k) * beta
            S = S + np.outer(k, delta)
            st["S"][h] = S
            o = S.T @ q
            o = o / math.sqrt(float(np.mean(o * o)) + m.eps) * nw
            zz = zs[h]
            outs.append(o * zz / (1.0 + np.exp(-zz)))
        return (W[a + "out_proj.weight"].astype(np.float64) @ np.concatenate(outs)).astype(F32)

    def _gated_attn_token(self, i, x, pos, cache):
        m = self.m
        W = m.ckpt
        a = f"{m.prefix}layers.{i}.self_attn."
        H, D = m.n_heads, m.head_dim

        def proj(name):
            y = W[a + name + ".weight"].astype(np.float64) @ x
            return y + W[a + name + ".bias"] if m.attention_bias else y
        qg, k, v = proj("q_proj"), proj("k_proj"), proj("v_proj")
        inv = m.inv_freq.astype(np.float64)
        ks, vs = [], []
        for j in range(m.n_kv):
            kj = self._zc_norm64(k[j * D:(j + 1) * D], W[a + "k_norm.weight"], m.eps)
            ks.append(_rotate_pairs_neox(kj, pos, inv))
            vs.append(v[j * D:(j + 1) * D])
        cache[0].append(ks)
        cache[1].append(vs)
        heads = []
        for hh in range(H):
            q = self._zc_norm64(qg[hh * 2 * D:hh * 2 * D + D], W[a + "q_norm.weight"], m.eps)
            q = _rotate_pairs_neox(q, pos, inv)
            gate = qg[hh * 2 * D + D:(hh + 1) * 2 * D]
            j = hh // (H // m.n_kv)
            o = self._attend(q, [kk[j] for kk in cache[0]], [vv[j] for vv in cache[1]], m.scale)
            heads.append(o / (1.0 + np.exp(-gate)))
        o = np.concatenate(heads)
        y = W[a + "o_proj.weight"].astype(np.float64) @ o
        return (y + W[a + "o_proj.bias"] if m.attention_bias else y).astype(F32)

    def _moe_token_qwen3_next(self, i, x):
        m = self.m
        W = m.ckpt
        p = f"{m.prefix}layers.{i}.mlp."

        def swiglu(gw, uw, dw):
            g, u = gw.astype(np.float64) @ x, uw.astype(np.float64) @ x
            return dw.astype(np.float64) @ (g / (1.0 + np.exp(-g)) * u)
        if not m.is_moe_layer(i):
            return swiglu(W[p + "gate_proj.weight"], W[p + "up_proj.weight"], W[p + "down_proj.weight"]).astype(F32)
        logits = [float(v) for v in W[p + "gate.weight"].astype(np.float64) @ x]
        mx = max(logits)
        ex = [math.exp(v - mx) for v in logits]
        probs = [v / sum(ex) for v in ex]
        chosen = sorted(range(len(probs)), key=lambda e: (-probs[e], e))[:m.top_k]
        ws = [probs[e] for e in chosen]
        if m.norm_topk:
            ws = [v / sum(ws) for v in ws]
        acc = np.zeros(x.shape)
        I = m.moe_inter
        for e, wgt in zip(chosen, ws):
            if m.fused_experts:
                gu = W[p + "experts.gate_up_proj"][e]
                acc += wgt * swiglu(gu[:I], gu[I:], W[p + "experts.down_proj"][e])
            else:
                acc += wgt * swiglu(*[W[f"{p}experts.{e}.{n}_proj.weight"] for n in ("gate", "up", "down")])
        sg = float(W[p + "shared_expert_gate.weight"][0].astype(np.float64) @ x)
        sh = swiglu(*[W[f"{p}shared_expert.{n}_proj.weight"] for n in ("gate", "up", "down")])
        return (acc + sh / (1.0 + math.exp(-sg))).astype(F32)

    def forward_qwen3_next(self, ids):
        m = self.m
        W = m.ckpt
        states = [{"conv": [], "S": []} for _ in range(m.n_layers)]
        caches = [([], []) for _ in range(m.n_layers)]
        rows = []
        for t, tok in enumerate(ids):
            h = W[m.prefix + "embed_tokens.weight"][int(tok)].astype(np.float64)
            for i in range(m.n_layers):
                p = f"{m.prefix}layers.{i}."
                x = self._zc_norm64(h, W[p + "input_layernorm.weight"], m.eps)
                if m.layer_types[i] == "linear_attention":
                    h = h + self._gdn_token(i, x, states[i])
                else:
                    h = h + self._gated_attn_token(i, x, float(t), caches[i])
                h = h + self._moe_token_qwen3_next(i, self._zc_norm64(h, W[p + "post_attention_layernorm.weight"], m.eps))
            hn = self._zc_norm64(h, W[m.prefix + "norm.weight"], m.eps)
            head = W[m.prefix + "embed_tokens.weight"] if m.tie else W["lm_head.weight"]
            rows.append((head.astype(np.float64) @ hn).astype(F32))
        return np.stack(rows)

    # --- granitemoe / granitemoeshared: float64 matrix-vector products, per-head loops, routing in python floats ---

    @staticmethod
    def _rms64(x, w, eps):
        x = np.asarray(x, dtype=np.float64)
        return x / math.sqrt(float(np.mean(x * x)) + eps) * w.astype(np.float64)

    def _granite_attn_token(self, i, x, pos, cache):
        """One token of the Llama attention: q/k/v/o (+ biases), 2-D rotations of (j, j + D/2) per head, the
        scores times attention_multiplier, the softmax over the cached keys."""
        m = self.m
        W = m.ckpt
        a = f"model.layers.{i}.self_attn."
        D = m.hidden // m.n_heads

        def proj(name, v):
            y = W[a + name + ".weight"].astype(np.float64) @ v
            return y + W[a + name + ".bias"].astype(np.float64) if m.qkv_bias else y
        q, k, v = proj("q_proj", x), proj("k_proj", x), proj("v_proj", x)
        if getattr(m, "use_rope", True):     # granitemoehybrid: only with position_embedding_type "rope"
            inv = m.inv_freq.astype(np.float64)
            rot = lambda u: _rotate_pairs_neox(u, pos, inv)  # noqa: E731
        else:
            rot = lambda u: u  # noqa: E731
        cache[0].append([rot(k[j * D:(j + 1) * D]) for j in range(m.n_kv)])
        cache[1].append([v[j * D:(j + 1) * D] for j in range(m.n_kv)])
        per_kv = m.n_heads // m.n_kv
        heads = []
        for hh in range(m.n_heads):
            qh = rot(q[hh * D:(hh + 1) * D])
            j = hh // per_kv
            heads.append(self._attend(qh, [kk[j] for kk in cache[0]], [vv[j] for vv in cache[1]],
                                      m.attention_multiplier))
        return proj("o_proj", np.concatenate(heads))

    def _granite_mlp_token(self, i, x):
        """Sort the router logits, softmax over the first k; each chosen expert from its [2I, H] / [H, I] slices
        (gate rows first); plus the shared MLP when shared_intermediate_size > 0."""
        m = self.m
        W = m.ckpt
        p = f"model.layers.{i}."
        acc = np.zeros(x.shape)
        if m.n_experts > 0:                  # granitemoehybrid: num_local_experts 0 = the shared MLP alone
            acc += self._granite_experts_token(p, x)
        if m.shared_inter > 0:
            S = m.shared_inter
            s_in = W[p + "shared_mlp.input_linear.weight"].astype(np.float64)
            g, u = s_in[:S] @ x, s_in[S:] @ x
            acc += W[p + "shared_mlp.output_linear.weight"].astype(np.float64) @ (g / (1.0 + np.exp(-g)) * u)
        return acc

    def _granite_experts_token(self, p, x):
        m = self.m
        W = m.ckpt
        logits = [float(v) for v in W[p + "block_sparse_moe.router.layer.weight"].astype(np.float64) @ x]
        chosen = sorted(range(len(logits)), key=lambda e: (-logits[e], e))[:m.top_k]
        top = logits[chosen[0]]
        ex = [math.exp(logits[e] - top) for e in chosen]
        w_in, w_out = W[p + "block_sparse_moe.input_linear.weight"], W[p + "block_sparse_moe.output_linear.weight"]
        I = m.inter
        acc = np.zeros(x.shape)
        for e, z in zip(chosen, ex):
            g = w_in[e, :I].astype(np.float64) @ x
            u = w_in[e, I:].astype(np.float64) @ x
            acc += (z / sum(ex)) * (w_out[e].astype(np.float64) @ (g / (1.0 + np.exp(-g)) * u))
        return acc

    def forward_granite(self, ids):
        m = self.m
        W = m.ckpt
        caches = [([], []) for _ in range(m.n_layers)]
        rows = []
        for t, tok in enumerate(ids):
            if not 0 <= int(tok) < m.vocab:
                raise ValueError(f"token id out of range [0, {m.vocab})")
            h = W["model.embed_tokens.weight"][int(tok)].astype(np.float64) * m.embedding_multiplier
            for i in range(m.n_layers):
                p = f"model.layers.{i}."
                x = self._rms64(h, W[p + "input_layernorm.weight"], m.eps)
                h = h + m.residual_multiplier * self._granite_attn_token(i, x, t / m.rope_linear_factor, caches[i])
                x = self._rms64(h, W[p + "post_attention_layernorm.weight"], m.eps)
                h = h + m.residual_multiplier * self._granite_mlp_token(i, x)
            hn = self._rms64(h, W["model.norm.weight"], m.eps)
            head = W["model.embed_tokens.weight"] if m.tie else W["lm_head.weight"]
            rows.append(((head.astype(np.float64) @ hn) / m.logits_scaling).astype(F32))
        return np.stack(rows)

    # --- granitemoehybrid: the Mamba2 recurrence one token at a time, per-head loops, float64 ---

    def _mamba_token(self, i, x, st):
        """One Mamba2 mixer step. st: {"conv": the previous K-1 xBC vectors (zeros before the first token),
        "S": per head a [P, N] float64 state}. in_proj's output split by explicit offsets: z [0, d_inner),
        xBC [d_inner, d_inner + conv_dim), dt the last n_heads; xBC's x, B, C likewise."""
        m = self.m
        W = m.ckpt
        a = f"model.layers.{i}.mamba."
        di, cd, nh, P, G, N = (m.mamba_inner, m.mamba_conv_dim, m.mamba_heads, m.mamba_head_dim, m.mamba_groups,
                               m.mamba_state)
        proj = W[a + "in_proj.weight"].astype(np.float64) @ x
        if m.mamba_proj_bias:
            proj = proj + W[a + "in_proj.bias"].astype(np.float64)
        z, xbc, dts = proj[:di], proj[di:di + cd], proj[di + cd:di + cd + nh]
        w = W[a + "conv1d.weight"].astype(np.float64)        # [conv_dim, 1, K]
        kk = w.shape[2]
        if not st["conv"]:
            st["conv"] = [np.zeros(cd) for _ in range(kk - 1)]
        hist = st["conv"] + [xbc]
        conv = sum(w[:, 0, j] * hist[j] for j in range(kk))
        if m.mamba_conv_bias:
            conv = conv + W[a + "conv1d.bias"].astype(np.float64)
        conv = conv / (1.0 + np.exp(-conv))
        st["conv"] = hist[1:]
        if not st["S"]:
            st["S"] = [np.zeros((P, N)) for _ in range(nh)]
        A_log, dt_bias, Dp = W[a + "A_log"], W[a + "dt_bias"], W[a + "D"]
        per_group = nh // G
        ys = []
        for h in range(nh):
            g = h // per_group
            xh = conv[h * P:(h + 1) * P]
            Bg = conv[di + g * N:di + (g + 1) * N]
            Cg = conv[di + G * N + g * N:di + G * N + (g + 1) * N]
            v = dts[h] + float(dt_bias[h])
            dt = v if v > 20 else math.log1p(math.exp(v))
            decay = math.exp(-dt * math.exp(float(A_log[h])))
            st["S"][h] = decay * st["S"][h] + dt * np.outer(xh, Bg)
            ys.append(st["S"][h] @ Cg + float(Dp[h]) * xh)
        y = np.concatenate(ys) * (z / (1.0 + np.exp(-z)))
        y = y / math.sqrt(float(np.mean(y * y)) + m.eps) * W[a + "norm.weight"].astype(np.float64)
        out = W[a + "out_proj.weight"].astype(np.float64) @ y
        if m.mamba_proj_bias:
            out = out + W[a + "out_proj.bias"].astype(np.float64)
        return out

    def forward_granite_hybrid(self, ids):
        m = self.m
        W = m.ckpt
        caches = [([], []) for _ in range(m.n_layers)]
        states = [{"conv": [], "S": []} for _ in range(m.n_layers)]
        rows = []
        for t, tok in enumerate(ids):
            if not 0 <= int(tok) < m.vocab:
                raise ValueError(f"token id out of range [0, {m.vocab})")
            h = W["model.embed_tokens.weight"][int(tok)].astype(np.float64) * m.embedding_multiplier
            for i in range(m.n_layers):
                p = f"model.layers.{i}."
                x = self._rms64(h, W[p + "input_layernorm.weight"], m.eps)
                if m.layer_types[i] == "mamba":
                    mix = self._mamba_token(i, x, states[i])
                else:
                    mix = self._granite_attn_token(i, x, t / m.rope_linear_factor, caches[i])
                h = h + m.residual_multiplier * mix
                x = self._rms64(h, W[p + "post_attention_layernorm.weight"], m.eps)
                h = h + m.residual_multiplier * self._granite_mlp_token(i, x)
            hn = self._rms64(h, W["model.norm.weight"], m.eps)
            head = W["model.embed_tokens.weight"] if m.tie else W["lm_head.weight"]
            rows.append(((head.astype(np.float64) @ hn) / m.logits_scaling).astype(F32))
        return np.stack(rows)

    # --- lfm2_moe: float64 matrix-vector products, an explicit conv state, per-head loops, routing in python floats ---

    def _lfm2_conv_token(self, i, x, st):
        """One Lfm2MoeShortConv step. st: the previous L-1 B*x vectors, oldest first (zeros before the first
        token); the window [st..., B*x] is dotted with each channel's conv.weight row, the last tap on the current
        token."""
        m = self.m
        W = m.ckpt
        a = f"model.layers.{i}.conv."
        H = m.hidden
        proj = W[a + "in_proj.weight"].astype(np.float64) @ x
        if m.conv_bias:
            proj = proj + W[a + "in_proj.bias"].astype(np.float64)
        b_gate, c_gate, xin = proj[0:H], proj[H:2 * H], proj[2 * H:3 * H]
        bx = b_gate * xin
        kern = W[a + "conv.weight"].astype(np.float64)[:, 0, :]          # [H, L]
        L = kern.shape[1]
        if len(st) != L - 1:
            st[:] = [np.zeros(H) for _ in range(L - 1)]
        window = np.stack(st + [bx], axis=1)                              # [H, L], column L-1 = now
        conv = np.array([float(np.dot(kern[ch], window[ch])) for ch in range(H)])
        if m.conv_bias:
            conv = conv + W[a + "conv.bias"].astype(np.float64)
        st[:] = (st + [bx])[1:]
        out = W[a + "out_proj.weight"].astype(np.float64) @ (c_gate * conv)
        if m.conv_bias:
            out = out + W[a + "out_proj.bias"].astype(np.float64)
        return out

    def _lfm2_attn_token(self, i, x, pos, cache):
        """One token of Lfm2MoeAttention: per head, the RMSNorm of q / k over head_dim, then the 2-D rotations
        of (j, j + D/2), then the softmax over the cached keys."""
        m = self.m
        W = m.ckpt
        a = f"model.layers.{i}.self_attn."
        D = m.head_dim
        q = W[a + "q_proj.weight"].astype(np.float64) @ x
        k = W[a + "k_proj.weight"].astype(np.float64) @ x
        v = W[a + "v_proj.weight"].astype(np.float64) @ x
        qn, kn = W[a + "q_layernorm.weight"], W[a + "k_layernorm.weight"]
        inv = m.inv_freq.astype(np.float64)
        cache[0].append([_rotate_pairs_neox(self._rms64(k[j * D:(j + 1) * D], kn, m.eps), pos, inv)
                         for j in range(m.n_kv)])
        cache[1].append([v[j * D:(j + 1) * D] for j in range(m.n_kv)])
        per_kv = m.n_heads // m.n_kv
        heads = []
        for hh in range(m.n_heads):
            qh = _rotate_pairs_neox(self._rms64(q[hh * D:(hh + 1) * D], qn, m.eps), pos, inv)
            j = hh // per_kv
            heads.append(self._attend(qh, [kk[j] for kk in cache[0]], [vv[j] for vv in cache[1]], m.scale))
        return W[a + "out_proj.weight"].astype(np.float64) @ np.concatenate(heads)

    @staticmethod
    def _swiglu64(W, prefix, x):
        g = W[prefix + "w1.weight"].astype(np.float64) @ x
        u = W[prefix + "w3.weight"].astype(np.float64) @ x
        return W[prefix + "w2.weight"].astype(np.float64) @ (g / (1.0 + np.exp(-g)) * u)

    def _lfm2_ffn_token(self, i, x):
        m = self.m
        W = m.ckpt
        f = f"model.layers.{i}.feed_forward."
        if i < m.n_dense:
            return self._swiglu64(W, f, x)
        logits = [float(v) for v in W[f + "gate.weight"].astype(np.float64) @ x]
        sig = [1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v)) for v in logits]
        if m.use_expert_bias:
            eb = W[f"model.layers.{i}.feed_forward.expert_bias"]
            key = [sig[e] + float(eb[e]) for e in range(len(sig))]
        else:
            key = sig
        chosen = sorted(range(len(sig)), key=lambda e: (-key[e], e))[:m.top_k]
        ws = [sig[e] for e in chosen]
        if m.norm_topk:
            tot = sum(ws) + 1e-6
            ws = [v / tot for v in ws]
        ws = [v * m.routed_scale for v in ws]
        acc = np.zeros(x.shape)
        for e, wgt in zip(chosen, ws):
            acc += wgt * self._swiglu64(W, f"{f}experts.{e}.", x)
        return acc

    def forward_lfm2(self, ids):
        m = self.m
        W = m.ckpt
        caches = [([], []) for _ in range(m.n_layers)]
        states = [[] for _ in range(m.n_layers)]
        rows = []
        for t, tok in enumerate(ids):
            if not 0 <= int(tok) < m.vocab:
                raise ValueError(f"token id out of range [0, {m.vocab})")
            h = W["model.embed_tokens.weight"][int(tok)].astype(np.float64)
            for i in range(m.n_layers):
                p = f"model.layers.{i}."
                x = self._rms64(h, W[p + "operator_norm.weight"], m.eps)
                if m.layer_types[i] == "full_attention":
                    h = h + self._lfm2_attn_token(i, x, float(t), caches[i])
                else:
                    h = h + self._lfm2_conv_token(i, x, states[i])
                h = h + self._lfm2_ffn_token(i, self._rms64(h, W[p + "ffn_norm.weight"], m.eps))
            hn = self._rms64(h, W["model.embedding_norm.weight"], m.eps)
            head = W["model.embed_tokens.weight"] if m.tie else W["lm_head.weight"]
            rows.append((head.astype(np.float64) @ hn).astype(F32))
        return np.stack(rows)

    # --- afmoe: float64 matrix-vector products, per-head loops, a KV cache of (position, k, v) filtered by the window,
    # 2-D rotations only on sliding layers, the output gate and the router in float64 / python floats ---

    @staticmethod
    def _glu64(W, prefix, x):
        """gate_proj / up_proj / down_proj SwiGLU as float64 matrix-vector products."""
        g = W[prefix + "gate_proj.weight"].astype(np.float64) @ x
        u = W[prefix + "up_proj.weight"].astype(np.float64) @ x
        return W[prefix + "down_proj.weight"].astype(np.float64) @ (g / (1.0 + np.exp(-g)) * u)

    def _afmoe_attn_token(self, i, x, t, cache):
        """One token of AfmoeAttention at position t. cache: list of (position, [k per kv head], [v per kv head]);
        on a sliding layer the keys at positions u with t - u >= sliding_window are skipped (not dropped: the
        filter is by position); only there are q and k rotated."""
        m = self.m
        W = m.ckpt
        a = f"model.layers.{i}.self_attn."
        D = m.head_dim
        sliding = m.layer_types[i] == "sliding_attention"
        q = W[a + "q_proj.weight"].astype(np.float64) @ x
        k = W[a + "k_proj.weight"].astype(np.float64) @ x
        v = W[a + "v_proj.weight"].astype(np.float64) @ x
        g = W[a + "gate_proj.weight"].astype(np.float64) @ x
        qn, kn = W[a + "q_norm.weight"], W[a + "k_norm.weight"]
        inv = m.inv_freq.astype(np.float64)

        def place(vec, w):
            vec = self._rms64(vec, w, m.eps)
            return _rotate_pairs_neox(vec, float(t), inv) if sliding else vec
        cache.append((t, [place(k[j * D:(j + 1) * D], kn) for j in range(m.n_kv)],
                      [v[j * D:(j + 1) * D] for j in range(m.n_kv)]))
        seen = [c for c in cache if not sliding or t - c[0] < m.window]
        per_kv = m.n_heads // m.n_kv
        heads = []
        for hh in range(m.n_heads):
            j = hh // per_kv
            qh = place(q[hh * D:(hh + 1) * D], qn)
            heads.append(self._attend(qh, [c[1][j] for c in seen], [c[2][j] for c in seen], m.scale))
        o = np.concatenate(heads)
        gate = np.array([1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z)) for z in g])
        return W[a + "o_proj.weight"].astype(np.float64) @ (o * gate)

    def _afmoe_mlp_token(self, i, x):
        m = self.m
        W = m.ckpt
        f = f"model.layers.{i}.mlp."
        if i < m.n_dense:
            return self._glu64(W, f, x)
        logits = [float(v) for v in W[f + "router.gate.weight"].astype(np.float64) @ x]
        sig = [1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v)) for v in logits]
        eb = W[f + "expert_bias"]
        key = [sig[e] + float(eb[e]) for e in range(len(sig))]
        chosen = sorted(range(len(sig)), key=lambda e: (-key[e], e))[:m.top_k]
        tot = sum(sig[e] for e in chosen) + 1e-20
        acc = self._glu64(W, f + "shared_experts.", x)
        for e in chosen:
            acc = acc + (sig[e] / tot * m.route_scale) * self._glu64(W, f"{f}experts.{e}.", x)
        return acc

    def forward_afmoe(self, ids):
        m = self.m
        W = m.ckpt
        caches = [[] for _ in range(m.n_layers)]
        rows = []
        for t, tok in enumerate(ids):
            if not 0 <= int(tok) < m.vocab:
                raise ValueError(f"token id out of range [0, {m.vocab})")
            h = W["model.embed_tokens.weight"][int(tok)].astype(np.float64)
            if m.mup:
                h = h * math.sqrt(m.hidden)
            for i in range(m.n_layers):
                p = f"model.layers.{i}."
                att = self._afmoe_attn_token(i, self._rms64(h, W[p + "input_layernorm.weight"], m.eps), t, caches[i])
                h = h + self._rms64(att, W[p + "post_attention_layernorm.weight"], m.eps)
                ffn = self._afmoe_mlp_token(i, self._rms64(h, W[p + "pre_mlp_layernorm.weight"], m.eps))
                h = h + self._rms64(ffn, W[p + "post_mlp_layernorm.weight"], m.eps)
            hn = self._rms64(h, W["model.norm.weight"], m.eps)
            head = W["model.embed_tokens.weight"] if m.tie else W["lm_head.weight"]
            rows.append((head.astype(np.float64) @ hn).astype(F32))
        return np.stack(rows)

    def forward(self, ids):
        m = self.m
        if m.type == "afmoe":
            return self.forward_afmoe(ids)
        if m.type == "lfm2_moe":
            return self.forward_lfm2(ids)
        if m.type in ("qwen3_next", "qwen3_5_moe"):
            return self.forward_qwen3_next(ids)
        if m.type in ("granitemoe", "granitemoeshared"):
            return self.forward_granite(ids)
        if m.type == "granitemoehybrid":
            return self.forward_granite_hybrid(ids)
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
