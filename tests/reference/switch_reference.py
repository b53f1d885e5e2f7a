#!/usr/bin/python3
"""Independent fp32 numpy reference of Hugging Face `SwitchTransformersForConditionalGeneration`.

Written from transformers' modeling_switch_transformers.py semantics and the Switch Transformers / T5
papers, without transformers or torch, for checking zipmoe's executor (never imported by it):
  - T5 layer norm: w * x * rsqrt(mean(x^2) + eps), no mean subtraction, no bias;
  - attention without 1/sqrt(d_kv) scaling; a relative position bias (T5 `_relative_position_bucket`,
    bidirectional in the encoder, causal in the decoder) computed by block 0 of each stack and shared
    by its other blocks; the attention mask is added to that bias ((1 - mask) * float32 min);
    cross-attention has no position bias;
  - feed-forward wo(relu(wi(x))) (`layer.{1|2}.mlp.{wi,wo}` in a dense block); every sparse block's FF
    is SwitchTransformersSparseMLP with the Top1Router: logits = classifier(x) in float32, softmax,
    argmax expert, per batch row a cumulative count over the sequence of the tokens sent to each
    expert; a token whose count exceeds expert_capacity is dropped: its FF output is 0 (transformers'
    current `next_states = zeros`; releases before mid-2023 kept x there), so the residual carries it
    through unchanged; a kept token's output is max(prob) * expert(x). Padded positions count toward
    capacity exactly as HF's batch does;
  - a stack's block i is sparse iff sparse_step > 0 and (i % sparse_step == 1 or sparse_step == 1);
  - logits = lm_head(final_layer_norm(decoder output) * d_model^-0.5 if tie_word_embeddings).

CLI:  /usr/bin/python3 switch_reference.py --model DIR --encoder-ids 13,7,1 --decoder-ids 0,5,9 --out FILE
      writes float32 little-endian decoder logits [n_decoder_ids, vocab] row-major.
      --batch FILE.json instead runs {"encoder": [[ids]...], "encoder_mask": [[0/1]...] (optional),
      "decoder": [[ids]...]} as one padded batch and writes [batch, n_decoder, vocab].

Library:  m = SwitchModel(dir)
          logits = m.forward(enc_ids [B,S], dec_ids [B,T], enc_mask [B,S] or None)   # [B, T, vocab]
              (decoder positions routed one per call, as generation does; incremental=False for one
              teacher-forced call)
          logits = m.forward_naive(enc_ids_1d, dec_ids_1d)   # loop per token, KV cache, per-token MoE
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe_reference_ops import F32, linear, softmax  # noqa: E402
from moe_reference_safetensors import Checkpoint  # noqa: E402

F32_MIN = float(np.finfo(np.float32).min)


def t5_layer_norm(x, weight, eps):
    """SwitchTransformersLayerNorm: weight * x * rsqrt(mean(x^2, -1) + eps), float32."""
    x = np.asarray(x, dtype=F32)
    var = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
    return (weight * (x / np.sqrt(var + F32(eps)))).astype(F32, copy=False)


def relu(x):
    return np.maximum(x, F32(0.0)).astype(F32, copy=False)


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """T5's bucket of relative_position = key position - query position (int array, any shape).

    Bidirectional: half the buckets for positive offsets (bucket += num_buckets/2 when rp > 0), |rp|
    after. Causal: rp = -min(rp, 0) (future keys all land in bucket 0). Offsets below max_exact =
    buckets/2 get their own bucket; larger ones max_exact + trunc(log(rp / max_exact) /
    log(max_distance / max_exact) * (buckets - max_exact)), clipped to buckets - 1. The logarithm is
    evaluated in float32 like torch's (rp.float()), and truncated toward zero like .to(torch.long).
    """
    rp = np.asarray(relative_position, dtype=np.int64)
    buckets = np.zeros_like(rp)
    if bidirectional:
        num_buckets //= 2
        buckets += (rp > 0).astype(np.int64) * num_buckets
        rp = np.abs(rp)
    else:
        rp = -np.minimum(rp, 0)
    max_exact = num_buckets // 2
    is_small = rp < max_exact
    safe = np.maximum(rp, 1).astype(F32)
    with np.errstate(divide="ignore"):
        scaled = (np.log(safe / F32(max_exact)) / F32(math.log(max_distance / max_exact))).astype(F32)
    large = max_exact + (scaled * F32(num_buckets - max_exact)).astype(F32).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(is_small, rp, large)


def block_is_sparse(i, sparse_step):
    return sparse_step > 0 and (i % sparse_step == 1 or sparse_step == 1)


class SwitchModel:
    def __init__(self, model_dir):
        self.ckpt = Checkpoint(model_dir)
        c = self.ckpt.config
        if c.get("model_type") != "switch_transformers":
            raise ValueError(f"{model_dir}: model_type {c.get('model_type')!r} is not switch_transformers")
        act = c.get("dense_act_fn", c.get("feed_forward_proj", "relu"))
        if act != "relu" or c.get("is_gated_act", False):
            raise ValueError(f"{model_dir}: only the ReLU (non-gated) feed-forward is implemented, got {act!r}")
        self.cfg = c
        self.d_model = int(c["d_model"])
        self.d_kv = int(c["d_kv"])
        self.n_heads = int(c["num_heads"])
        self.n_enc = int(c["num_layers"])
        self.n_dec = int(c.get("num_decoder_layers") or self.n_enc)
        self.n_experts = int(c["num_experts"])
        self.capacity = int(c["expert_capacity"])
        self.enc_step = int(c.get("encoder_sparse_step", 1))
        self.dec_step = int(c.get("decoder_sparse_step", 1))
        self.n_buckets = int(c.get("relative_attention_num_buckets", 32))
        self.max_distance = int(c.get("relative_attention_max_distance", 128))
        self.eps = float(c.get("layer_norm_epsilon", 1e-6))
        self.tied = bool(c.get("tie_word_embeddings", True))
        self.decoder_start = int(c.get("decoder_start_token_id", 0))
        self.shared = self.ckpt["shared.weight"]
        if self.tied or not self.ckpt.has("lm_head.weight"):
            self.lm_head = self.shared
        else:
            self.lm_head = self.ckpt["lm_head.weight"]

    # ------------------------------------------------------------------------------------------------
    # pieces
    # ------------------------------------------------------------------------------------------------

    def _w(self, name):
        return self.ckpt[name]

    def _bias(self, stack, q_len, k_len, q_offset=0):
        """Position bias [H, q_len, k_len] of `stack` ("encoder": bidirectional, "decoder": causal
        buckets) for queries at positions q_offset.. and keys at 0..k_len-1."""
        table = self._w(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")  # [buckets, H]
        ctx = np.arange(q_offset, q_offset + q_len, dtype=np.int64)[:, None]
        mem = np.arange(k_len, dtype=np.int64)[None, :]
        b = relative_position_bucket(mem - ctx, stack == "encoder", self.n_buckets, self.max_distance)
        return np.transpose(table[b], (2, 0, 1)).astype(F32)

    def _heads(self, x):  # [B, S, H*d] -> [B, H, S, d]
        b, s, _ = x.shape
        return np.transpose(x.reshape(b, s, self.n_heads, self.d_kv), (0, 2, 1, 3))

    def _attend(self, prefix, h_q, h_kv, bias):
        """T5 attention: softmax(q k^T + bias) v, no scaling. h_q [B,Sq,D], h_kv [B,Sk,D],
        bias broadcastable to [B,H,Sq,Sk]."""
        q = self._heads(linear(h_q, self._w(prefix + ".q.weight")))
        k = self._heads(linear(h_kv, self._w(prefix + ".k.weight")))
        v = self._heads(linear(h_kv, self._w(prefix + ".v.weight")))
        scores = (q @ np.transpose(k, (0, 1, 3, 2))).astype(F32) + bias
        p = softmax(scores, axis=-1)
        out = (p @ v).astype(F32)
        b, _, s, _ = out.shape
        out = np.transpose(out, (0, 2, 1, 3)).reshape(b, s, self.n_heads * self.d_kv)
        return linear(out, self._w(prefix + ".o.weight"))

    def _expert(self, prefix, x):
        return linear(relu(linear(x, self._w(prefix + ".wi.weight"))), self._w(prefix + ".wo.weight"))

    def _sparse_mlp(self, prefix, x):
        """SwitchTransformersSparseMLP on x [B, S, D] (already layer-normed)."""
        w = self._w(prefix + ".router.classifier.weight")
        bias_name = prefix + ".router.classifier.bias"
        logits = linear(x.astype(F32), w, self._w(bias_name) if self.ckpt.has(bias_name) else None)
        probs = softmax(logits, axis=-1)
        expert = np.argmax(probs, axis=-1)  # first maximum, as torch.argmax
        one_hot = np.eye(self.n_experts, dtype=np.int64)[expert]  # [B, S, E]
        priority = np.cumsum(one_hot, axis=-2)
        keep = (one_hot * (priority <= self.capacity)).astype(bool)  # [B, S, E]
        gate = np.max(probs, axis=-1, keepdims=True).astype(F32)
        out = np.zeros_like(x)  # a dropped token contributes nothing
        for e in range(self.n_experts):
            sel = keep[:, :, e]
            if np.any(sel):
                out[sel] = self._expert(f"{prefix}.experts.expert_{e}", x[sel])
        return (gate * out).astype(F32)

    def _ff(self, stack, i, layer, h, per_token=False):
        """The FF sub-layer with its residual. per_token: every position is routed as its own group
        (capacity counted per position, as when generate feeds the decoder one token per call)."""
        pre = f"{stack}.block.{i}.layer.{layer}"
        x = t5_layer_norm(h, self._w(pre + ".layer_norm.weight"), self.eps)
        step = self.enc_step if stack == "encoder" else self.dec_step
        if block_is_sparse(i, step):
            if per_token:
                b, t, dm = x.shape
                y = self._sparse_mlp(pre + ".mlp", x.reshape(b * t, 1, dm)).reshape(b, t, dm)
            else:
                y = self._sparse_mlp(pre + ".mlp", x)
        else:
            y = self._expert(pre + ".mlp", x)
        return (h + y).astype(F32)

    # ------------------------------------------------------------------------------------------------
    # vectorised passes
    # ------------------------------------------------------------------------------------------------

    def encode(self, enc_ids, enc_mask=None):
        """enc_ids [B, S] -> encoder output [B, S, D] (final_layer_norm applied)."""
        ids = np.asarray(enc_ids, dtype=np.int64)
        b, s = ids.shape
        mask = np.ones((b, s), dtype=F32) if enc_mask is None else np.asarray(enc_mask, dtype=F32)
        ext = ((F32(1.0) - mask) * F32(F32_MIN))[:, None, None, :]  # [B,1,1,S]
        bias = (self._bias("encoder", s, s)[None] + ext).astype(F32)
        h = self.shared[ids].astype(F32)
        for i in range(self.n_enc):
            pre = f"encoder.block.{i}.layer.0"
            x = t5_layer_norm(h, self._w(pre + ".layer_norm.weight"), self.eps)
            h = (h + self._attend(pre + ".SelfAttention", x, x, bias)).astype(F32)
            h = self._ff("encoder", i, 1, h)
        return t5_layer_norm(h, self._w("encoder.final_layer_norm.weight"), self.eps)

    def decode(self, enc_out, dec_ids, enc_mask=None, incremental=True):
        """Decoder logits [B, T, vocab] for decoder inputs dec_ids [B, T] over enc_out [B, S, D].

        incremental=True gives what generation computes, feeding one decoder token per forward call
        (HF generate with its KV cache): the router's capacity count covers one token, so no decoder
        token is dropped. incremental=False is one HF forward call over all of dec_ids (teacher
        forcing): the count runs over the T positions and tokens past expert_capacity are dropped."""
        ids = np.asarray(dec_ids, dtype=np.int64)
        b, t = ids.shape
        s = enc_out.shape[1]
        mask = np.ones((b, s), dtype=F32) if enc_mask is None else np.asarray(enc_mask, dtype=F32)
        cross_bias = ((F32(1.0) - mask) * F32(F32_MIN))[:, None, None, :]
        causal = np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], F32(0.0), F32(F32_MIN)).astype(F32)
        self_bias = (self._bias("decoder", t, t) + causal[None]).astype(F32)[None]
        h = self.shared[ids].astype(F32)
        for i in range(self.n_dec):
            pre = f"decoder.block.{i}"
            x = t5_layer_norm(h, self._w(pre + ".layer.0.layer_norm.weight"), self.eps)
            h = (h + self._attend(pre + ".layer.0.SelfAttention", x, x, self_bias)).astype(F32)
            x = t5_layer_norm(h, self._w(pre + ".layer.1.layer_norm.weight"), self.eps)
            h = (h + self._attend(pre + ".layer.1.EncDecAttention", x, enc_out, cross_bias)).astype(F32)
            h = self._ff("decoder", i, 2, h, per_token=incremental)
        return self._logits(h)

    def _logits(self, h):
        h = t5_layer_norm(h, self._w("decoder.final_layer_norm.weight"), self.eps)
        if self.tied:
            h = (h * F32(self.d_model ** -0.5)).astype(F32)
        return linear(h, self.lm_head)

    def forward(self, enc_ids, dec_ids, enc_mask=None, incremental=True):
        return self.decode(self.encode(enc_ids, enc_mask), dec_ids, enc_mask, incremental)

    # ------------------------------------------------------------------------------------------------
    # slow pass: one sequence, decoder token by token with a KV cache, MoE token by token
    # ------------------------------------------------------------------------------------------------

    def forward_naive(self, enc_ids, dec_ids):
        """One unpadded sequence: encoder with explicit per-query loops and per-token routing (with its
        own capacity counter), then the decoder one token at a time against cached K/V. -> [T, vocab]."""
        H, d = self.n_heads, self.d_kv
        enc_ids = [int(x) for x in enc_ids]
        s = len(enc_ids)

        def proj(prefix, x, which):
            return (x @ self._w(f"{prefix}.{which}.weight").T).astype(F32).reshape(H, d)

        def attend_one(prefix, qv, keys, vals, bias_row):  # qv [H,d]; keys/vals list of [H,d]
            out = np.zeros((H, d), dtype=F32)
            kk = np.stack(keys, axis=1)  # [H, n, d]
            vv = np.stack(vals, axis=1)
            for hh in range(H):
                sc = (kk[hh] @ qv[hh]).astype(F32) + bias_row[hh]
                e = np.exp(sc - np.max(sc))
                out[hh] = ((e / np.sum(e)).astype(F32) @ vv[hh]).astype(F32)
            return (out.reshape(-1) @ self._w(prefix + ".o.weight").T).astype(F32)

        def bias_rows(stack, q, n):
            table = self._w(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
            rows = np.zeros((H, n), dtype=F32)
            for j in range(n):
                bk = int(relative_position_bucket(np.array(j - q), stack == "encoder", self.n_buckets,
                                                  self.max_distance))
                rows[:, j] = table[bk]
            return rows

        def ff_one(stack, i, layer, hv, counts):
            pre = f"{stack}.block.{i}.layer.{layer}"
            x = t5_layer_norm(hv, self._w(pre + ".layer_norm.weight"), self.eps)
            step = self.enc_step if stack == "encoder" else self.dec_step
            if not block_is_sparse(i, step):
                return hv + self._expert(pre + ".mlp", x[None])[0]
            logits = (x @ self._w(pre + ".mlp.router.classifier.weight").T).astype(F32)
            if self.ckpt.has(pre + ".mlp.router.classifier.bias"):
                logits = logits + self._w(pre + ".mlp.router.classifier.bias")
            p = softmax(logits)
            e = int(np.argmax(p))
            counts[e] = counts.get(e, 0) + 1
            if counts[e] > self.capacity:  # dropped: the FF adds nothing
                return hv.astype(F32)
            y = self._expert(f"{pre}.mlp.experts.expert_{e}", x[None])[0]
            return (hv + F32(np.max(p)) * y).astype(F32)

        # encoder: layer by layer over all positions
        h = [self.shared[t].astype(F32) for t in enc_ids]
        for i in range(self.n_enc):
            pre = f"encoder.block.{i}.layer.0"
            xs = [t5_layer_norm(v, self._w(pre + ".layer_norm.weight"), self.eps) for v in h]
            ks = [proj(pre + ".SelfAttention", x, "k") for x in xs]
            vs = [proj(pre + ".SelfAttention", x, "v") for x in xs]
            h = [(h[q] + attend_one(pre + ".SelfAttention", proj(pre + ".SelfAttention", xs[q], "q"), ks, vs,
                                    bias_rows("encoder", q, s))).astype(F32) for q in range(s)]
            counts = {}
            h = [ff_one("encoder", i, 1, v, counts) for v in h]
        enc = [t5_layer_norm(v, self._w("encoder.final_layer_norm.weight"), self.eps) for v in h]

        # cross-attention K/V once per block
        cross = []
        for i in range(self.n_dec):
            pre = f"decoder.block.{i}.layer.1.EncDecAttention"
            cross.append(([proj(pre, x, "k") for x in enc], [proj(pre, x, "v") for x in enc]))
        self_k = [[] for _ in range(self.n_dec)]
        self_v = [[] for _ in range(self.n_dec)]
        counts = [dict() for _ in range(self.n_dec)]  # a decode step's "sequence" is one token: fresh counts
        rows = []
        for q, tok in enumerate(int(x) for x in dec_ids):
            hv = self.shared[tok].astype(F32)
            for i in range(self.n_dec):
                pre = f"decoder.block.{i}"
                x = t5_layer_norm(hv, self._w(pre + ".layer.0.layer_norm.weight"), self.eps)
                self_k[i].append(proj(pre + ".layer.0.SelfAttention", x, "k"))
                self_v[i].append(proj(pre + ".layer.0.SelfAttention", x, "v"))
                hv = hv + attend_one(pre + ".layer.0.SelfAttention", proj(pre + ".layer.0.SelfAttention", x, "q"),
                                     self_k[i], self_v[i], bias_rows("decoder", q, q + 1))
                x = t5_layer_norm(hv, self._w(pre + ".layer.1.layer_norm.weight"), self.eps)
                hv = hv + attend_one(pre + ".layer.1.EncDecAttention", proj(pre + ".layer.1.EncDecAttention", x, "q"),
                                     cross[i][0], cross[i][1], np.zeros((H, s), dtype=F32))
                counts[i] = {}
                hv = ff_one("decoder", i, 2, hv.astype(F32), counts[i])
            rows.append(self._logits(hv[None])[0])
        return np.stack(rows).astype(F32)


def _ids(text):
    return [int(x) for x in text.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--encoder-ids", help="comma-separated encoder input ids (one sequence)")
    ap.add_argument("--decoder-ids", help="comma-separated decoder input ids (default: decoder_start_token_id)")
    ap.add_argument("--batch", help="JSON file with encoder / encoder_mask / decoder lists (one padded batch)")
    ap.add_argument("--teacher-forced", action="store_true",
                    help="one decoder call over all decoder ids (capacity counted over them) instead of "
                         "one call per token as generation does")
    ap.add_argument("--out", required=True, help="float32 little-endian logits")
    args = ap.parse_args()
    m = SwitchModel(args.model)
    if args.batch:
        import json
        with open(args.batch, "r", encoding="utf-8") as f:
            spec = json.load(f)
        logits = m.forward(np.array(spec["encoder"]), np.array(spec["decoder"]),
                           np.array(spec["encoder_mask"]) if "encoder_mask" in spec else None,
                           not args.teacher_forced)
    else:
        if not args.encoder_ids:
            ap.error("--encoder-ids or --batch is required")
        dec = _ids(args.decoder_ids) if args.decoder_ids else [m.decoder_start]
        logits = m.forward(np.array([_ids(args.encoder_ids)]), np.array([dec]), None, not args.teacher_forced)[0]
    np.ascontiguousarray(logits, dtype="<f4").tofile(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
