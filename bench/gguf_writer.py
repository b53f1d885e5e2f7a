#!/usr/bin/env python3
"""Converts a Hugging Face MoE checkpoint to a BF16 GGUF (v3) that llama.cpp loads.

    /usr/bin/python3 bench/gguf_writer.py MODEL_DIR --out FILE.gguf [--name NAME] [--dtype bf16|f32]

MODEL_DIR holds config.json, the weights as *.safetensors (one file, or shards listed by
model.safetensors.index.json), tokenizer.json (byte-level BPE), and optionally tokenizer_config.json and
generation_config.json. Supported model_type values and the llama.cpp architecture they become:

    qwen2_moe -> qwen2moe   (Qwen1.5-MoE: q/k/v biases, shared expert with a sigmoid gate)
    qwen3_moe -> qwen3moe   (q_norm/k_norm over head_dim, normalised top-k)
    olmoe     -> olmoe      (q_norm/k_norm over all heads)
    mixtral   -> llama      (MoE llama; q/k rows permuted to llama.cpp's rotary layout)
    deepseek_v2 -> deepseek2 (MLA with or without q_lora_rank, kv_b kept whole; leading dense layers;
                             shared experts; yarn rope scaling). With --mla latent, kv_b is split per head
                             into attn_k_b (W_UK transposed) and attn_v_b (W_UV) and the attention is
                             declared one KV head of kv_lora_rank + rope / kv_lora_rank with the per-head
                             sizes as key/value_length_mla, as llama.cpp's own converter writes DeepSeek
                             GGUFs today: llama.cpp then caches the latent form and absorbs W_UK.
    deepseek_v3 -> deepseek2 (the same, with V3's sigmoid router, its selection bias as exp_probs_b and
                             group-limited selection (n_group, topk_group); the MTP layers left out)
    gpt_oss   -> gpt-oss    (MXFP4 experts repacked bit for bit into ggml's MXFP4 blocks, gate/up split from
                             their interleaved rows; biased router and experts, attention sinks and biases,
                             alternating sliding-window / full layers, YaRN)
    glm4_moe  -> glm4moe    (GLM-4.5 / 4.6 / 4.7: q/k/v biases, optional q/k norms, partial rotary on the
                             half-split (NEOX) layout, sigmoid router with a selection bias, leading dense
                             layers, shared experts; the multi-token-prediction layers are left out)
    granitemoehybrid -> granitehybrid (Granite 4.0-H: Mamba2 layers as llama.cpp's converter writes them:
                             ssm_in, ssm_conv1d [Cc, K] (+ bias), ssm_dt.bias, ssm_a = -exp(A_log) [nh, 1],
                             ssm_d [nh, 1], ssm_norm [G, Ci / G], ssm_out, F32 where llama.cpp wants it; the
                             attention layers without rotary (llama.cpp's granitehybrid never rotates when
                             Mamba layers are present), head_count_kv per layer (0 on Mamba layers); the MoE,
                             shared MLP and multipliers as granitemoe)
    granitemoe, granitemoeshared -> granitemoe (IBM Granite MoE: the four multipliers as embedding_scale,
                             residual_scale, attention.scale and logit_scale; the fused input_linear split
                             into gate (first half) and up stacks; granitemoeshared's shared_mlp the same
                             way into ffn_*_shexp; q/k rows permuted as mixtral's, llama.cpp's granite
                             graphs being llama's)
    lfm2_moe  -> lfm2moe    (Liquid AI LFM2-8B-A1B: gated short-convolution layers as shortconv.in_proj /
                             shortconv.conv [H, K] (F32, the [H, 1, K] kernel squeezed) / shortconv.out_proj,
                             GQA layers with attn_q_norm / attn_k_norm (NeoX rotary, no row permutation),
                             head_count_kv per layer (0 on conv layers), shortconv.l_cache; operator_norm as
                             attn_norm, leading dense feed_forward.w1/w3/w2 layers (leading_dense_block_count),
                             the sigmoid router (expert_gating_func 2) with expert_bias as exp_probs_b (F32);
                             embedding_norm, the final norm, as token_embd_norm; tied embeddings without an
                             output tensor, as llama.cpp's converter writes them. llama.cpp's graph always
                             normalises the top-k weights and reads no expert_weights_scale, so configs with
                             norm_topk_prob false, routed_scaling_factor != 1, no expert bias or conv biases
                             are refused)
    afmoe     -> afmoe      (Arcee AFMoE, Trinity-Nano / -Mini: sandwich norms as attn_norm / post_attention_norm /
                             ffn_norm / post_ffw_norm, q/k norms over head_dim, the output gate self_attn.gate_proj
                             as attn_gate, NeoX rotary without a row permutation, leading dense blocks, the
                             sigmoid router (mlp.router.gate, F32) with mlp.expert_bias as exp_probs_b (F32),
                             expert_weights_norm true and route_scale as expert_weights_scale, shared experts as
                             ffn_*_shexp (expert_shared_count), attention.sliding_window. llama.cpp's graph fixes
                             the layer pattern (every 4th layer full attention without rotary, the rest sliding
                             with rotary) and always scales the embeddings by sqrt(hidden_size), so configs with
                             other layer_types, mup_enabled false, route_norm false, a score_func other than
                             sigmoid, expert groups, rotary scaling or partial rotary are refused)

The weights are not re-quantised: every matrix is written with the checkpoint's BF16 bits unchanged, the
per-expert matrices stacked into llama.cpp's 3-D ffn_{gate,up,down}_exps tensors [expert, out, in].
As llama.cpp's own converter does, 1-D tensors (norms, biases, the shared-expert gate) and the router
(ffn_gate_inp) are stored as F32, an exact widening of their BF16 values. Mixtral's q/k rows are
reordered (not changed) because llama.cpp's llama architecture applies rotary embeddings to
interleaved pairs, Hugging Face's to the two halves of each head. --dtype f32 widens every BF16 matrix to F32
as well (twice the size; MXFP4 experts stay MXFP4): llama.cpp then multiplies F32 activations, so that
bench/peer_check.py --f32 can compare the forward passes to ~1e-6 instead of BF16's ~1e-2.

The tokenizer becomes tokenizer.ggml.model "gpt2" with the tokens, token types, merges and
pre-tokenizer of tokenizer.json; bos/eos/pad ids come from config.json (eos from generation_config.json
where it has one). Needs only Python 3 and NumPy (Debian: python3-numpy); safetensors are read through
numpy memory maps, so the converter needs little memory beyond the page cache.
Errors name the file and field at fault (unsupported model_type, dtype, layout or tokenizer).
"""
import argparse
import json
import sys
from pathlib import Path

try:
    import numpy as np
except ImportError as e:  # e.g. a pyenv or venv python3 ahead of Debian's on PATH
    sys.exit(f"gguf_writer.py: needs NumPy ({e}); Debian: apt-get install python3-numpy (scripts/install_deps.sh), "
             f"then run it with /usr/bin/python3 (this is {sys.executable})")

from gguf_format import (ConversionError,
                         T_INT32, T_UINT32, T_STRING, LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_BF16, TOKEN_NORMAL,
                         TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, Checkpoint, GGUFWriter, bf16_to_f32, load_json)

# tokenizer.json pre-tokenizer regex -> llama.cpp tokenizer.ggml.pre.
QWEN2_PRE_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZER_BY_REGEX = {QWEN2_PRE_REGEX: "qwen2"}

# ---------------------------------------------------------------------------------------------------
# config.json


