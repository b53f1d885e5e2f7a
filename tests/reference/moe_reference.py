#!/usr/bin/python3
"""Independent fp32 numpy reference of the Hugging Face `transformers` forward passes of seventeen MoE LLMs.

Written from the HF modeling code and the model papers, without transformers/torch:
  qwen2_moe     Qwen2MoeForCausalLM    (Qwen1.5-MoE)
  mixtral       MixtralForCausalLM
  qwen3_moe     Qwen3MoeForCausalLM
  olmoe         OlmoeForCausalLM
  deepseek_v2   DeepseekV2ForCausalLM  (the remote code `modeling_deepseek.py` of DeepSeek-V2/-Lite)
  deepseek_v3   DeepseekV3ForCausalLM  (DeepSeek-V3/R1, Moonlight, Kimi-K2: MLA + the noaux_tc sigmoid router)
  glm4_moe      Glm4MoeForCausalLM     (GLM-4.5/-Air/4.6/4.7: GQA, partial rotary, noaux_tc router)
  glm4_moe_lite Glm4MoeLiteForCausalLM (GLM-4.7-Flash: MLA + the GLM-4.5 MoE)
  ernie4_5_moe  Ernie4_5_MoeForCausalLM (ERNIE-4.5-21B-A3B, -300B-A47B: GQA, interleaved RoPE, softmax
                router with a selection-only bias, shared experts)
  gpt_oss       GptOssForCausalLM      (gpt-oss-20b, -120b: attention sinks and biases, alternating sliding /
                full layers, YaRN, biased top-k router with a softmax over the k, clamped SwiGLU experts
                stored as MXFP4; moe_reference_gpt_oss.py)
  qwen3_next    Qwen3NextForCausalLM   (Qwen3-Next-80B-A3B: Gated DeltaNet linear attention layers + gated full
                attention, zero-centred RMSNorm, softmax top-k MoE with a sigmoid-gated shared expert;
                moe_reference_qwen3_next.py)
  qwen3_5_moe   Qwen3_5MoeForConditionalGeneration's text model (Qwen3.5-35B-A3B: the same blocks, un-interleaved
                DeltaNet projections, fused experts, `model.language_model.` names; vision tower ignored)
  granitemoe    GraniteMoeForCausalLM  (IBM Granite 3.0/3.1 MoE, PowerMoE: embedding / residual / attention / logits
                multipliers, top-k router with a softmax over the k, fused [E, 2I, H] / [E, H, I] experts;
                moe_reference_granite.py)
  granitemoeshared GraniteMoeSharedForCausalLM (granitemoe plus an ungated shared MLP of shared_intermediate_size)
  granitemoehybrid GraniteMoeHybridForCausalLM (IBM Granite 4.0-H: Mamba2 layers (chunked SSD scan) and attention
                layers without positional embedding (or RoPE), granitemoeshared's MoE + shared MLP or the shared MLP
                alone; moe_reference_granite_hybrid.py)
  lfm2_moe      Lfm2MoeForCausalLM     (Liquid AI LFM2-8B-A1B, LFM2-24B-A2B: gated short-conv layers (B * x through a
                depthwise causal conv, times C) and GQA layers with per-head q/k RMSNorm, dense SwiGLU in the first
                num_dense_layers, then a sigmoid top-k router with a selection-only expert_bias; moe_reference_lfm2.py)
  afmoe         AfmoeForCausalLM       (Arcee AI Trinity-Nano 6B-A1B, Trinity-Mini 26B-A3B: GQA with per-head q/k
                RMSNorm and a sigmoid output gate, RoPE and a sliding window on the "sliding_attention" layers and no
                positional embedding on the "full_attention" ones, four RMSNorms per layer (pre and post around
                attention and MLP), mup embedding scaling, dense SwiGLU in the first num_dense_layers, then a sigmoid
                top-k router with a selection-only expert_bias plus ungated shared experts; moe_reference_afmoe.py)

Everything is computed in float32 (BF16/F16 weights are upcast exactly, FP8 E4M3 block-scaled weights and
MXFP4 (e2m1 x E8M0) expert weights are dequantized exactly); see docs/reference.md for the semantics
implemented per architecture and the choices that are uncertain.

CLI:  /usr/bin/python3 moe_reference.py --model DIR --ids 1,2,3 --out FILE
      writes float32 little-endian logits [n_ids, vocab] row-major.

Library:  m = Model(dir); logits = m.forward([1, 2, 3])            # vectorised full-sequence pass
          logits = m.forward([1, 2, 3], naive=True)                 # slow token-by-token loop with a
                                                                    # KV cache, written independently

Modules: moe_reference_safetensors.py (the safetensors reader/writer, checkpoint directories, FP8 and MXFP4),
moe_reference_ops.py (the numerical helpers), moe_reference_naive.py (the slow token-by-token pass),
moe_reference_gpt_oss.py (gpt_oss config, tensor names, router and experts), moe_reference_qwen3_next.py
(qwen3_next / qwen3_5_moe config, tensor names, the gated delta rule recurrent and chunked, the vectorised pass),
moe_reference_granite.py (granitemoe / granitemoeshared config, tensor names, router, experts, the vectorised pass),
moe_reference_granite_hybrid.py (granitemoehybrid config, tensor names, the Mamba2 mixer with the SSD scan
recurrent and chunked, the vectorised pass), moe_reference_lfm2.py (lfm2_moe config, tensor names, the short conv,
the attention with q/k norms, the router, the vectorised pass), moe_reference_afmoe.py (afmoe config, tensor names,
the gated attention with its window, the router and shared experts, the vectorised pass);
their names are re-exported here, as check_logits.py uses them (ref.rms_norm, ref.write_safetensors, ...).
"""

