#!/usr/bin/python3
"""Independent fp32 numpy reference of the Hugging Face `transformers` forward passes of five MoE LLMs.

Written from the HF modeling code (as remembered) and the model papers, without transformers/torch:
  qwen2_moe   Qwen2MoeForCausalLM    (Qwen1.5-MoE)
  mixtral     MixtralForCausalLM
  qwen3_moe   Qwen3MoeForCausalLM
  olmoe       OlmoeForCausalLM
  deepseek_v2 DeepseekV2ForCausalLM  (the remote code `modeling_deepseek.py` of DeepSeek-V2/-Lite)

Everything is computed in float32 (BF16/F16 weights are upcast exactly); see docs/reference.md for the
semantics implemented per architecture and the choices that are uncertain.

CLI:  /usr/bin/python3 moe_reference.py --model DIR --ids 1,2,3 --out FILE
      writes float32 little-endian logits [n_ids, vocab] row-major.

Library:  m = Model(dir); logits = m.forward([1, 2, 3])            # vectorised full-sequence pass
          logits = m.forward([1, 2, 3], naive=True)                 # slow token-by-token loop with a
                                                                    # KV cache, written independently
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

F32 = np.float32

# ----------------------------------------------------------------------------------------------------
# safetensors (parsed by hand: u64 LE header length, JSON header, raw little-endian tensor bytes)
# ----------------------------------------------------------------------------------------------------

_ST_DTYPES = {
    "BF16": ("<u2", 2),
    "F16": ("<f2", 2),
    "F32": ("<f4", 4),
    "F64": ("<f8", 8),
    "I64": ("<i8", 8),
    "I32": ("<i4", 4),
    "I16": ("<i2", 2),
    "I8": ("i1", 1),
    "U8": ("u1", 1),
    "BOOL": ("u1", 1),
}


def bf16_bits_to_f32(u16):
    """uint16 BF16 bit patterns -> float32 (exact: the bits go to the top half of a uint32)."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> BF16 bits, round-to-nearest-even (used by the self-test checkpoint writer)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


class SafetensorsFile:
    """Lazily converts tensors of one .safetensors file to float32 numpy arrays."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(f"{path}: shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", raw)
            size = os.fstat(f.fileno()).st_size
            if n > size - 8:
                raise ValueError(f"{path}: header length {n} exceeds the file size {size}")
            header = json.loads(f.read(n).decode("utf-8"))
        self.data_start = 8 + n
        self.data_size = size - self.data_start
        self.meta = {k: v for k, v in header.items() if k != "__metadata__"}
        self._mm = None
        for name, info in self.meta.items():
            dt = info["dtype"]
            if dt not in _ST_DTYPES:
                raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
            b, e = info["data_offsets"]
            count = int(np.prod(info["shape"], dtype=np.int64)) if info["shape"] else 1
            if not (0 <= b <= e <= self.data_size) or e - b != count * _ST_DTYPES[dt][1]:
                raise ValueError(f"{path}: tensor {name}: bad data_offsets {info['data_offsets']} for "
                                 f"shape {info['shape']} {dt} (data size {self.data_size})")

    def names(self):
        return list(self.meta.keys())

    def raw(self, name):
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        info = self.meta[name]
        b, e = info["data_offsets"]
        np_dt, _ = _ST_DTYPES[info["dtype"]]
        buf = self._mm[self.data_start + b:self.data_start + e]
        return np.frombuffer(buf, dtype=np_dt).reshape(info["shape"]), info["dtype"]

    def get_f32(self, name):
        arr, dt = self.raw(name)
        if dt == "BF16":
            return np.ascontiguousarray(bf16_bits_to_f32(arr))
        return np.ascontiguousarray(arr.astype(np.float32))


def write_safetensors(path, tensors, dtype="BF16"):
    """Writes {name: float32 array} as BF16 (or F32) safetensors. Used by the self-test."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name], dtype=np.float32)
        if dtype == "BF16":
            data = f32_to_bf16_bits(a).astype("<u2").tobytes()
        else:
            data = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for blob in blobs:
            f.write(blob)