class Config:
    """config.json with typed accessors whose errors name the file and key."""

    def __init__(self, path):
        self.path = path
        self.data = load_json(path)
        if not isinstance(self.data, dict):
            raise ConversionError(f"{path}: not a JSON object")

    def int(self, key, default=None):
        v = self.get(key, default)
        if v is None:
            raise ConversionError(f"{self.path}: '{key}' is missing")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConversionError(f"{self.path}: '{key}' must be a non-negative integer, got {v!r}")
        return v

    def float(self, key, default=None):
        v = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConversionError(f"{self.path}: '{key}' must be a number, got {v!r}")
        return float(v)

    def get(self, key, default=None):
        v = self.data.get(key)
        return default if v is None else v

    def require(self, key, expected, default, why):
        """Fails unless config[key] (default when absent or null) equals expected."""
        v = self.get(key, default)
        if v != expected:
            raise ConversionError(f"{self.path}: '{key}' is {json.dumps(v)}; llama.cpp's {why} needs "
                                  f"{json.dumps(expected)}")


# ---------------------------------------------------------------------------------------------------
# architectures

# Per-layer tensors common to the supported architectures: HF suffix -> GGUF suffix.
ATTENTION_TENSORS = [
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
]
QK_NORM_TENSORS = [("self_attn.q_norm.weight", "attn_q_norm.weight"),
                   ("self_attn.k_norm.weight", "attn_k_norm.weight")]
QKV_BIAS_TENSORS = [("self_attn.q_proj.bias", "attn_q.bias"),
                    ("self_attn.k_proj.bias", "attn_k.bias"),
                    ("self_attn.v_proj.bias", "attn_v.bias")]
GATED_EXPERTS = {"gate_proj.weight": "ffn_gate_exps.weight", "up_proj.weight": "ffn_up_exps.weight",
                 "down_proj.weight": "ffn_down_exps.weight"}
DENSE_MLP_TENSORS = [("mlp.gate_proj.weight", "ffn_gate.weight"), ("mlp.up_proj.weight", "ffn_up.weight"),
                     ("mlp.down_proj.weight", "ffn_down.weight")]


# ATTENTION_TENSORS where llama.cpp names the norm after attention post_attention_norm (gpt-oss, glm4moe), not
# ffn_norm.
POST_NORM_ATTENTION_TENSORS = [
    (hf, "post_attention_norm.weight" if gguf == "ffn_norm.weight" else gguf) for hf, gguf in ATTENTION_TENSORS]


def gpt_oss_layer_tensors(c):
    """gpt-oss's attention (biases on q/k/v/o, one sink logit per head) and its norms; its router (biased)
    and experts (MXFP4, biased, gate/up interleaved) are written by add_gpt_oss_experts."""
    return POST_NORM_ATTENTION_TENSORS + QKV_BIAS_TENSORS + [
        ("self_attn.o_proj.bias", "attn_output.bias"), ("self_attn.sinks", "attn_sinks.weight")]


def add_gpt_oss_experts(ckpt, w, hf, gg):
    """The router (weight and bias, F32) and the experts: gate_up_proj's rows interleave gate (even) and up
    (odd) rows, as do its biases; each becomes its own MXFP4 stack, biases F32 [expert, rows]."""
    add_weight(w, gg + "ffn_gate_inp.weight", ckpt.bf16(hf + "mlp.router.weight"))
    w.tensor_f32(gg + "ffn_gate_inp.bias", ckpt.bf16(hf + "mlp.router.bias"))
    blocks, scales = ckpt.u8(hf + "mlp.experts.gate_up_proj_blocks"), ckpt.u8(hf + "mlp.experts.gate_up_proj_scales")
    bias = ckpt.bf16(hf + "mlp.experts.gate_up_proj_bias")
    for name, rows in (("gate", slice(0, None, 2)), ("up", slice(1, None, 2))):
        w.tensor_mxfp4(gg + f"ffn_{name}_exps.weight", blocks[:, rows], scales[:, rows])
        w.tensor_f32(gg + f"ffn_{name}_exps.bias", np.ascontiguousarray(bias[:, rows]))
    w.tensor_mxfp4(gg + "ffn_down_exps.weight", ckpt.u8(hf + "mlp.experts.down_proj_blocks"),
                   ckpt.u8(hf + "mlp.experts.down_proj_scales"))
    w.tensor_f32(gg + "ffn_down_exps.bias", ckpt.bf16(hf + "mlp.experts.down_proj_bias"))


def glm4_moe_layer_tensors(c):
    """GLM-4.5's attention (q/k/v with biases, q/k norms over head_dim when use_qk_norm) and its norms."""
    t = list(POST_NORM_ATTENTION_TENSORS)
    if c.get("attention_bias", False):
        t += QKV_BIAS_TENSORS
    if c.get("use_qk_norm", False):
        t += QK_NORM_TENSORS
    return t


def deepseek_v2_attention(c):
    """MLA tensors, kept unabsorbed (attn_kv_b): llama.cpp then runs MLA as multi-head attention."""
    t = [("input_layernorm.weight", "attn_norm.weight")]
    if c.int("q_lora_rank", 0) == 0:
        t.append(("self_attn.q_proj.weight", "attn_q.weight"))
    else:
        t += [("self_attn.q_a_proj.weight", "attn_q_a.weight"),
              ("self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"),
              ("self_attn.q_b_proj.weight", "attn_q_b.weight")]
    return t + [("self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"),
                ("self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"),
                ("self_attn.kv_b_proj.weight", "attn_kv_b.weight"),
                ("self_attn.o_proj.weight", "attn_output.weight"),
                ("post_attention_layernorm.weight", "ffn_norm.weight")]


def granite_layer_tensors(c):
    """Granite's attention (llama's, biases on q/k/v/o when attention_bias) and its norms; the router, the
    fused experts and the shared MLP are written by add_granite_moe."""
    t = list(ATTENTION_TENSORS)
    if c.get("attention_bias", False):
        t += QKV_BIAS_TENSORS + [("self_attn.o_proj.bias", "attn_output.bias")]
    return t


def add_granite_moe(ckpt, w, hf, gg):
    """GraniteMoeMoE's router (F32) and fused experts: input_linear [E, 2I, H] whose first I rows are the
    gate and the rest the up projection (the module's chunk(2)), output_linear [E, H, I]; granitemoeshared's
    shared_mlp.input_linear [2S, H] / output_linear [H, S] likewise."""
    add_weight(w, gg + "ffn_gate_inp.weight", ckpt.bf16(hf + "block_sparse_moe.router.layer.weight"))
    gate_up = ckpt.bf16(hf + "block_sparse_moe.input_linear.weight")
    inter = gate_up.shape[1] // 2
    w.tensor_bf16(gg + "ffn_gate_exps.weight", np.ascontiguousarray(gate_up[:, :inter]))
    w.tensor_bf16(gg + "ffn_up_exps.weight", np.ascontiguousarray(gate_up[:, inter:]))
    w.tensor_bf16(gg + "ffn_down_exps.weight", ckpt.bf16(hf + "block_sparse_moe.output_linear.weight"))
    if ckpt.has(hf + "shared_mlp.input_linear.weight"):
        shared = ckpt.bf16(hf + "shared_mlp.input_linear.weight")
        s = shared.shape[0] // 2
        w.tensor_bf16(gg + "ffn_gate_shexp.weight", np.ascontiguousarray(shared[:s]))
        w.tensor_bf16(gg + "ffn_up_shexp.weight", np.ascontiguousarray(shared[s:]))
        w.tensor_bf16(gg + "ffn_down_shexp.weight", ckpt.bf16(hf + "shared_mlp.output_linear.weight"))