import argparse
import re
import sys

import numpy as np

import moe_reference_afmoe as afmoe
import moe_reference_gpt_oss as gpt_oss
import moe_reference_granite as granite
import moe_reference_granite_hybrid as granite_hybrid
import moe_reference_lfm2 as lfm2
import moe_reference_qwen3_next as qwen3_next
from moe_reference_naive import NaiveRunner
from moe_reference_ops import (F32, apply_partial_rope, apply_rope, apply_rope_interleaved, attention,
    causal_mask, deepseek_yarn_inv_freq_and_mscale, deinterleave, gpt_oss_swiglu, hf_yarn_inv_freq_and_attention_factor,
    linear, rms_norm, rope_cos_sin, rope_inv_freq, rotate_half, rotate_half_interleaved, select_experts,
    select_experts_afmoe, select_experts_ernie, select_experts_gpt_oss, select_experts_granite, select_experts_lfm2,
    select_experts_noaux_tc, sigmoid, silu,
    softmax, topk_desc, yarn_find_correction_dim, yarn_find_correction_range, yarn_get_mscale,
    yarn_linear_ramp_mask)  # noqa: F401
from moe_reference_safetensors import (E2M1_TO_F32, E4M3_TO_F32, FP8_SCALE_SUFFIX, Checkpoint, SafetensorsFile,
    bf16_bits_to_f32, e4m3_bits_to_f32, e8m0_to_f32, f32_to_bf16_bits, f32_to_e4m3_bits, mxfp4_dequantize,
    write_safetensors)  # noqa: F401

# ----------------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------------

SUPPORTED = ("qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "glm4_moe",
             "glm4_moe_lite", "ernie4_5_moe", "gpt_oss", "qwen3_next", "qwen3_5_moe", "granitemoe", "granitemoeshared",
             "granitemoehybrid", "lfm2_moe", "afmoe")
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "glm4_moe_lite")       # DeepSeek multi-head latent attention
DEEPSEEK_MOE_TYPES = ("deepseek_v2", "deepseek_v3", "glm4_moe", "glm4_moe_lite")  # mlp.gate + shared_experts
MTP_TYPES = ("deepseek_v3", "glm4_moe", "glm4_moe_lite")         # may ship MTP layers >= num_hidden_layers
DEEPSEEK_LORA_NORM_EPS = 1e-6
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")
ERNIE_BIAS = "mlp.moe_statics.e_score_correction_bias"   # its name in the checkpoint, shape [1, E]