class Checkpoint:
    """A Hugging Face checkpoint dir: config.json + model.safetensors or index + shards."""

    def __init__(self, model_dir):
        self.dir = model_dir
        with open(os.path.join(model_dir, "config.json"), "r", encoding="utf-8") as f:
            self.config = json.load(f)
        index_path = os.path.join(model_dir, "model.safetensors.index.json")
        single = os.path.join(model_dir, "model.safetensors")
        self.where = {}
        files = {}
        if os.path.exists(index_path):
            with open(index_path, "r", encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            for name, shard in weight_map.items():
                if shard not in files:
                    files[shard] = SafetensorsFile(os.path.join(model_dir, shard))
                if name not in files[shard].meta:
                    raise ValueError(f"index maps {name} to {shard}, which does not hold it")
                self.where[name] = files[shard]
        elif os.path.exists(single):
            st = SafetensorsFile(single)
            for name in st.names():
                self.where[name] = st
        else:
            raise FileNotFoundError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")
        self.used = set()
        self._cache = {}

    def has(self, name):
        return name in self.where

    def __getitem__(self, name):
        if name not in self._cache:
            if name not in self.where:
                raise KeyError(f"{self.dir}: tensor '{name}' not found in the checkpoint")
            self._cache[name] = self.where[name].get_f32(name)
        self.used.add(name)
        return self._cache[name]

    def unused(self):
        return sorted(set(self.where) - self.used)


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


# --- routing ---

def topk_desc(x, k):
    """Indices of the k largest per row, in descending order (ties: lower index first)."""
    idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return idx, np.take_along_axis(x, idx, axis=-1)


def causal_mask(s, sliding_window=None):
    """[S, S] boolean: True where query i may attend key j (j <= i and, with a window W, i - j < W)."""
    i = np.arange(s)[:, None]
    j = np.arange(s)[None, :]
    ok = j <= i
    if sliding_window is not None:
        ok &= (i - j) < sliding_window
    return ok


def attention(q, k, v, scale, sliding_window=None):
    """q [H, S, D], k [Hkv, S, D], v [Hkv, S, Dv] -> [S, H*Dv]. GQA by repeating kv heads
    (query head h reads kv head h // (H/Hkv)), causal, softmax in fp32."""
    h, s, _ = q.shape
    rep = h // k.shape[0]
    if rep > 1:
        k = np.repeat(k, rep, axis=0)
        v = np.repeat(v, rep, axis=0)
    scores = (q @ k.transpose(0, 2, 1)) * F32(scale)
    scores = np.where(causal_mask(s, sliding_window)[None], scores, F32(-np.inf))
    probs = softmax(scores, axis=-1)
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


# ----------------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------------

SUPPORTED = ("qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2")
DEEPSEEK_LORA_NORM_EPS = 1e-6


def _get(cfg, key, default=None):
    v = cfg.get(key, default)
    return default if v is None else v


class Model:
    def __init__(self, model_dir):
        self.ckpt = Checkpoint(model_dir)
        c = self.ckpt.config
        self.cfg = c
        self.type = c.get("model_type")
        if self.type not in SUPPORTED:
            raise ValueError(f"unsupported model_type {self.type!r} (expected one of {', '.join(SUPPORTED)})")
        self.hidden = int(c["hidden_size"])
        self.n_layers = int(c["num_hidden_layers"])
        self.n_heads = int(c["num_attention_heads"])
        self.n_kv = int(_get(c, "num_key_value_heads", self.n_heads))
        self.eps = float(_get(c, "rms_norm_eps", 1e-6))
        self.vocab = int(c["vocab_size"])
        self.theta = float(_get(c, "rope_theta", 10000.0))
        self.tie = bool(_get(c, "tie_word_embeddings", False))
        self.top_k = int(_get(c, "num_experts_per_tok", 0))
        t = self.type
        if t == "deepseek_v2":
            self.q_lora = int(_get(c, "q_lora_rank", 0))
            self.kv_lora = int(c["kv_lora_rank"])
            self.qk_nope = int(c["qk_nope_head_dim"])
            self.qk_rope = int(c["qk_rope_head_dim"])
            self.v_head = int(c["v_head_dim"])
            self.q_head = self.qk_nope + self.qk_rope
            self.attention_bias = bool(_get(c, "attention_bias", False))
            self.n_experts = int(_get(c, "n_routed_experts", 0))
            self.n_shared = int(_get(c, "n_shared_experts", 0))
            self.first_dense = int(_get(c, "first_k_dense_replace", 0))
            self.moe_freq = int(_get(c, "moe_layer_freq", 1))
            self.norm_topk = bool(_get(c, "norm_topk_prob", False))
            self.routed_scale = float(_get(c, "routed_scaling_factor", 1.0))
            self.topk_method = _get(c, "topk_method", "greedy")
            self.n_group = int(_get(c, "n_group", 1))
            self.topk_group = int(_get(c, "topk_group", 1))
            scoring = _get(c, "scoring_func", "softmax")
            if scoring != "softmax":
                raise NotImplementedError(f"deepseek_v2 scoring_func {scoring!r} (only softmax)")
            if self.topk_method not in ("greedy", "group_limited_greedy"):
                raise NotImplementedError(f"deepseek_v2 topk_method {self.topk_method!r}")
            self.softmax_scale = self.q_head ** -0.5
            rs = c.get("rope_scaling")
            self.rope_mscale = 1.0
            self.rope_linear_factor = 1.0
            if rs is None:
                self.inv_freq = rope_inv_freq(self.qk_rope, self.theta)
            else:
                kind = rs.get("type", rs.get("rope_type"))
                # DeepseekV2Attention.__init__: for any rope_scaling type with mscale_all_dim set.
                mscale_all_dim = rs.get("mscale_all_dim", 0)
                if mscale_all_dim:
                    m = yarn_get_mscale(float(rs["factor"]), mscale_all_dim)
                    self.softmax_scale = self.softmax_scale * m * m
                if kind == "yarn":
                    self.inv_freq, self.rope_mscale = deepseek_yarn_inv_freq_and_mscale(self.qk_rope, self.theta, rs)
                elif kind == "linear":
                    self.inv_freq = rope_inv_freq(self.qk_rope, self.theta)
                    self.rope_linear_factor = float(rs["factor"])
                else:
                    raise NotImplementedError(f"deepseek_v2 rope_scaling type {kind!r}")
        else:
            hd = c.get("head_dim")
            # OlmoeAttention always uses hidden_size // num_heads; the others honour a config head_dim.
            self.head_dim = int(hd) if (hd and t != "olmoe") else self.hidden // self.n_heads
            self.inv_freq = rope_inv_freq(self.head_dim, self.theta)
            self.rope_linear_factor = 1.0
            self.rope_mscale = 1.0
            rs = c.get("rope_scaling")
            if rs is not None:
                kind = rs.get("type", rs.get("rope_type"))
                if kind == "linear":
                    self.rope_linear_factor = float(rs["factor"])
                elif kind != "default":
                    raise NotImplementedError(f"{t} rope_scaling type {kind!r} is not implemented")
            self.scale = self.head_dim ** -0.5
            if t == "mixtral":
                self.n_experts = int(_get(c, "num_local_experts", 0))
                self.norm_topk = True
            else:
                self.n_experts = int(_get(c, "num_experts", 0))
                self.norm_topk = bool(_get(c, "norm_topk_prob", False))
            # Qwen2MoeSparseMoeBlock: shared_expert (+ shared_expert_gate) of shared_expert_intermediate_size.
            self.has_shared_expert = t == "qwen2_moe" and int(_get(c, "shared_expert_intermediate_size", 0)) > 0
            if t in ("qwen2_moe", "qwen3_moe"):
                self.sparse_step = int(_get(c, "decoder_sparse_step", 1))
                self.mlp_only = set(int(v) for v in _get(c, "mlp_only_layers", []))
            self.qkv_bias = True if t == "qwen2_moe" else (False if t == "mixtral" else bool(_get(c, "attention_bias", False)))
            self.o_bias = False if t in ("qwen2_moe", "mixtral") else bool(_get(c, "attention_bias", False))
            self.clip_qkv = _get(c, "clip_qkv", None) if t == "olmoe" else None

    # --- layer kinds ---

    def is_moe_layer(self, i):
        t = self.type
        if t in ("qwen2_moe", "qwen3_moe"):
            return (i not in self.mlp_only) and self.n_experts > 0 and (i + 1) % self.sparse_step == 0
        if t == "deepseek_v2":
            return self.n_experts > 0 and i >= self.first_dense and i % self.moe_freq == 0
        return True  # mixtral, olmoe: every layer is sparse

    def sliding_window(self, i):
        c = self.cfg
        if self.type == "mixtral":
            w = c.get("sliding_window")
            return int(w) if w else None
        if self.type in ("qwen2_moe", "qwen3_moe"):
            if c.get("use_sliding_window") and c.get("sliding_window"):
                if i >= int(_get(c, "max_window_layers", 0)):
                    return int(c["sliding_window"])
        return None

    def rope_tables(self, positions):
        pos = np.asarray(positions, dtype=np.float64) / self.rope_linear_factor
        return rope_cos_sin(pos, self.inv_freq, self.rope_mscale)

    # --- attention ---

    def _bias(self, name, enabled):
        return self.ckpt[name] if enabled else None

    def std_qkv(self, p, x):
        """q [H, S, D], k/v [Hkv, S, D] before rope (norms and clipping applied)."""
        W = self.ckpt
        s = x.shape[0]
        H, Hkv, D = self.n_heads, self.n_kv, self.head_dim
        q = linear(x, W[p + "self_attn.q_proj.weight"], self._bias(p + "self_attn.q_proj.bias", self.qkv_bias))
        k = linear(x, W[p + "self_attn.k_proj.weight"], self._bias(p + "self_attn.k_proj.bias", self.qkv_bias))
        v = linear(x, W[p + "self_attn.v_proj.weight"], self._bias(p + "self_attn.v_proj.bias", self.qkv_bias))
        if self.type == "olmoe":
            # OLMoE: RMSNorm over the whole projection output, before the head split; then clip.
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], self.eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], self.eps)
            if self.clip_qkv is not None:
                c = F32(self.clip_qkv)
                q, k, v = np.clip(q, -c, c), np.clip(k, -c, c), np.clip(v, -c, c)
        q = q.reshape(s, H, D)
        k = k.reshape(s, Hkv, D)
        v = v.reshape(s, Hkv, D)
        if self.type == "qwen3_moe":
            # Qwen3: RMSNorm per head over head_dim, before rope.
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], self.eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], self.eps)
        return q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2)

    def std_attention(self, i, x, positions):
        p = f"model.layers.{i}."
        q, k, v = self.std_qkv(p, x)
        cos, sin = self.rope_tables(positions)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        o = attention(q, k, v, self.scale, self.sliding_window(i))
        return linear(o, self.ckpt[p + "self_attn.o_proj.weight"],
                      self._bias(p + "self_attn.o_proj.bias", self.o_bias))

    def mla_project(self, p, x):
        """DeepSeek MLA projections: q_nope [H,S,nope], q_pe [H,S,rope], k_pe [S,rope] (interleaved
        layout, before rope), k_nope [H,S,nope], v [H,S,v_head]."""
        W = self.ckpt
        s = x.shape[0]
        H = self.n_heads
        if self.q_lora:
            qa = linear(x, W[p + "self_attn.q_a_proj.weight"], self._bias(p + "self_attn.q_a_proj.bias", self.attention_bias))
            # q_a_layernorm / kv_a_layernorm are DeepseekV2RMSNorm(rank) with the class default eps 1e-6,
            # not config.rms_norm_eps (the same value in every released DeepSeek-V2 config).
            qa = rms_norm(qa, W[p + "self_attn.q_a_layernorm.weight"], DEEPSEEK_LORA_NORM_EPS)
            q = linear(qa, W[p + "self_attn.q_b_proj.weight"])
        else:
            q = linear(x, W[p + "self_attn.q_proj.weight"])
        q = q.reshape(s, H, self.q_head).transpose(1, 0, 2)
        q_nope, q_pe = q[..., :self.qk_nope], q[..., self.qk_nope:]
        ckv = linear(x, W[p + "self_attn.kv_a_proj_with_mqa.weight"],
                     self._bias(p + "self_attn.kv_a_proj_with_mqa.bias", self.attention_bias))
        compressed, k_pe = ckv[:, :self.kv_lora], ckv[:, self.kv_lora:]
        kv = linear(rms_norm(compressed, W[p + "self_attn.kv_a_layernorm.weight"], DEEPSEEK_LORA_NORM_EPS),
                    W[p + "self_attn.kv_b_proj.weight"])
        kv = kv.reshape(s, H, self.qk_nope + self.v_head).transpose(1, 0, 2)
        k_nope, v = kv[..., :self.qk_nope], kv[..., self.qk_nope:]
        return q_nope, q_pe, k_pe, k_nope, v

    def mla_attention(self, i, x, positions):
        p = f"model.layers.{i}."
        s = x.shape[0]
        H = self.n_heads
        q_nope, q_pe, k_pe, k_nope, v = self.mla_project(p, x)
        cos, sin = self.rope_tables(positions)
        q_pe = apply_rope(deinterleave(q_pe), cos, sin)
        k_pe = apply_rope(deinterleave(k_pe), cos, sin)  # [S, rope], shared by all heads
        q = np.concatenate([q_nope, q_pe], axis=-1)
        k = np.concatenate([k_nope, np.broadcast_to(k_pe[None], (H, s, self.qk_rope))], axis=-1)
        o = attention(q, k, v, self.softmax_scale)
        return linear(o, self.ckpt[p + "self_attn.o_proj.weight"],
                      self._bias(p + "self_attn.o_proj.bias", self.attention_bias))

    # --- MLP / MoE ---

    def gated_mlp(self, prefix, x, names=("gate_proj", "up_proj", "down_proj")):
        W = self.ckpt
        g = linear(x, W[f"{prefix}.{names[0]}.weight"])
        u = linear(x, W[f"{prefix}.{names[1]}.weight"])
        return linear(silu(g) * u, W[f"{prefix}.{names[2]}.weight"])

    def route(self, p, x):
        """(topk_idx [S,k], topk_weight [S,k]) of the router of layer prefix p."""
        W = self.ckpt
        name = p + ("block_sparse_moe.gate.weight" if self.type == "mixtral" else "mlp.gate.weight")
        probs = softmax(linear(x, W[name]), axis=-1)
        return select_experts(self.type, probs, self.top_k, self.norm_topk,
                              routed_scale=getattr(self, "routed_scale", 1.0),
                              topk_method=getattr(self, "topk_method", "greedy"),
                              n_group=getattr(self, "n_group", 1), topk_group=getattr(self, "topk_group", 1))

    def expected_names(self):
        """The state-dict names of the HF model for this config (what the checkpoint must hold)."""
        names = ["model.embed_tokens.weight", "model.norm.weight"]
        if not self.tie:
            names.append("lm_head.weight")
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
            a = p + "self_attn."
            if self.type == "deepseek_v2":
                if self.q_lora:
                    names += [a + "q_a_proj.weight", a + "q_a_layernorm.weight", a + "q_b_proj.weight"]
                    if self.attention_bias:
                        names.append(a + "q_a_proj.bias")
                else:
                    names.append(a + "q_proj.weight")
                names += [a + "kv_a_proj_with_mqa.weight", a + "kv_a_layernorm.weight", a + "kv_b_proj.weight",
                          a + "o_proj.weight"]
                if self.attention_bias:
                    names += [a + "kv_a_proj_with_mqa.bias", a + "o_proj.bias"]
            else:
                for pr in ("q_proj", "k_proj", "v_proj"):
                    names.append(a + pr + ".weight")
                    if self.qkv_bias:
                        names.append(a + pr + ".bias")
                names.append(a + "o_proj.weight")
                if self.o_bias:
                    names.append(a + "o_proj.bias")
                if self.type in ("qwen3_moe", "olmoe"):
                    names += [a + "q_norm.weight", a + "k_norm.weight"]
            mlp3 = ("gate_proj", "up_proj", "down_proj")
            if self.type == "mixtral":
                names.append(p + "block_sparse_moe.gate.weight")
                for e in range(self.n_experts):
                    names += [f"{p}block_sparse_moe.experts.{e}.{w}.weight" for w in ("w1", "w2", "w3")]
            elif self.is_moe_layer(i):
                names.append(p + "mlp.gate.weight")
                for e in range(self.n_experts):
                    names += [f"{p}mlp.experts.{e}.{w}.weight" for w in mlp3]
                if self.type == "qwen2_moe" and self.has_shared_expert:
                    names += [f"{p}mlp.shared_expert.{w}.weight" for w in mlp3]
                    names.append(p + "mlp.shared_expert_gate.weight")
                if self.type == "deepseek_v2" and self.n_shared > 0:
                    names += [f"{p}mlp.shared_experts.{w}.weight" for w in mlp3]
            else:
                names += [f"{p}mlp.{w}.weight" for w in mlp3]
        return names

    def check_layout(self):
        """Raises ValueError when the checkpoint's tensor names differ from the HF state dict's."""
        want = set(self.expected_names())
        have = set(self.ckpt.where)
        missing, extra = sorted(want - have), sorted(have - want)
        if missing or extra:
            raise ValueError(f"{self.ckpt.dir}: checkpoint layout differs from the {self.type} HF model: "
                             f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}, "
                             f"unexpected {extra[:8]}{'...' if len(extra) > 8 else ''}")

    def expert(self, p, e, x):
        if self.type == "mixtral":
            return self.gated_mlp(f"{p}block_sparse_moe.experts.{e}", x, ("w1", "w3", "w2"))
        return self.gated_mlp(f"{p}mlp.experts.{e}", x)

    def moe(self, i, x):
        p = f"model.layers.{i}."
        idx, w = self.route(p, x)
        out = np.zeros_like(x)
        for e in range(self.n_experts):
            tok, slot = np.nonzero(idx == e)
            if tok.size == 0:
                continue
            y = self.expert(p, e, x[tok])
            np.add.at(out, tok, y * w[tok, slot][:, None])
        if self.type == "qwen2_moe" and self.has_shared_expert:
            sh = self.gated_mlp(p + "mlp.shared_expert", x)
            gate = sigmoid(linear(x, self.ckpt[p + "mlp.shared_expert_gate.weight"]))
            out = out + gate * sh
        if self.type == "deepseek_v2" and self.n_shared > 0:
            out = out + self.gated_mlp(p + "mlp.shared_experts", x)
        return out

    def mlp(self, i, x):
        if self.is_moe_layer(i):
            return self.moe(i, x)
        return self.gated_mlp(f"model.layers.{i}.mlp", x)

    # --- whole model ---

    def embed(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("ids must be a non-empty 1-D sequence")
        if ids.min() < 0 or ids.max() >= self.vocab:
            raise ValueError(f"token id out of range [0, {self.vocab})")
        return self.ckpt["model.embed_tokens.weight"][ids].astype(F32)

    def lm_head(self, h):
        W = self.ckpt
        h = rms_norm(h, W["model.norm.weight"], self.eps)
        head = W["model.embed_tokens.weight"] if self.tie else W["lm_head.weight"]
        return linear(h, head)

    def forward(self, ids, naive=False):
        if naive:
            return NaiveRunner(self).forward(ids)
        W = self.ckpt
        h = self.embed(ids)
        positions = np.arange(h.shape[0])
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            x = rms_norm(h, W[p + "input_layernorm.weight"], self.eps)
            if self.type == "deepseek_v2":
                h = h + self.mla_attention(i, x, positions)
            else:
                h = h + self.std_attention(i, x, positions)
            x = rms_norm(h, W[p + "post_attention_layernorm.weight"], self.eps)
            h = h + self.mlp(i, x)
        return self.lm_head(h)


# ----------------------------------------------------------------------------------------------------
# A deliberately different, slow implementation used by the self-test: one token at a time with a KV
# cache, per-head loops, RoPE as explicit 2-D rotations of (i, i+d/2) pairs (NeoX) or of the original
# interleaved (2i, 2i+1) pairs (DeepSeek, no de-interleave), angles and cos/sin in float64, and per-token
# routing with python sorting. It shares only the projections/norm/MLP primitives with Model.
# ----------------------------------------------------------------------------------------------------

def _rotate_pairs_neox(x, pos, inv_freq):
    d = x.shape[-1]
    h = d // 2
    out = np.empty_like(x)
    for i in range(h):
        a = pos * float(inv_freq[i])
        c, s = math.cos(a), math.sin(a)
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

    def _route_token(self, p, x):
        m = self.m
        gate = m.ckpt[(p + "block_sparse_moe.gate.weight") if m.type == "mixtral" else (p + "mlp.gate.weight")]
        logits = [float(np.dot(gate[e].astype(np.float64), x.astype(np.float64))) for e in range(gate.shape[0])]
        mx = max(logits)
        ex = [math.exp(v - mx) for v in logits]
        z = sum(ex)
        probs = [v / z for v in ex]
        cand = list(range(len(probs)))
        if m.type == "deepseek_v2" and m.topk_method == "group_limited_greedy":
            gsz = len(probs) // m.n_group
            gscore = [max(probs[g * gsz:(g + 1) * gsz]) for g in range(m.n_group)]
            keep = sorted(range(m.n_group), key=lambda g: -gscore[g])[:m.topk_group]
            cand = [e for e in cand if e // gsz in keep]
        chosen = sorted(cand, key=lambda e: -probs[e])[:m.top_k]
        ws = [probs[e] for e in chosen]
        if m.type == "deepseek_v2":
            if m.top_k > 1 and m.norm_topk:
                tot = sum(ws) + 1e-20
                ws = [v / tot for v in ws]
            else:
                ws = [v * m.routed_scale for v in ws]
        elif m.norm_topk:
            tot = sum(ws)
            ws = [v / tot for v in ws]
        return chosen, ws

    def _mlp_token(self, i, x):
        m = self.m
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
        if m.type == "deepseek_v2" and m.n_shared > 0:
            acc += m.gated_mlp(p + "mlp.shared_experts", xr)[0].astype(np.float64)
        return acc.astype(F32)

    def _attend(self, q, keys, vals, scale):
        """q [D]; keys [T, D]; vals [T, Dv] (all past + current), float64 softmax."""
        sc = [float(np.dot(q.astype(np.float64), kk.astype(np.float64))) * scale for kk in keys]
        mx = max(sc)
        ex = [math.exp(v - mx) for v in sc]
        z = sum(ex)
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
                if m.type == "deepseek_v2":
                    q_nope, q_pe, k_pe, k_nope, v = m.mla_project(p, x)  # S = 1
                    q_pe = _rotate_pairs_interleaved(q_pe[:, 0, :], pos, inv) * m.rope_mscale
                    k_pe = _rotate_pairs_interleaved(k_pe[0], pos, inv) * m.rope_mscale
                    kc.append([np.concatenate([k_nope[hh, 0], k_pe]) for hh in range(H)])
                    vc.append([v[hh, 0] for hh in range(H)])
                    heads = []
                    for hh in range(H):
                        qh = np.concatenate([q_nope[hh, 0], q_pe[hh]])
                        heads.append(self._attend(qh, [kk[hh] for kk in kc], [vv[hh] for vv in vc], m.softmax_scale))
                    bias = W[p + "self_attn.o_proj.bias"] if m.attention_bias else None
                else:
                    q, k, v = m.std_qkv(p, x)  # [H,1,D], [Hkv,1,D]
                    q = _rotate_pairs_neox(q[:, 0, :], pos, inv)
                    k = _rotate_pairs_neox(k[:, 0, :], pos, inv)
                    kc.append([k[j] for j in range(m.n_kv)])
                    vc.append([v[j, 0] for j in range(m.n_kv)])
                    win = m.sliding_window(i)
                    lo = 0 if win is None else max(0, t - win + 1)
                    heads = []
                    group = H // m.n_kv
                    for hh in range(H):
                        j = hh // group
                        heads.append(self._attend(q[hh], [kk[j] for kk in kc[lo:]], [vv[j] for vv in vc[lo:]], m.scale))
                    bias = W[p + "self_attn.o_proj.bias"] if m.o_bias else None
                o = np.concatenate(heads).astype(F32)[None, :]
                h = h + linear(o, W[p + "self_attn.o_proj.weight"], bias)[0]
                x = rms_norm(h[None, :], W[p + "post_attention_layernorm.weight"], m.eps)[0]
                h = h + self._mlp_token(i, x)
            rows.append(m.lm_head(h[None, :])[0])
        return np.stack(rows).astype(F32)


# ----------------------------------------------------------------------------------------------------

def parse_ids(text):
    return [int(v) for v in text.replace(" ", "").split(",") if v != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description="fp32 numpy reference logits of an HF MoE checkpoint")
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint directory")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="output file: float32 LE logits [n_ids, vocab]")
    ap.add_argument("--naive", action="store_true", help="use the slow token-by-token implementation")
    args = ap.parse_args(argv)
    model = Model(args.model)
    logits = model.forward(parse_ids(args.ids), naive=args.naive)
    logits.astype("<f4").tofile(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