LFM2_ATTENTION_TENSORS = [
    ("operator_norm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.out_proj.weight", "attn_output.weight"),
    ("self_attn.q_layernorm.weight", "attn_q_norm.weight"),
    ("self_attn.k_layernorm.weight", "attn_k_norm.weight"),
    ("ffn_norm.weight", "ffn_norm.weight"),
]
LFM2_CONV_TENSORS = [
    ("operator_norm.weight", "attn_norm.weight"),
    ("conv.in_proj.weight", "shortconv.in_proj.weight"),
    ("conv.out_proj.weight", "shortconv.out_proj.weight"),
    ("ffn_norm.weight", "ffn_norm.weight"),
]
LFM2_DENSE_MLP_TENSORS = [("feed_forward.w1.weight", "ffn_gate.weight"), ("feed_forward.w3.weight", "ffn_up.weight"),
                          ("feed_forward.w2.weight", "ffn_down.weight")]


def lfm2_layer_types(c):
    """Each layer's operator, "conv" or "full_attention": layer_types, else (older configs) full_attn_idxs."""
    n = c.int("num_hidden_layers")
    types = c.get("layer_types")
    if types is None and isinstance(c.get("full_attn_idxs"), list):
        idx = c.get("full_attn_idxs")
        types = ["full_attention" if i in idx else "conv" for i in range(n)]
    if not isinstance(types, list) or len(types) != n or any(t not in ("conv", "full_attention") for t in types):
        raise ConversionError(f"{c.path}: 'layer_types' is {json.dumps(types)}; want {n} entries of \"conv\" / "
                              "\"full_attention\" (or 'full_attn_idxs')")
    return types


def add_lfm2_operator(c, ckpt, w, hf, gg, layer):
    """An LFM2 layer's operator (attention or gated short convolution) and its two norms. The depthwise conv
    kernel [H, 1, K] is written as [H, K] in F32 (ggml_ssm_conv's {K, H}), as llama.cpp's converter does."""
    if lfm2_layer_types(c)[layer] == "full_attention":
        tensors = LFM2_ATTENTION_TENSORS
    else:
        tensors = LFM2_CONV_TENSORS
        conv = ckpt.bf16(hf + "conv.conv.weight")
        if conv.ndim != 3 or conv.shape[1] != 1:
            raise ConversionError(f"{ckpt.model_dir}: tensor '{hf}conv.conv.weight' has shape {list(conv.shape)}; "
                                  "want [hidden, 1, conv_L_cache]")
        w.tensor_f32(gg + "shortconv.conv.weight", np.ascontiguousarray(conv.reshape(conv.shape[0], conv.shape[2])))
    for hf_suffix, gguf_suffix in tensors:
        add_weight(w, gg + gguf_suffix, ckpt.bf16(hf + hf_suffix))


AFMOE_LAYER_TENSORS = [
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("self_attn.gate_proj.weight", "attn_gate.weight"),            # sigmoid output gate, before o_proj
    ("post_attention_layernorm.weight", "post_attention_norm.weight"),  # after attention (sandwich)
    ("pre_mlp_layernorm.weight", "ffn_norm.weight"),
    ("post_mlp_layernorm.weight", "post_ffw_norm.weight"),
]

# llama.cpp's afmoe graph: layer il rotates unless (il + 1) % 4 == 0 (hparams.n_no_rope_layer_step, which its afmoe
# loader never reads), and with a sliding window the sliding layers are set_swa_pattern(4): il % 4 < 3.
AFMOE_LLAMA_CPP_PERIOD = 4


def afmoe_layer_types(c):
    """AfmoeConfig's layer_types, else every global_attn_every_n_layers-th layer full attention."""
    n = c.int("num_hidden_layers")
    types = c.get("layer_types")
    if types is None:
        every = c.int("global_attn_every_n_layers", 4)
        if every == 0:
            raise ConversionError(f"{c.path}: 'global_attn_every_n_layers' must be positive")
        types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n)]
    if not isinstance(types, list) or len(types) != n or any(
            t not in ("sliding_attention", "full_attention") for t in types):
        raise ConversionError(f"{c.path}: 'layer_types' is {json.dumps(types)}; want {n} entries of "
                              "\"sliding_attention\" / \"full_attention\"")
    return types


def afmoe_rope_theta(c):
    """The rotary base of the sliding layers (the only ones AFMoE rotates): rope_parameters' rope_theta (flat, or
    its sliding_attention entry when keyed by layer type), else rope_theta. Only plain rotary (rope_type default,
    the whole head) is written."""
    rope = c.get("rope_parameters", {})
    if not isinstance(rope, dict):
        raise ConversionError(f"{c.path}: 'rope_parameters' is {json.dumps(rope)}; want an object")
    entries = [rope[k] for k in ("sliding_attention", "full_attention") if isinstance(rope.get(k), dict)] or [rope]
    for e in entries:
        if e.get("rope_type", e.get("type", "default")) != "default":
            raise ConversionError(f"{c.path}: 'rope_parameters' is {json.dumps(rope)}; this converter writes only "
                                  "plain rotary (rope_type default)")
        if e.get("partial_rotary_factor", 1.0) != 1.0:
            raise ConversionError(f"{c.path}: 'rope_parameters' has partial_rotary_factor "
                                  f"{e['partial_rotary_factor']!r}; llama.cpp's afmoe rotates the whole head")
    sliding = rope.get("sliding_attention") if isinstance(rope.get("sliding_attention"), dict) else rope
    theta = sliding.get("rope_theta")
    return float(theta) if theta is not None else c.float("rope_theta", 10000.0)


def granite_hybrid_mamba_layers(c):
    """Indices of granitemoehybrid's Mamba2 layers (layer_types; all of them when it is absent)."""
    types = c.get("layer_types") or ["mamba"] * c.int("num_hidden_layers")
    return {i for i, t in enumerate(types) if t == "mamba"}


def add_granite_mamba(c, ckpt, w, hf, gg):
    """A BambaMixer layer in llama.cpp's Mamba2 layout (conversion/mamba.py Mamba2Model.modify_tensors)."""
    m = hf + "mamba."
    add_weight(w, gg + "attn_norm.weight", ckpt.bf16(hf + "input_layernorm.weight"))
    w.tensor_bf16(gg + "ssm_in.weight", ckpt.bf16(m + "in_proj.weight"))
    conv = ckpt.bf16(m + "conv1d.weight")
    w.tensor_f32(gg + "ssm_conv1d.weight", np.ascontiguousarray(conv.reshape(conv.shape[0], conv.shape[2])))
    if c.get("mamba_conv_bias", True):
        w.tensor_f32(gg + "ssm_conv1d.bias", ckpt.bf16(m + "conv1d.bias"))
    w.tensor_f32(gg + "ssm_dt.bias", ckpt.bf16(m + "dt_bias"))
    a_log = bf16_to_f32(ckpt.bf16(m + "A_log"))
    w.tensor_f32_values(gg + "ssm_a", (-np.exp(a_log)).reshape(-1, 1))
    w.tensor_f32_values(gg + "ssm_d", bf16_to_f32(ckpt.bf16(m + "D")).reshape(-1, 1))
    groups = c.int("mamba_n_groups", 1)
    norm = bf16_to_f32(ckpt.bf16(m + "norm.weight"))
    w.tensor_f32_values(gg + "ssm_norm.weight", norm.reshape(groups, -1))
    w.tensor_bf16(gg + "ssm_out.weight", ckpt.bf16(m + "out_proj.weight"))
    add_weight(w, gg + "ffn_norm.weight", ckpt.bf16(hf + "post_attention_layernorm.weight"))