# Defaults of transformers' Ernie4_5_MoeConfig for keys a config.json may omit (null counts as missing).
ERNIE_DEFAULTS = dict(num_key_value_heads=4, rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=500000.0,
                      use_bias=False, moe_intermediate_size=1536, moe_k=6, moe_num_experts=64, moe_num_shared_experts=2,
                      moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=1, moe_norm_min=1e-12,
                      hidden_act="silu")

# Defaults of the transformers config classes (DeepseekV3Config, Glm4MoeConfig, Glm4MoeLiteConfig) for keys
# a config.json may omit. A key present with the value null counts as null (q_lora_rank: null = no q LoRA).
NEW_TYPE_DEFAULTS = {
    "deepseek_v3": dict(q_lora_rank=1536, n_routed_experts=256, n_shared_experts=1, routed_scaling_factor=2.5,
                        n_group=8, topk_group=4, first_k_dense_replace=3, moe_layer_freq=1, norm_topk_prob=True,
                        rope_interleave=True, rms_norm_eps=1e-6, attention_bias=False, partial_rotary_factor=1.0,
                        max_position_embeddings=4096, topk_method="noaux_tc", scoring_func="sigmoid"),
    "glm4_moe": dict(n_routed_experts=128, n_shared_experts=1, routed_scaling_factor=1.0, n_group=1, topk_group=1,
                     first_k_dense_replace=1, norm_topk_prob=True, use_qk_norm=False, rms_norm_eps=1e-5,
                     attention_bias=False, partial_rotary_factor=0.5, max_position_embeddings=131072),
    "glm4_moe_lite": dict(q_lora_rank=768, n_routed_experts=64, n_shared_experts=1, routed_scaling_factor=1.8,
                          n_group=1, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True, rope_interleave=True,
                          rms_norm_eps=1e-5, attention_bias=False, partial_rotary_factor=1.0,
                          max_position_embeddings=202752),
}


def _get(cfg, key, default=None):
    v = cfg.get(key, default)
    return default if v is None else v


def _key(cfg, key, default):
    """cfg[key] if the key is present (even null), else default (HF: a config.json value replaces the class
    default, null included)."""
    return cfg[key] if key in cfg else default