class Arch:
    """How one HF model_type maps onto a llama.cpp architecture."""

    def __init__(self, gguf_arch, experts_key, layer_tensors, router, experts_prefix, experts,
                 shared_expert=None, shared_expert_gate=False, dense_layers_key=None, rotary_permute=False,
                 router_bias=None, dense_mlp=None, dense_layers_default=0):
        self.gguf_arch = gguf_arch
        self.experts_key = experts_key          # config.json key of the routed expert count
        self.layer_tensors = layer_tensors      # config -> [(HF suffix, GGUF suffix)] of every layer
        self.router = router                    # HF suffix of the router weight
        self.experts_prefix = experts_prefix    # HF suffix of expert e, "{e}" replaced
        self.experts = experts                  # {HF projection suffix: GGUF stacked tensor suffix}
        self.shared_expert = shared_expert      # HF prefix of the shared expert(s) (qwen2_moe, deepseek_v2)
        self.shared_expert_gate = shared_expert_gate  # HF "<shared_expert>_gate" sigmoid gate (qwen2_moe)
        self.dense_layers_key = dense_layers_key  # config.json key of the leading dense-MLP layer count
        self.rotary_permute = rotary_permute    # q/k rows to llama.cpp's interleaved rotary layout
        self.router_bias = router_bias          # HF suffix of the F32 selection bias (exp_probs_b), if any
        self.dense_mlp = dense_mlp or DENSE_MLP_TENSORS  # the dense layers' [(HF suffix, GGUF suffix)]
        self.dense_layers_default = dense_layers_default  # dense_layers_key's default (the HF config class's)


def deepseek_arch(router_bias=None):
    """DeepSeek-V2 / V3 on llama.cpp's deepseek2: MLA, leading dense layers, shared experts; V3 adds the
    router's selection bias."""
    return Arch("deepseek2", "n_routed_experts", deepseek_v2_attention, "mlp.gate.weight", "mlp.experts.{e}.",
                GATED_EXPERTS, shared_expert="mlp.shared_experts", dense_layers_key="first_k_dense_replace",
                router_bias=router_bias)


ARCHS = {
    "qwen2_moe": Arch("qwen2moe", "num_experts", lambda c: ATTENTION_TENSORS + QKV_BIAS_TENSORS,
                      "mlp.gate.weight", "mlp.experts.{e}.", GATED_EXPERTS,
                      shared_expert="mlp.shared_expert", shared_expert_gate=True),
    "qwen3_moe": Arch("qwen3moe", "num_experts", lambda c: ATTENTION_TENSORS + QK_NORM_TENSORS,
                      "mlp.gate.weight", "mlp.experts.{e}.", GATED_EXPERTS),
    "olmoe": Arch("olmoe", "num_experts", lambda c: ATTENTION_TENSORS + QK_NORM_TENSORS, "mlp.gate.weight",
                  "mlp.experts.{e}.", GATED_EXPERTS),
    "mixtral": Arch("llama", "num_local_experts", lambda c: ATTENTION_TENSORS, "block_sparse_moe.gate.weight",
                    "block_sparse_moe.experts.{e}.",
                    {"w1.weight": "ffn_gate_exps.weight", "w3.weight": "ffn_up_exps.weight",
                     "w2.weight": "ffn_down_exps.weight"},
                    rotary_permute=True),
    "deepseek_v2": deepseek_arch(),
    "gpt_oss": Arch("gpt-oss", "num_local_experts", gpt_oss_layer_tensors, None, None, None),
    "deepseek_v3": deepseek_arch(router_bias="mlp.gate.e_score_correction_bias"),
    "glm4_moe": Arch("glm4moe", "n_routed_experts", glm4_moe_layer_tensors, "mlp.gate.weight", "mlp.experts.{e}.",
                     GATED_EXPERTS, shared_expert="mlp.shared_experts", dense_layers_key="first_k_dense_replace",
                     router_bias="mlp.gate.e_score_correction_bias"),
    "granitemoe": Arch("granitemoe", "num_local_experts", granite_layer_tensors, None, None, None,
                       rotary_permute=True),
    "granitemoeshared": Arch("granitemoe", "num_local_experts", granite_layer_tensors, None, None, None,
                             rotary_permute=True),
    "granitemoehybrid": Arch("granitehybrid", "num_local_experts", granite_layer_tensors, None, None, None),
    # the per-layer operator tensors come from add_lfm2_operator (conv or attention by layer_types)
    "lfm2_moe": Arch("lfm2moe", "num_experts", lambda c: [], "feed_forward.gate.weight", "feed_forward.experts.{e}.",
                     {"w1.weight": "ffn_gate_exps.weight", "w3.weight": "ffn_up_exps.weight",
                      "w2.weight": "ffn_down_exps.weight"},
                     dense_layers_key="num_dense_layers", router_bias="feed_forward.expert_bias",
                     dense_mlp=LFM2_DENSE_MLP_TENSORS, dense_layers_default=2),
    "afmoe": Arch("afmoe", "num_experts", lambda c: AFMOE_LAYER_TENSORS, "mlp.router.gate.weight", "mlp.experts.{e}.",
                  GATED_EXPERTS, shared_expert="mlp.shared_experts", dense_layers_key="num_dense_layers",
                  router_bias="mlp.expert_bias", dense_layers_default=1),
}


def require_default_yarn_betas(c, scaling):
    """YaRN's beta_fast / beta_slow must be llama.cpp's defaults (32 / 1): the converter writes neither."""
    for key, default in (("beta_fast", 32), ("beta_slow", 1)):
        if scaling.get(key, default) != default:
            raise ConversionError(f"{c.path}: rope_scaling '{key}' is {scaling[key]!r}; this converter writes "
                                  f"llama.cpp's default {default}")


def check_config(model_type, c):
    """Rejects configurations that llama.cpp's graph for the architecture would compute differently."""
    if model_type not in ("deepseek_v2", "deepseek_v3", "gpt_oss"):
        c.require("rope_scaling", None, None, "converter output (no rope scaling keys written)")
    if model_type == "lfm2_moe":
        lfm2_layer_types(c)
        rope = c.get("rope_parameters", {})
        if not isinstance(rope, dict) or rope.get("rope_type", "default") != "default":
            raise ConversionError(f"{c.path}: 'rope_parameters' is {json.dumps(rope)}; this converter writes only "
                                  "plain rotary (rope_type default)")
        c.require("hidden_act", "silu", "silu", "lfm2moe graph (SiLU-gated MLPs)")
        c.require("conv_bias", False, False, "lfm2moe graph (no short-conv / projection biases)")
        c.require("norm_topk_prob", True, True, "lfm2moe graph (top-k weights always normalised)")
        c.require("use_expert_bias", True, True, "lfm2moe graph (exp_probs_b required)")
        if c.float("routed_scaling_factor", 1.0) != 1.0:
            raise ConversionError(f"{c.path}: 'routed_scaling_factor' is {c.get('routed_scaling_factor')!r}; "
                                  "llama.cpp's lfm2moe reads no expert_weights_scale (needs 1.0)")
        if c.int("conv_L_cache", 3) < 2:
            raise ConversionError(f"{c.path}: 'conv_L_cache' must be >= 2 (llama.cpp's shortconv keeps L - 1 inputs)")
        head_dim = c.int("head_dim", c.int("hidden_size") // c.int("num_attention_heads"))
        if head_dim * c.int("num_attention_heads") != c.int("hidden_size"):
            raise ConversionError(f"{c.path}: num_attention_heads * head_dim must equal hidden_size (llama.cpp's "
                                  "lfm2moe has a square out_proj)")
        if c.int("num_dense_layers", 2) > c.int("num_hidden_layers"):
            raise ConversionError(f"{c.path}: 'num_dense_layers' exceeds 'num_hidden_layers'")
    if model_type == "afmoe":
        types = afmoe_layer_types(c)
        want = ["full_attention" if (i + 1) % AFMOE_LLAMA_CPP_PERIOD == 0 else "sliding_attention"
                for i in range(len(types))]
        if types != want:
            raise ConversionError(f"{c.path}: layer_types {json.dumps(types)} (or global_attn_every_n_layers) is not "
                                  f"llama.cpp's afmoe pattern {json.dumps(want)}: its graph rotates every layer but "
                                  "each 4th and slides those same layers")
        window = c.data["sliding_window"] if "sliding_window" in c.data else 1024  # an explicit null: no window
        if "sliding_attention" in types and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ConversionError(f"{c.path}: 'sliding_window' is {json.dumps(window)}; want a positive integer")
        afmoe_rope_theta(c)
        c.require("mup_enabled", True, False, "afmoe graph (it always scales the embeddings by sqrt(hidden_size))")
        c.require("hidden_act", "silu", "silu", "afmoe graph (SiLU-gated MLPs)")
        c.require("attention_bias", False, False, "afmoe graph (no attention biases)")
        c.require("route_norm", True, True, "afmoe graph as AfmoeTokenChoiceRouter (top-k weights normalised)")
        c.require("score_func", "sigmoid", "sigmoid", "afmoe graph as AfmoeTokenChoiceRouter (sigmoid gating)")
        for key in ("n_group", "topk_group", "num_expert_groups", "num_limited_groups"):
            # AfmoeTokenChoiceRouter selects without groups; llama.cpp's MoE would group-limit at expert_group_count > 1
            c.require(key, 1, 1, "afmoe graph as AfmoeTokenChoiceRouter (no group-limited selection)")
        if c.int("num_dense_layers", 1) > c.int("num_hidden_layers"):
            raise ConversionError(f"{c.path}: 'num_dense_layers' exceeds 'num_hidden_layers'")
        if c.int("num_experts_per_tok", 6) > c.int("num_experts", 64):
            raise ConversionError(f"{c.path}: 'num_experts_per_tok' exceeds 'num_experts'")
    if model_type == "gpt_oss":
        n = c.int("num_hidden_layers")
        c.require("layer_types", ["sliding_attention", "full_attention"] * (n // 2) + ["sliding_attention"] * (n % 2),
                  None, "gpt-oss graph (sliding-window layers first, then alternating)")
        c.require("swiglu_limit", 7.0, 7.0, "gpt-oss graph (its SwiGLU clamps at 7.0)")
        scaling = c.get("rope_scaling")
        if not isinstance(scaling, dict) or scaling.get("rope_type", scaling.get("type")) != "yarn":
            raise ConversionError(f"{c.path}: 'rope_scaling' must be of rope_type yarn for gpt_oss, got {scaling!r}")
        require_default_yarn_betas(c, scaling)
    if model_type in ("qwen2_moe", "qwen3_moe"):
        c.require("decoder_sparse_step", 1, 1, f"{model_type} graph (every layer sparse)")
        c.require("mlp_only_layers", [], [], f"{model_type} graph (every layer sparse)")
        c.require("use_sliding_window", False, False, f"{model_type} graph (full attention)")
    if model_type == "qwen2_moe":
        c.require("norm_topk_prob", False, False, "qwen2moe graph (unnormalised top-k weights)")
        if c.int("shared_expert_intermediate_size", 0) == 0:
            raise ConversionError(f"{c.path}: 'shared_expert_intermediate_size' must be > 0 "
                                  "(llama.cpp's qwen2moe needs the shared expert)")
    if model_type == "qwen3_moe":
        c.require("norm_topk_prob", True, False, "qwen3moe graph (normalised top-k weights)")
        c.require("attention_bias", False, False, "qwen3moe converter (no attention biases)")
    if model_type == "olmoe":
        c.require("norm_topk_prob", False, False, "olmoe graph (unnormalised top-k weights)")
        c.require("attention_bias", False, False, "olmoe converter (no attention biases)")
        c.require("clip_qkv", None, None, "olmoe graph (no qkv clipping)")
        c.require("num_key_value_heads", c.int("num_attention_heads"), c.int("num_attention_heads"),
                  "olmoe graph (k_norm over n_embd, i.e. multi-head attention)")
    if model_type == "granitemoehybrid":
        if c.get("position_embedding_type") == "rope" and granite_hybrid_mamba_layers(c):
            raise ConversionError(f"{c.path}: position_embedding_type 'rope' with Mamba layers: llama.cpp's "
                                  "granitehybrid graph never rotates then")
        c.require("mamba_n_groups", 1, 1, "granitehybrid graph (its ssm_norm is grouped; HF's Bamba norm is not)")
        c.require("mamba_proj_bias", False, False, "granitehybrid converter (no in_proj / out_proj biases)")
    if model_type == "glm4_moe":
        c.require("n_group", 1, 1, "glm4moe graph (no group-limited routing)")
        c.require("topk_group", 1, 1, "glm4moe graph (no group-limited routing)")
        c.require("scoring_func", "sigmoid", "sigmoid", "glm4moe graph (sigmoid gating)")
        if c.int("n_shared_experts", 0) == 0:
            raise ConversionError(f"{c.path}: 'n_shared_experts' must be > 0 (this converter writes the shared "
                                  "experts llama.cpp's glm4moe adds)")
    if model_type in ("deepseek_v2", "deepseek_v3"):
        c.require("moe_layer_freq", 1, 1, "deepseek2 graph (every layer after the dense ones sparse)")
        if model_type == "deepseek_v2":
            c.require("topk_method", "greedy", "greedy", "deepseek2 converter (no group-limited routing)")
            c.require("scoring_func", "softmax", "softmax", "deepseek2 converter (softmax gating)")
        else:
            c.require("topk_method", "noaux_tc", "noaux_tc", "deepseek2 graph (V3's biased, group-limited selection)")
            c.require("scoring_func", "sigmoid", "sigmoid", "deepseek2 graph (V3's sigmoid gating)")
            if c.int("n_routed_experts") % max(1, c.int("n_group", 1)) != 0:
                raise ConversionError(f"{c.path}: 'n_routed_experts' must be a multiple of 'n_group' (llama.cpp's "
                                      "expert groups)")
        c.require("attention_bias", False, False, "deepseek2 graph (no attention biases)")
        if c.int("n_shared_experts", 0) == 0:
            raise ConversionError(f"{c.path}: 'n_shared_experts' must be > 0 (llama.cpp's deepseek2 needs them)")
        scaling = c.get("rope_scaling")
        if scaling is not None:
            if not isinstance(scaling, dict) or scaling.get("type") != "yarn":
                raise ConversionError(f"{c.path}: 'rope_scaling' must be null or of type yarn, got {scaling!r}")
            if scaling.get("mscale", 1) != scaling.get("mscale_all_dim", 0):
                raise ConversionError(f"{c.path}: rope_scaling 'mscale' must equal 'mscale_all_dim' (llama.cpp's "
                                      "deepseek2 graph scales the attention, not the rotary cos/sin)")
            require_default_yarn_betas(c, scaling)


def add_hparams(model_type, arch, c, w, mla_latent=False):
    a = arch.gguf_arch
    hidden = c.int("hidden_size")
    n_head = c.int("num_attention_heads")
    if model_type in ("deepseek_v2", "deepseek_v3"):
        key_length = c.int("qk_nope_head_dim") + c.int("qk_rope_head_dim")
        value_length, rope_dim = c.int("v_head_dim"), c.int("qk_rope_head_dim")
    elif model_type == "gpt_oss":
        key_length = value_length = rope_dim = c.int("head_dim", hidden // n_head)
    elif model_type == "glm4_moe":
        key_length = value_length = c.int("head_dim", hidden // n_head)
        rope_dim = int(key_length * c.float("partial_rotary_factor", 0.5))  # HF: the first rotary_dim dims of a head
    else:
        if model_type == "afmoe":  # AfmoeConfig's default head_dim is 128, not hidden / heads
            head_dim = c.int("head_dim", 128)
        elif model_type in ("qwen3_moe", "lfm2_moe"):
            head_dim = c.int("head_dim", hidden // n_head)
        else:
            head_dim = hidden // n_head
        key_length = value_length = rope_dim = head_dim
    w.add_u32(f"{a}.vocab_size", c.int("vocab_size"))
    w.add_u32(f"{a}.context_length", c.int("max_position_embeddings"))
    w.add_u32(f"{a}.embedding_length", hidden)
    w.add_u32(f"{a}.block_count", c.int("num_hidden_layers"))
    w.add_u32(f"{a}.feed_forward_length", c.int("intermediate_size"))
    w.add_u32(f"{a}.attention.head_count", n_head)
    if model_type == "lfm2_moe":  # as llama.cpp's converter: head_count_kv per layer (0: a conv layer); key and
        # value lengths only for an explicit head_dim, the rotary dimension never (both default to hidden / heads)
        kv = c.int("num_key_value_heads", n_head)
        w.add_array(f"{a}.attention.head_count_kv", T_UINT32,
                    [kv if t == "full_attention" else 0 for t in lfm2_layer_types(c)])
        if c.get("head_dim") is not None:
            w.add_u32(f"{a}.attention.key_length", key_length)
            w.add_u32(f"{a}.attention.value_length", value_length)
    elif mla_latent:  # one KV head of the latent form; the per-head sizes as the _mla lengths
        w.add_u32(f"{a}.attention.head_count_kv", 1)
        w.add_u32(f"{a}.attention.key_length", c.int("kv_lora_rank") + c.int("qk_rope_head_dim"))
        w.add_u32(f"{a}.attention.value_length", c.int("kv_lora_rank"))
        w.add_u32(f"{a}.attention.key_length_mla", key_length)
        w.add_u32(f"{a}.attention.value_length_mla", value_length)
    else:
        w.add_u32(f"{a}.attention.head_count_kv", c.int("num_key_value_heads", n_head))
        w.add_u32(f"{a}.attention.key_length", key_length)
        w.add_u32(f"{a}.attention.value_length", value_length)
    if model_type == "lfm2_moe":  # Lfm2MoeConfig: rope_parameters["rope_theta"] (transformers 5) or rope_theta
        w.add_f32(f"{a}.rope.freq_base", float((c.get("rope_parameters") or {}).get("rope_theta")
                                               or c.float("rope_theta", 1000000.0)))
        w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", c.float("norm_eps", 1e-5))
    elif model_type == "afmoe":  # AfmoeConfig's defaults
        w.add_u32(f"{a}.rope.dimension_count", rope_dim)
        w.add_f32(f"{a}.rope.freq_base", afmoe_rope_theta(c))
        w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", c.float("rms_norm_eps", 1e-5))
    else:
        w.add_u32(f"{a}.rope.dimension_count", rope_dim)
        w.add_f32(f"{a}.rope.freq_base", c.float("rope_theta", 10000.0))
        w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", c.float("rms_norm_eps"))
    if model_type == "afmoe":
        w.add_u32(f"{a}.expert_count", c.int(arch.experts_key, 64))
        w.add_u32(f"{a}.expert_used_count", c.int("num_experts_per_tok", 6))
    else:
        w.add_u32(f"{a}.expert_count", c.int(arch.experts_key))
        w.add_u32(f"{a}.expert_used_count", c.int("num_experts_per_tok"))
    if model_type in ("qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "glm4_moe"):
        w.add_u32(f"{a}.expert_feed_forward_length", c.int("moe_intermediate_size"))
    if model_type == "gpt_oss":
        w.add_u32(f"{a}.expert_feed_forward_length", c.int("intermediate_size"))
        w.add_u32(f"{a}.attention.sliding_window", c.int("sliding_window"))
        add_yarn(a, c.get("rope_scaling"), w)
    if model_type == "granitemoehybrid":  # Mamba2 sizes, and which layers have a KV cache
        n_layers = c.int("num_hidden_layers")
        mamba = granite_hybrid_mamba_layers(c)
        inner = c.int("mamba_expand", 2) * hidden
        w.add_u32(f"{a}.ssm.conv_kernel", c.int("mamba_d_conv", 4))
        w.add_u32(f"{a}.ssm.state_size", c.int("mamba_d_state", 256))
        w.add_u32(f"{a}.ssm.group_count", c.int("mamba_n_groups", 1))
        w.add_u32(f"{a}.ssm.inner_size", inner)
        w.add_u32(f"{a}.ssm.time_step_rank", c.int("mamba_n_heads", 128))
        kv = c.int("num_key_value_heads", n_head)
        w.kv = [e for e in w.kv if e[0] != f"{a}.attention.head_count_kv"]
        w.add_array(f"{a}.attention.head_count_kv", T_UINT32, [0 if i in mamba else kv for i in range(n_layers)])
        w.add_bool(f"{a}.rope.scaling.finetuned", False)
        w.add_u32(f"{a}.expert_shared_feed_forward_length", c.int("shared_intermediate_size", 1024))
    if model_type in ("granitemoe", "granitemoeshared", "granitemoehybrid"):  # GraniteMoe(Hybrid)Config's defaults
        w.add_u32(f"{a}.expert_feed_forward_length", c.int("intermediate_size"))
        w.add_f32(f"{a}.embedding_scale", c.float("embedding_multiplier", 1.0))
        w.add_f32(f"{a}.residual_scale", c.float("residual_multiplier", 1.0))
        w.add_f32(f"{a}.attention.scale", c.float("attention_multiplier", 1.0))
        w.add_f32(f"{a}.logit_scale", c.float("logits_scaling", 1.0))
        if model_type == "granitemoeshared" and c.int("shared_intermediate_size", 0) > 0:
            w.add_u32(f"{a}.expert_shared_feed_forward_length", c.int("shared_intermediate_size"))
    if model_type == "lfm2_moe":  # Lfm2MoeConfig's defaults
        w.add_u32(f"{a}.expert_feed_forward_length", c.int("moe_intermediate_size", 1792))
        w.add_u32(f"{a}.leading_dense_block_count", c.int("num_dense_layers", 2))
        w.add_u32(f"{a}.expert_gating_func", 2)  # sigmoid
        w.add_u32(f"{a}.shortconv.l_cache", c.int("conv_L_cache", 3))
    if model_type == "afmoe":  # as llama.cpp's converter writes them; every key (AfmoeConfig's defaults when absent)
        if c.get("n_group") is not None:
            w.add_u32(f"{a}.expert_group_count", c.int("n_group"))
        if c.get("topk_group") is not None:
            w.add_u32(f"{a}.expert_group_used_count", c.int("topk_group"))
        w.add_u32(f"{a}.expert_gating_func", 2)  # sigmoid (llama.cpp's afmoe default too)
        w.add_u32(f"{a}.expert_shared_count", c.int("num_shared_experts", 2))
        w.add_u32(f"{a}.expert_feed_forward_length", c.int("moe_intermediate_size", 1408))
        w.add_u32(f"{a}.leading_dense_block_count", c.int("num_dense_layers", 1))
        w.add_bool(f"{a}.expert_weights_norm", True)  # AfmoeTokenChoiceRouter: w / (sum + 1e-20), always
        w.add_f32(f"{a}.expert_weights_scale", c.float("route_scale", 1.0))
        w.add_u32(f"{a}.attention.sliding_window", c.int("sliding_window", 1024))
    if model_type == "glm4_moe":
        add_deepseek_style_moe(a, c, w, gating_func=2)  # sigmoid
        w.add_u32(f"{a}.nextn_predict_layers", 0)  # the MTP layers are not written
    if model_type == "qwen2_moe":
        w.add_u32(f"{a}.expert_shared_feed_forward_length", c.int("shared_expert_intermediate_size"))
    if model_type in ("deepseek_v2", "deepseek_v3"):
        add_deepseek_style_moe(a, c, w, gating_func=1 if model_type == "deepseek_v2" else 2)  # softmax / sigmoid
        if model_type == "deepseek_v3":
            w.add_u32(f"{a}.expert_group_count", c.int("n_group", 1))
            w.add_u32(f"{a}.expert_group_used_count", c.int("topk_group", 1))
        w.add_u32(f"{a}.attention.q_lora_rank", c.int("q_lora_rank", 0))  # 0: q_proj, no LoRA
        w.add_u32(f"{a}.attention.kv_lora_rank", c.int("kv_lora_rank"))
        scaling = c.get("rope_scaling")
        if scaling is not None:
            add_yarn(a, scaling, w)
            # llama.cpp's convention: 0.1 * mscale_all_dim (its deepseek2 loader undoes the 0.1).
            w.add_f32(f"{a}.rope.scaling.yarn_log_multiplier", 0.1 * scaling.get("mscale_all_dim", 0))


def add_yarn(a, scaling, w):
    """YaRN's type, factor and original context (config.json rope_scaling, checked by check_config)."""
    w.add_string(f"{a}.rope.scaling.type", "yarn")
    w.add_f32(f"{a}.rope.scaling.factor", scaling["factor"])
    w.add_u32(f"{a}.rope.scaling.original_context_length", scaling["original_max_position_embeddings"])


def add_deepseek_style_moe(a, c, w, gating_func):
    """The MoE keys DeepSeek-V2 and GLM-4.5 share: leading dense layers, shared experts, the routed weights'
    scale and normalisation, and llama.cpp's gating function id (1 softmax, 2 sigmoid)."""
    w.add_u32(f"{a}.leading_dense_block_count", c.int("first_k_dense_replace", 0))
    w.add_u32(f"{a}.expert_shared_count", c.int("n_shared_experts"))
    w.add_f32(f"{a}.expert_weights_scale", c.float("routed_scaling_factor", 1.0))
    w.add_bool(f"{a}.expert_weights_norm", c.get("norm_topk_prob", False))
    w.add_u32(f"{a}.expert_gating_func", gating_func)


def rotary_rows_interleaved(bits, n_heads):
    """Reorders each head's rows from HF's half-split rotary layout (pairs i, i + d/2) to llama.cpp's
    interleaved one (pairs 2i, 2i + 1). A row permutation: the values are unchanged."""
    rows, cols = bits.shape
    half = rows // n_heads // 2
    return bits.reshape(n_heads, 2, half, cols).swapaxes(1, 2).reshape(rows, cols)


def add_weight(w, name, bits):
    """1-D tensors and the router as exact F32 (as llama.cpp's converter stores them), the rest BF16."""
    if bits.ndim == 1 or name.endswith("ffn_gate_inp.weight"):
        w.tensor_f32(name, bits)
    else:
        w.tensor_bf16(name, bits)


def add_layer(model_type, arch, c, ckpt, w, layer, mla_latent=False):
    hf = f"model.layers.{layer}."
    gg = f"blk.{layer}."
    n_head = c.int("num_attention_heads")
    if model_type == "granitemoehybrid" and layer in granite_hybrid_mamba_layers(c):
        add_granite_mamba(c, ckpt, w, hf, gg)
        add_granite_moe(ckpt, w, hf, gg)
        return
    if model_type == "lfm2_moe":
        add_lfm2_operator(c, ckpt, w, hf, gg, layer)
    for hf_suffix, gguf_suffix in arch.layer_tensors(c):
        bits = ckpt.bf16(hf + hf_suffix)
        if mla_latent and hf_suffix == "self_attn.kv_b_proj.weight":
            # [heads * (nope + v), kv_lora] -> per head W_UK^T [heads, kv_lora, nope] and W_UV [heads, v, kv_lora]
            nope, v_dim = c.int("qk_nope_head_dim"), c.int("v_head_dim")
            per_head = bits.reshape(n_head, nope + v_dim, bits.shape[1])
            w.tensor_bf16(gg + "attn_k_b.weight", np.ascontiguousarray(per_head[:, :nope, :].swapaxes(1, 2)))
            w.tensor_bf16(gg + "attn_v_b.weight", np.ascontiguousarray(per_head[:, nope:, :]))
            continue
        if arch.rotary_permute and hf_suffix == "self_attn.q_proj.weight":
            bits = rotary_rows_interleaved(bits, n_head)
        if arch.rotary_permute and hf_suffix == "self_attn.k_proj.weight":
            bits = rotary_rows_interleaved(bits, c.int("num_key_value_heads", n_head))
        add_weight(w, gg + gguf_suffix, bits)
    if model_type == "gpt_oss":
        add_gpt_oss_experts(ckpt, w, hf, gg)
        return
    if model_type in ("granitemoe", "granitemoeshared", "granitemoehybrid"):
        add_granite_moe(ckpt, w, hf, gg)
        return
    if arch.dense_layers_key and layer < c.int(arch.dense_layers_key, arch.dense_layers_default):
        for hf_suffix, gguf_suffix in arch.dense_mlp:
            w.tensor_bf16(gg + gguf_suffix, ckpt.bf16(hf + hf_suffix))
        return
    add_weight(w, gg + "ffn_gate_inp.weight", ckpt.bf16(hf + arch.router))
    if arch.router_bias:  # the selection bias: added to the scores to pick experts, not to their weights
        w.tensor_f32_values(gg + "exp_probs_b.bias", ckpt.f32(hf + arch.router_bias))
    n_expert = c.int(arch.experts_key)
    for hf_proj, gguf_name in arch.experts.items():
        experts = [ckpt.bf16(hf + arch.experts_prefix.format(e=e) + hf_proj) for e in range(n_expert)]
        w.tensor_bf16_stack(gg + gguf_name, experts)
    if model_type == "afmoe" and c.int("num_shared_experts", 2) == 0:
        ckpt.skip(hf + arch.shared_expert + ".")  # zero-width shared MLP: adds nothing; llama.cpp has none
    elif arch.shared_expert:
        p = hf + arch.shared_expert
        w.tensor_bf16(gg + "ffn_gate_shexp.weight", ckpt.bf16(p + ".gate_proj.weight"))
        w.tensor_bf16(gg + "ffn_up_shexp.weight", ckpt.bf16(p + ".up_proj.weight"))
        w.tensor_bf16(gg + "ffn_down_shexp.weight", ckpt.bf16(p + ".down_proj.weight"))
    if arch.shared_expert_gate:
        gate = ckpt.bf16(hf + arch.shared_expert + "_gate.weight")  # [1, hidden] in HF, a vector {n_embd} in llama.cpp
        w.tensor_f32(gg + "ffn_gate_inp_shexp.weight", gate.reshape(-1))


# ---------------------------------------------------------------------------------------------------
# tokenizer


def pre_tokenizer_name(pre, path):
    """llama.cpp's tokenizer.ggml.pre for a tokenizer.json pre_tokenizer."""
    steps = pre.get("pretokenizers", []) if isinstance(pre, dict) and pre.get("type") == "Sequence" else [pre]
    regexes = [s["pattern"]["Regex"] for s in steps
               if isinstance(s, dict) and s.get("type") == "Split" and "Regex" in s.get("pattern", {})]
    if len(regexes) == 1 and regexes[0] in PRE_TOKENIZER_BY_REGEX:
        return PRE_TOKENIZER_BY_REGEX[regexes[0]]
    if not regexes and any(isinstance(s, dict) and s.get("type") == "ByteLevel" and s.get("use_regex", True)
                           for s in steps):
        return "gpt-2"
    shown = regexes[0] if regexes else json.dumps(pre)[:200]
    raise ConversionError(f"{path}: pre_tokenizer {shown!r} has no llama.cpp pre-tokenizer name in this "
                          f"converter (known: the Qwen2 split regex -> qwen2, plain ByteLevel -> gpt-2)")


def first_id(value):
    return value[0] if isinstance(value, list) and value else value


def add_tokenizer(model_dir, c, w):
    path = model_dir / "tokenizer.json"
    tok = load_json(path)
    model = tok.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE":
        raise ConversionError(f"{path}: model.type is {model.get('type') if isinstance(model, dict) else None!r}; "
                              "only byte-level BPE tokenizers are supported")
    if model.get("byte_fallback"):
        raise ConversionError(f"{path}: model.byte_fallback is true (a SentencePiece-style BPE); "
                              "only byte-level BPE tokenizers are supported")
    vocab_size = c.int("vocab_size")
    tokens = [None] * vocab_size
    types = [TOKEN_UNUSED] * vocab_size
    for text, i in model.get("vocab", {}).items():
        if not 0 <= i < vocab_size:
            raise ConversionError(f"{path}: model.vocab: token {text!r} has id {i}, outside config.json "
                                  f"vocab_size {vocab_size}")
        tokens[i], types[i] = text, TOKEN_NORMAL
    for added in tok.get("added_tokens", []):
        i = added.get("id")
        if not isinstance(i, int) or not 0 <= i < vocab_size:
            raise ConversionError(f"{path}: added_tokens: {added.get('content')!r} has id {i!r}, outside "
                                  f"config.json vocab_size {vocab_size}")
        tokens[i] = added["content"]
        types[i] = TOKEN_CONTROL if added.get("special") else TOKEN_USER_DEFINED
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"[PAD{i}]"  # ids of the embedding matrix that the tokenizer never produces
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre_tokenizer_name(tok.get("pre_tokenizer"), path))
    w.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    w.add_array("tokenizer.ggml.token_type", T_INT32, types)
    w.add_array("tokenizer.ggml.merges", T_STRING, merges)

    gen_path = model_dir / "generation_config.json"
    gen = load_json(gen_path) if gen_path.is_file() else {}
    ids = {}
    for key, gguf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                          ("pad_token_id", "padding_token_id")):
        v = first_id(gen.get(key, c.get(key)))
        if v is None:
            continue
        if not isinstance(v, int) or not 0 <= v < vocab_size:
            raise ConversionError(f"{c.path} / {gen_path}: '{key}' is {v!r}, not an id below vocab_size {vocab_size}")
        ids[key] = v
        w.add_u32(f"tokenizer.ggml.{gguf_key}", v)

    tc_path = model_dir / "tokenizer_config.json"
    tc = load_json(tc_path) if tc_path.is_file() else {}
    add_bos = tc.get("add_bos_token")
    if not isinstance(add_bos, bool):  # else: whether tokenizer.json's post-processor prepends a special token
        post = tok.get("post_processor") or {}
        single = post.get("single", []) if post.get("type") == "TemplateProcessing" else []
        add_bos = bool(single) and "SpecialToken" in single[0]
    if add_bos and "bos_token_id" not in ids:
        raise ConversionError(f"{tc_path}: the tokenizer adds a BOS token but {c.path} has no 'bos_token_id'")
    w.add_bool("tokenizer.ggml.add_bos_token", add_bos)
    w.add_bool("tokenizer.ggml.add_eos_token", tc.get("add_eos_token") is True)
    if isinstance(tc.get("chat_template"), str):
        w.add_string("tokenizer.chat_template", tc["chat_template"])


# ---------------------------------------------------------------------------------------------------


def convert(model_dir, out, name=None, mla="heads", dtype="bf16"):
    """Writes the GGUF; returns (llama.cpp architecture, tensor count, bytes written). mla: "heads" keeps
    an MLA model's kv_b whole (llama.cpp runs multi-head attention over per-head keys and values),
    "latent" splits it (llama.cpp caches the latent form); other models ignore it. dtype "f32" widens the BF16
    matrices to F32 (exactly), "bf16" keeps them."""
    model_dir = Path(model_dir)
    c = Config(model_dir / "config.json")
    model_type = c.get("model_type")
    arch = ARCHS.get(model_type)
    if arch is None:
        raise ConversionError(f"{c.path}: model_type {model_type!r} is not supported "
                              f"(supported: {', '.join(ARCHS)})")
    if dtype not in ("bf16", "f32"):
        raise ConversionError(f"--dtype {dtype!r}: expected 'bf16' or 'f32'")
    if mla not in ("heads", "latent"):
        raise ConversionError(f"--mla {mla!r}: expected 'heads' or 'latent'")
    mla_latent = mla == "latent" and model_type in ("deepseek_v2", "deepseek_v3")
    check_config(model_type, c)
    ckpt = Checkpoint(model_dir)
    w = GGUFWriter(widen_bf16=dtype == "f32")
    w.add_string("general.architecture", arch.gguf_arch)
    w.add_string("general.name", name or model_dir.name)
    w.add_u32("general.file_type", LLAMA_FTYPE_ALL_F32 if dtype == "f32" else LLAMA_FTYPE_MOSTLY_BF16)
    w.add_u32("general.quantization_version", 2)
    add_hparams(model_type, arch, c, w, mla_latent)
    add_tokenizer(model_dir, c, w)

    embed = ckpt.bf16("model.embed_tokens.weight")
    w.tensor_bf16("token_embd.weight", embed)
    for layer in range(c.int("num_hidden_layers")):
        add_layer(model_type, arch, c, ckpt, w, layer, mla_latent)
    # multi-token-prediction layers after the last one (glm4_moe, deepseek_v3): not in llama.cpp's graph
    n_layers = c.int("num_hidden_layers")
    for layer in range(n_layers, n_layers + c.int("num_nextn_predict_layers", 0)):
        ckpt.skip(f"model.layers.{layer}.")
    if model_type == "lfm2_moe":  # the final norm (embedding_norm) under llama.cpp's LFM2 name; tied: no output
        w.tensor_f32("token_embd_norm.weight", ckpt.bf16("model.embedding_norm.weight"))
        tied = c.get("tie_embedding", c.get("tie_word_embeddings", True))
        if ckpt.has("lm_head.weight"):
            w.tensor_bf16("output.weight", ckpt.bf16("lm_head.weight"))
        elif not tied:
            raise ConversionError(f"{model_dir}: no 'lm_head.weight' and {c.path} unties the embeddings")
        ckpt.check_all_used(model_type)
        return arch.gguf_arch, len(w.tensors), w.write(out)
    w.tensor_f32("output_norm.weight", ckpt.bf16("model.norm.weight"))
    if ckpt.has("lm_head.weight"):
        w.tensor_bf16("output.weight", ckpt.bf16("lm_head.weight"))
    elif c.get("tie_word_embeddings", False):
        w.tensor_bf16("output.weight", embed)
    else:
        raise ConversionError(f"{model_dir}: no 'lm_head.weight' and {c.path} does not set tie_word_embeddings")
    ckpt.check_all_used(model_type)
    return arch.gguf_arch, len(w.tensors), w.write(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("model_dir", help="Hugging Face checkpoint directory")
    parser.add_argument("--out", required=True, help="GGUF file to write (replaced atomically)")
    parser.add_argument("--name", help="general.name (default: the directory name)")
    parser.add_argument("--mla", choices=("heads", "latent"), default="heads",
                        help="deepseek_v2/v3: kv_b whole (heads, the default) or split into attn_k_b/attn_v_b "
                             "(latent: llama.cpp caches the latent form, as with its own converter's GGUFs)")
    parser.add_argument("--dtype", choices=("bf16", "f32"), default="bf16",
                        help="matrices as the checkpoint's BF16 bits (default) or widened exactly to F32 (for "
                             "bench/peer_check.py --f32)")
    args = parser.parse_args(argv)
    try:
        arch, n_tensors, n_bytes = convert(args.model_dir, args.out, args.name, args.mla, args.dtype)
    except ConversionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"I: wrote {args.out}: llama.cpp arch {arch}, {n_tensors} tensors, {n_bytes / 2**30:.2f} GiB",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