class Model:
    def __init__(self, model_dir):
        self.ckpt = Checkpoint(model_dir)
        c = self.ckpt.config
        self.cfg = c
        self.type = c.get("model_type")
        if self.type not in SUPPORTED:
            raise ValueError(f"unsupported model_type {self.type!r} (expected one of {', '.join(SUPPORTED)})")
        self.mla = False
        self.router = "softmax"
        self.rope_style = "neox"   # ernie4_5_moe: "interleaved"
        self.mlp_bias = False      # ernie4_5_moe: every MLP linear (dense, experts, shared) has a bias iff use_bias
        self.lm_head_bias = False  # ernie4_5_moe: lm_head.bias iff use_bias
        self.n_shared_experts_used = False
        if self.type == "gpt_oss":  # every key has a GptOssConfig default (moe_reference_gpt_oss.py)
            self.router = "gpt_oss"
            gpt_oss.init_gpt_oss(self, c)
            return
        if self.type in qwen3_next.TYPES:  # hybrid Gated DeltaNet / gated attention (moe_reference_qwen3_next.py)
            qwen3_next.init(self, c)
            return
        if self.type in granite.TYPES:  # multipliers, fused parallel experts (moe_reference_granite.py)
            granite.init(self, c)
            return
        if self.type in granite_hybrid.TYPES:  # Mamba2 + attention + MoE (moe_reference_granite_hybrid.py)
            granite_hybrid.init(self, c)
            return
        if self.type in lfm2.TYPES:  # short conv + attention, sigmoid-routed MoE (moe_reference_lfm2.py)
            lfm2.init(self, c)
            return
        if self.type in afmoe.TYPES:  # gated attention, NoPE full / RoPE sliding layers, shared + routed experts
            afmoe.init(self, c)
            return
        self.hidden = int(c["hidden_size"])
        self.n_layers = int(c["num_hidden_layers"])
        self.n_heads = int(c["num_attention_heads"])
        self.n_kv = int(_get(c, "num_key_value_heads", self.n_heads))
        d = NEW_TYPE_DEFAULTS.get(self.type, {})
        self.eps = float(_get(c, "rms_norm_eps", d.get("rms_norm_eps", 1e-6)))
        self.vocab = int(c["vocab_size"])
        self.theta = float(_get(c, "rope_theta", 10000.0))
        self.tie = bool(_get(c, "tie_word_embeddings", False))
        self.top_k = int(_get(c, "num_experts_per_tok", 0))
        t = self.type
        self.mla = t in MLA_TYPES
        self.rotary_dim = None
        if t in NEW_TYPE_DEFAULTS:
            self._init_new_type(c, d)
        elif t == "ernie4_5_moe":
            self._init_ernie(c)
        elif t == "deepseek_v2":
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
            self.qk_norm_per_head = t == "qwen3_moe"
        self.n_shared_experts_used = ((t in DEEPSEEK_MOE_TYPES or t == "ernie4_5_moe")
                                      and getattr(self, "n_shared", 0) > 0)

    # --- deepseek_v3 / glm4_moe / glm4_moe_lite configuration ---

    def _init_new_type(self, c, d):
        t = self.type
        self.n_experts = int(_key(c, "n_routed_experts", d["n_routed_experts"]) or 0)
        self.n_shared = int(_key(c, "n_shared_experts", d["n_shared_experts"]) or 0)
        self.first_dense = int(_key(c, "first_k_dense_replace", d["first_k_dense_replace"]) or 0)
        self.moe_freq = int(_get(c, "moe_layer_freq", 1)) if t == "deepseek_v3" else 1
        self.norm_topk = bool(_key(c, "norm_topk_prob", d["norm_topk_prob"]))
        self.routed_scale = float(_key(c, "routed_scaling_factor", d["routed_scaling_factor"]))
        self.n_group = int(_key(c, "n_group", d["n_group"]))
        self.topk_group = int(_key(c, "topk_group", d["topk_group"]))
        self.attention_bias = bool(_key(c, "attention_bias", d["attention_bias"]))
        self.router = "noaux_tc"
        self.topk_method = "noaux_tc"
        if t == "deepseek_v3":
            method = _get(c, "topk_method", d["topk_method"])
            scoring = _get(c, "scoring_func", d["scoring_func"])
            if method in ("greedy", "group_limited_greedy") and scoring == "softmax":
                self.router, self.topk_method = "deepseek_v2", method   # the V2 MoEGate, V2 weight rule
            elif (method, scoring) != ("noaux_tc", "sigmoid"):
                raise NotImplementedError(f"deepseek_v3 topk_method {method!r} with scoring_func {scoring!r} "
                                          f"(noaux_tc+sigmoid, or greedy/group_limited_greedy+softmax)")
        self.mlp_layer_types = None
        if t == "glm4_moe_lite" and c.get("mlp_layer_types") is not None:
            kinds = list(c["mlp_layer_types"])
            if len(kinds) != self.n_layers or any(k not in ("dense", "sparse") for k in kinds):
                raise ValueError(f"glm4_moe_lite mlp_layer_types {kinds!r}: want {self.n_layers} of 'dense'/'sparse'")
            self.mlp_layer_types = kinds
        # RoPE parameters: transformers 5 reads the `rope_scaling` dict (else `rope_parameters`); rope_theta and
        # partial_rotary_factor come from that dict first, then the top-level keys, then the class default.
        rp = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})
        kind = rp.get("rope_type", rp.get("type")) or "default"
        self.theta = float(_get(rp, "rope_theta", _get(c, "rope_theta", 10000.0)))
        partial = float(_get(rp, "partial_rotary_factor", _get(c, "partial_rotary_factor", d["partial_rotary_factor"])))
        max_pos = int(_get(c, "max_position_embeddings", d["max_position_embeddings"]))
        if self.mla:
            q_lora = _key(c, "q_lora_rank", d["q_lora_rank"])
            self.q_lora = int(q_lora) if q_lora else 0
            self.kv_lora = int(c["kv_lora_rank"])
            self.qk_nope = int(c["qk_nope_head_dim"])
            self.qk_rope = int(c["qk_rope_head_dim"])
            self.v_head = int(c["v_head_dim"])
            self.q_head = self.qk_nope + self.qk_rope
            self.rope_interleave = bool(_key(c, "rope_interleave", d["rope_interleave"]))
            base_dim = self.qk_rope
        else:  # glm4_moe: standard GQA attention
            hd = c.get("head_dim")
            self.head_dim = int(hd) if hd else self.hidden // self.n_heads
            self.qkv_bias = self.attention_bias
            self.o_bias = False
            self.clip_qkv = None
            self.qk_norm_per_head = bool(_key(c, "use_qk_norm", d["use_qk_norm"]))
            self.scale = self.head_dim ** -0.5
            base_dim = self.head_dim
        rd = int(base_dim * partial)
        if rd <= 0 or rd % 2:
            raise NotImplementedError(f"{t}: rotary dim int({base_dim} * {partial}) = {rd} must be even and > 0")
        if self.mla and rd != self.qk_rope:
            raise NotImplementedError(f"{t}: partial_rotary_factor {partial} with MLA (rotary dim {rd} != "
                                      f"qk_rope_head_dim {self.qk_rope})")
        self.rotary_dim = rd
        self.rope_linear_factor = 1.0
        self.rope_mscale = 1.0
        if kind == "default":
            self.inv_freq = rope_inv_freq(rd, self.theta)
        elif kind == "linear":
            self.inv_freq = rope_inv_freq(rd, self.theta)
            self.rope_linear_factor = float(rp["factor"])
        elif kind == "yarn":
            self.inv_freq, self.rope_mscale = hf_yarn_inv_freq_and_attention_factor(
                rd, self.theta, rp, max_pos, original_max=c.get("original_max_position_embeddings"))
        else:
            raise NotImplementedError(f"{t} rope type {kind!r} (only default, linear, yarn)")
        if self.mla:
            self.softmax_scale = self.q_head ** -0.5
            mscale_all_dim = rp.get("mscale_all_dim") if kind != "default" else None
            if mscale_all_dim:
                m = yarn_get_mscale(float(rp["factor"]), mscale_all_dim)
                self.softmax_scale = self.softmax_scale * m * m

    # --- ernie4_5_moe configuration ---

    def _init_ernie(self, c):
        """Ernie4_5_MoeConfig + Ernie4_5_MoeForCausalLM. transformers' attribute_map makes `num_experts` /
        `num_experts_per_tok` aliases of `moe_num_experts` / `moe_k` (an alias present in config.json is set
        after the moe_* key and wins); both present with different values are refused here."""
        d = ERNIE_DEFAULTS
        self.n_kv = int(_get(c, "num_key_value_heads", d["num_key_value_heads"]))
        self.eps = float(_get(c, "rms_norm_eps", d["rms_norm_eps"]))
        self.tie = bool(_get(c, "tie_word_embeddings", d["tie_word_embeddings"]))
        act = _get(c, "hidden_act", d["hidden_act"])
        if act != "silu":
            raise NotImplementedError(f"ernie4_5_moe hidden_act {act!r} (only silu)")

        def moe_key(key, alias):
            v = _get(c, key, d[key])
            if c.get(alias) is not None:
                if c.get(key) is not None and c[alias] != c[key]:
                    raise ValueError(f"ernie4_5_moe: {alias} {c[alias]!r} differs from {key} {c[key]!r}")
                v = c[alias]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"ernie4_5_moe: {key} must be an integer, got {v!r}")
            return v

        self.n_experts = moe_key("moe_num_experts", "num_experts")
        self.top_k = moe_key("moe_k", "num_experts_per_tok")
        ints = {}
        for key in ("moe_intermediate_size", "moe_num_shared_experts", "moe_layer_start_index",
                    "moe_layer_end_index", "moe_layer_interval"):
            v = _get(c, key, d[key])
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"ernie4_5_moe: {key} must be an integer, got {v!r}")
            ints[key] = v
        self.moe_inter = ints["moe_intermediate_size"]
        self.n_shared = ints["moe_num_shared_experts"]
        self.moe_start = ints["moe_layer_start_index"]
        # Ernie4_5_MoeConfig: exactly -1 means the last layer; any other value is taken literally.
        end = ints["moe_layer_end_index"]
        self.moe_end = self.n_layers - 1 if end == -1 else end
        self.moe_interval = ints["moe_layer_interval"]
        if self.moe_interval < 1:
            raise ValueError(f"ernie4_5_moe: moe_layer_interval {self.moe_interval} must be >= 1")
        self.norm_min = float(_get(c, "moe_norm_min", d["moe_norm_min"]))
        if any(self.is_moe_layer(i) for i in range(self.n_layers)) and not (1 <= self.top_k <= self.n_experts):
            raise ValueError(f"ernie4_5_moe: moe_k {self.top_k} must be in [1, moe_num_experts {self.n_experts}]")
        self.router = "ernie"
        use_bias = bool(_get(c, "use_bias", d["use_bias"]))
        self.qkv_bias = self.o_bias = self.mlp_bias = self.lm_head_bias = use_bias
        self.clip_qkv = None
        self.qk_norm_per_head = False
        hd = c.get("head_dim")
        self.head_dim = int(hd) if hd else self.hidden // self.n_heads
        self.scale = self.head_dim ** -0.5
        # RoPE: interleaved pairs over the whole head_dim. rope_theta from the rope_scaling / rope_parameters
        # dict (transformers 5), else the top-level key, else 500000 (the config class default).
        rp = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})
        kind = rp.get("rope_type", rp.get("type")) or "default"
        self.theta = float(_get(rp, "rope_theta", _get(c, "rope_theta", d["rope_theta"])))
        partial = float(_get(rp, "partial_rotary_factor", _get(c, "partial_rotary_factor", 1.0)))
        if partial != 1.0:
            raise NotImplementedError(f"ernie4_5_moe partial_rotary_factor {partial} (transformers rotates the "
                                      f"whole head and could not broadcast a smaller table)")
        self.rope_style = "interleaved"
        self.rotary_dim = self.head_dim
        self.inv_freq = rope_inv_freq(self.head_dim, self.theta)
        self.rope_mscale = 1.0
        self.rope_linear_factor = 1.0
        if kind == "linear":
            self.rope_linear_factor = float(rp["factor"])
        elif kind != "default":
            raise NotImplementedError(f"ernie4_5_moe rope type {kind!r} (only default, linear)")

    # --- layer kinds ---

    def is_moe_layer(self, i):
        t = self.type
        if t in qwen3_next.TYPES:
            return qwen3_next.is_moe_layer(self, i)
        if t in lfm2.TYPES:
            return lfm2.is_moe_layer(self, i)
        if t in afmoe.TYPES:
            return afmoe.is_moe_layer(self, i)
        if t in ("qwen2_moe", "qwen3_moe"):
            return (i not in self.mlp_only) and self.n_experts > 0 and (i + 1) % self.sparse_step == 0
        if t in ("deepseek_v2", "deepseek_v3"):
            return self.n_experts > 0 and i >= self.first_dense and i % self.moe_freq == 0
        if t == "glm4_moe_lite" and self.mlp_layer_types is not None:
            return self.mlp_layer_types[i] == "sparse"
        if t in ("glm4_moe", "glm4_moe_lite"):
            return self.n_experts > 0 and i >= self.first_dense
        if t == "ernie4_5_moe":
            return (i + 1) % self.moe_interval == 0 and self.moe_start <= i <= self.moe_end
        return True  # mixtral, olmoe, gpt_oss, granitemoe, granitemoeshared: every layer is sparse

    def is_extra_layer_name(self, name):
        """A tensor of a layer >= num_hidden_layers (the MTP / next-token-prediction layers DeepSeek-V3 and
        GLM-4.5 ship), or for ernie4_5_moe one whose name contains "mtp" (`model.mtp_block.0.*`,
        `model.mtp_emb_norm.0.weight`, ...; transformers' _keys_to_ignore_on_load_unexpected = ["mtp"]):
        ignored by the forward pass and the layout check of those types."""
        if self.type == "ernie4_5_moe":
            return "mtp" in name
        if self.type in qwen3_next.TYPES:
            return qwen3_next.is_extra_name(self, name)
        if self.type not in MTP_TYPES:
            return False
        m = _LAYER_RE.match(name)
        return bool(m) and int(m.group(1)) >= self.n_layers

    def sliding_window(self, i):
        c = self.cfg
        if self.type == "gpt_oss":
            return self.layer_windows[i]   # layer_types: sliding_attention or full_attention
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
        if self.qk_norm_per_head:
            # Qwen3 / GLM-4.5 use_qk_norm: RMSNorm per head over head_dim, before rope.
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], self.eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], self.eps)
        return q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2)

    def std_attention(self, i, x, positions):
        p = f"model.layers.{i}."
        q, k, v = self.std_qkv(p, x)
        cos, sin = self.rope_tables(positions)
        if self.rope_style == "interleaved":  # ERNIE: adjacent pairs (2i, 2i+1)
            q = apply_rope_interleaved(q, cos, sin)
            k = apply_rope_interleaved(k, cos, sin)
        else:
            q = apply_partial_rope(q, cos, sin)  # GLM: the first rotary_dim dims only; the others: all dims
            k = apply_partial_rope(k, cos, sin)
        sinks = self.ckpt[p + "self_attn.sinks"] if self.type == "gpt_oss" else None   # [H]
        o = attention(q, k, v, self.scale, self.sliding_window(i), sinks)
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
        if getattr(self, "rope_interleave", True):  # deepseek_v2 always; v3 / glm4_moe_lite: rope_interleave
            q_pe, k_pe = deinterleave(q_pe), deinterleave(k_pe)
        q_pe = apply_rope(q_pe, cos, sin)
        k_pe = apply_rope(k_pe, cos, sin)  # [S, rope], shared by all heads
        q = np.concatenate([q_nope, q_pe], axis=-1)
        k = np.concatenate([k_nope, np.broadcast_to(k_pe[None], (H, s, self.qk_rope))], axis=-1)
        o = attention(q, k, v, self.softmax_scale)
        return linear(o, self.ckpt[p + "self_attn.o_proj.weight"],
                      self._bias(p + "self_attn.o_proj.bias", self.attention_bias))

    # --- MLP / MoE ---

    def gated_mlp(self, prefix, x, names=("gate_proj", "up_proj", "down_proj")):
        W = self.ckpt
        b = [self._bias(f"{prefix}.{n}.bias", self.mlp_bias) for n in names]
        g = linear(x, W[f"{prefix}.{names[0]}.weight"], b[0])
        u = linear(x, W[f"{prefix}.{names[1]}.weight"], b[1])
        return linear(silu(g) * u, W[f"{prefix}.{names[2]}.weight"], b[2])

    def ernie_bias(self, p):
        """mlp.moe_statics.e_score_correction_bias of layer prefix p as [E] (stored [1, E], as transformers'
        Ernie4_5_MoeStatics holds it; it squeezes it when adding)."""
        b = self.ckpt[p + ERNIE_BIAS]
        if b.shape != (1, self.n_experts):
            raise ValueError(f"{p + ERNIE_BIAS}: shape {list(b.shape)}, expected [1, {self.n_experts}]")
        return b[0]

    def route(self, p, x):
        """(topk_idx [S,k], topk_weight [S,k]) of the router of layer prefix p."""
        W = self.ckpt
        name = p + ("block_sparse_moe.gate.weight" if self.type == "mixtral" else "mlp.gate.weight")
        if self.router == "noaux_tc":
            scores = sigmoid(linear(x, W[name]))
            return select_experts_noaux_tc(scores, W[p + "mlp.gate.e_score_correction_bias"], self.top_k,
                                           self.n_group, self.topk_group, self.norm_topk, self.routed_scale)
        probs = softmax(linear(x, W[name]), axis=-1)
        if self.router == "ernie":
            return select_experts_ernie(probs, self.ernie_bias(p), self.top_k, self.norm_min)
        return select_experts("deepseek_v2" if self.router == "deepseek_v2" else self.type, probs, self.top_k,
                              self.norm_topk,
                              routed_scale=getattr(self, "routed_scale", 1.0),
                              topk_method=getattr(self, "topk_method", "greedy"),
                              n_group=getattr(self, "n_group", 1), topk_group=getattr(self, "topk_group", 1))

    def expected_names(self):
        """The state-dict names of the HF model for this config (what the checkpoint must hold)."""
        if self.type == "gpt_oss":
            return gpt_oss.expected_names(self)
        if self.type in qwen3_next.TYPES:
            return qwen3_next.expected_names(self)
        if self.type in granite.TYPES:
            return granite.expected_names(self)
        if self.type in granite_hybrid.TYPES:
            return granite_hybrid.expected_names(self)
        if self.type in lfm2.TYPES:
            return lfm2.expected_names(self)
        if self.type in afmoe.TYPES:
            return afmoe.expected_names(self)
        names = ["model.embed_tokens.weight", "model.norm.weight"]
        if not self.tie:
            names.append("lm_head.weight")
        if self.lm_head_bias:
            names.append("lm_head.bias")
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
            a = p + "self_attn."
            if self.mla:
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
                if self.qk_norm_per_head or self.type == "olmoe":
                    names += [a + "q_norm.weight", a + "k_norm.weight"]
            mlp3 = ("gate_proj", "up_proj", "down_proj")
            mlp3n = [w + ".weight" for w in mlp3] + ([w + ".bias" for w in mlp3] if self.mlp_bias else [])
            if self.type == "mixtral":
                names.append(p + "block_sparse_moe.gate.weight")
                for e in range(self.n_experts):
                    names += [f"{p}block_sparse_moe.experts.{e}.{w}.weight" for w in ("w1", "w2", "w3")]
            elif self.is_moe_layer(i):
                names.append(p + "mlp.gate.weight")
                if self.router == "noaux_tc":
                    names.append(p + "mlp.gate.e_score_correction_bias")
                if self.router == "ernie":
                    names.append(p + ERNIE_BIAS)
                for e in range(self.n_experts):
                    names += [f"{p}mlp.experts.{e}.{w}" for w in mlp3n]
                if self.type == "qwen2_moe" and self.has_shared_expert:
                    names += [f"{p}mlp.shared_expert.{w}.weight" for w in mlp3]
                    names.append(p + "mlp.shared_expert_gate.weight")
                if self.n_shared_experts_used:
                    names += [f"{p}mlp.shared_experts.{w}" for w in mlp3n]
            else:
                names += [f"{p}mlp.{w}" for w in mlp3n]
        return names

    def check_layout(self):
        """Raises ValueError when the checkpoint's tensor names differ from the HF state dict's. MTP layers
        (>= num_hidden_layers, deepseek_v3 / glm4_moe / glm4_moe_lite; `*mtp*` names, ernie4_5_moe) are
        ignored; an F8_E4M3 tensor brings its `_scale_inv` companion (FP8 checkpoints); gpt_oss MXFP4 experts
        are named `*_blocks` / `*_scales` by expected_names itself."""
        want = set(self.expected_names())
        want |= {n + FP8_SCALE_SUFFIX for n in want if n in self.ckpt.where and self.ckpt.dtype(n) == "F8_E4M3"}
        have = {n for n in self.ckpt.where if not self.is_extra_layer_name(n)}
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
        if self.n_shared_experts_used:
            out = out + self.gated_mlp(p + "mlp.shared_experts", x)
        return out

    def mlp(self, i, x):
        if self.type == "gpt_oss":
            return gpt_oss.moe(self, i, x)
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
        return linear(h, head, self._bias("lm_head.bias", self.lm_head_bias))

    def forward(self, ids, naive=False):
        if naive:
            return NaiveRunner(self).forward(ids)
        if self.type in qwen3_next.TYPES:
            return qwen3_next.forward(self, ids)
        if self.type in granite.TYPES:
            return granite.forward(self, ids)
        if self.type in granite_hybrid.TYPES:
            return granite_hybrid.forward(self, ids)
        if self.type in lfm2.TYPES:
            return lfm2.forward(self, ids)
        if self.type in afmoe.TYPES:
            return afmoe.forward(self, ids)
        W = self.ckpt
        h = self.embed(ids)
        positions = np.arange(h.shape[0])
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            x = rms_norm(h, W[p + "input_layernorm.weight"], self.eps)
            if self.mla:
                h = h + self.mla_attention(i, x, positions)
            else:
                h = h + self.std_attention(i, x, positions)
            x = rms_norm(h, W[p + "post_attention_layernorm.weight"], self.eps)
            h = h + self.mlp(i, x)
        return self.lm_head(h)



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
