// ModelConfig: the architecture description of a supported Mixture-of-Experts checkpoint, parsed
// from a Hugging Face config.json (and generation_config.json for stop ids). Torch-free, so the
// CLI, the runtime and the executor can all read it.
//
// Supported `model_type`s and the transformers code each field follows:
//   qwen2_moe   Qwen2MoeForCausalLM   (qkv bias, shared_expert * sigmoid(shared_expert_gate))
//   mixtral     MixtralForCausalLM    (block_sparse_moe, top-k weights always renormalised)
//   qwen3_moe   Qwen3MoeForCausalLM   (q_norm / k_norm per head over head_dim)
//   olmoe       OlmoeForCausalLM      (q_norm / k_norm over the whole projection, clip_qkv)
//   deepseek_v2 DeepseekV2ForCausalLM (modeling_deepseek.py on the Hub: MLA, yarn RoPE, MoEGate)
//   deepseek_v3 DeepseekV3ForCausalLM (transformers modeling_deepseek_v3.py: the MLA of deepseek_v2,
//               the "noaux_tc" router: sigmoid scores, e_score_correction_bias for selection only,
//               group score = sum of a group's top-2, normalise, then x routed_scaling_factor)
//   glm4_moe    Glm4MoeForCausalLM    (modeling_glm4_moe.py: GQA with q/k/v bias, optional per-head
//               q/k norm, partial rotary (rotate-half over the first head_dim * partial_rotary_factor
//               dims), the deepseek_v3 router, shared experts, first_k_dense_replace dense layers)
//   glm4_moe_lite Glm4MoeLiteForCausalLM (modular_glm4_moe_lite.py: deepseek_v3's MLA with the
//               glm4_moe router and MoE; dense/sparse per layer from mlp_layer_types)
//   ernie4_5_moe Ernie4_5_MoeForCausalLM (modeling_ernie4_5_moe.py: GQA with interleaved ("GLM") RoPE
//               on the full head, softmax router whose selection adds moe_statics.e_score_correction_bias,
//               weights / max(sum, moe_norm_min), shared experts; MoE on (layer + 1) % moe_layer_interval
//               == 0 within [moe_layer_start_index, moe_layer_end_index]; tied embeddings by default)
//   gpt_oss     GptOssForCausalLM     (modeling_gpt_oss.py: GQA with q/k/v/o biases and a learned sink
//               logit per head (`self_attn.sinks`) in every softmax row, `layer_types` alternating
//               sliding-window and full attention, YaRN RoPE over the whole head (HF's generic yarn,
//               `truncate`), a router with a bias whose top-k logits get a softmax over those k, fused
//               experts with biases and the clamped SwiGLU (up + 1) * g * sigmoid(alpha g) with
//               g <= limit, |up| <= limit; its released experts are MXFP4 (quantization_config mxfp4,
//               `*_blocks` / `*_scales`), served as shipped)
//   qwen3_next  Qwen3NextForCausalLM  (modeling_qwen3_next.py: hybrid layers, `layer_types` or every
//               full_attention_interval-th layer full attention, the others Gated DeltaNet linear
//               attention; zero-centred RMSNorm weights (x * (1 + w)); full attention with an output
//               gate (q_proj gives query and gate per head), per-head q/k norms and rotate-half RoPE over
//               head_dim * partial_rotary_factor (0.25); the qwen2_moe MoE block with a sigmoid-gated
//               shared expert; MTP tensors `mtp.*` are not read)
//   qwen3_5_moe Qwen3_5MoeForConditionalGeneration's text model (modeling_qwen3_5_moe.py: qwen3_next's
//               layers with in_proj_qkv / in_proj_z / in_proj_b / in_proj_a instead of the interleaved
//               in_proj_qkvz / in_proj_ba, every layer MoE, the top-k always renormalised, fused experts
//               `mlp.experts.gate_up_proj` [E, 2I, H] / `down_proj` [E, H, I]; the settings nest in
//               `text_config`, the weights under `model.language_model.`; the vision tower
//               `model.visual.*` is not read)
// Multi-token-prediction layers (num_nextn_predict_layers; tensors model.layers.L.* with
// L >= num_hidden_layers, or qwen3_next's `mtp.*`) are not part of the decoding forward pass: every
// loader skips them.
//   granitemoe  GraniteMoeForCausalLM (modular_granitemoe.py: Llama attention with the softmax scale
//               attention_multiplier, embeddings x embedding_multiplier, both residual branches x
//               residual_multiplier, logits / logits_scaling; JetMoe's top-k gating (softmax over the k
//               best router logits, = mixtral's renormalised top-k) and fused experts
//               block_sparse_moe.input_linear [E, 2I, H] (gate rows first) / output_linear [E, H, I])
//   granitemoeshared GraniteMoeSharedForCausalLM (granitemoe plus an ungated shared MLP of
//               shared_intermediate_size: shared_mlp.input_linear [2S, H] (gate rows first) /
//               output_linear [H, S], added to the routed experts' output)
//   granitemoehybrid GraniteMoeHybridForCausalLM (modular_granitemoehybrid.py, IBM Granite 4.0-H: `layer_types`
//               "mamba" (BambaMixer: Mamba2, in_proj -> [z | xBC | dt], a depthwise causal conv1d with bias + SiLU
//               over xBC, the SSM recurrence per head with grouped B / C, D skip, RMSNorm(y * silu(z)) over the
//               whole inner width, out_proj) or "attention" (GQA, rotary only with position_embedding_type
//               "rope", else no positional embedding); granitemoeshared's MoE + shared MLP and multipliers)
//   lfm2_moe    Lfm2MoeForCausalLM    (modeling_lfm2_moe.py, Liquid AI LFM2-8B-A1B: `layer_types` "conv" (a gated
//               short convolution: in_proj -> B | C | x, y = C * causal_depthwise_conv(B * x) over conv_L_cache taps,
//               out_proj; biases iff conv_bias) or "full_attention" (GQA with per-head q/k RMSNorm `q_layernorm` /
//               `k_layernorm`, rotate-half RoPE, `out_proj`); pre-norms `operator_norm` / `ffn_norm`, the final
//               norm `embedding_norm`; the first num_dense_layers layers a dense SwiGLU `feed_forward.w1/w3/w2`,
//               the others a MoE block: sigmoid router `feed_forward.gate` whose selection adds the float32
//               `feed_forward.expert_bias` (use_expert_bias), weights the unbiased sigmoids, w / (sum + 1e-6) when
//               norm_topk_prob, x routed_scaling_factor; per-expert `feed_forward.experts.E.w1/w3/w2`; tied
//               embeddings by default, `tie_embedding` honoured as Lfm2MoeConfig does)
//   afmoe       AfmoeForCausalLM      (modular_afmoe.py, Arcee AI Trinity-Nano 6B-A1B / Trinity-Mini 26B-A3B:
//               `layer_types` sliding_attention (window sliding_window, rotate-half RoPE) or full_attention (no
//               positional embedding at all), GQA with per-head q/k norms and an output gate o_proj(attn *
//               sigmoid(gate_proj(x))); sandwich norms: h += post_attention_layernorm(attn(input_layernorm(h))),
//               h += post_mlp_layernorm(mlp(pre_mlp_layernorm(h))); embeddings x sqrt(hidden) when mup_enabled; the
//               first num_dense_layers dense, the others a sigmoid router mlp.router.gate whose selection adds the
//               float32 mlp.expert_bias (weights / (sum + 1e-20) x route_scale) with num_shared_experts ungated
//               shared experts mlp.shared_experts of num_shared_experts x moe_intermediate_size)
//   switch_transformers SwitchTransformersForConditionalGeneration (modeling_switch_transformers.py:
//               T5-style encoder-decoder, relative position buckets, top-1 router with expert capacity)
// Defaults for keys a config.json may omit are those of the transformers config classes (e.g.
// norm_topk_prob = false for Qwen2-MoE, Qwen3-MoE and OLMoE; the real Qwen3-MoE config.json sets
// it to true). Size keys are required.
//
// switch_transformers (an encoder-decoder) is mapped onto the decoder-only fields as follows:
// hidden_size = d_model, intermediate_size = moe_intermediate_size = d_ff, num_attention_heads =
// num_key_value_heads = num_heads, head_dim = d_kv (q/k/v project to num_heads * d_kv, which need not
// equal d_model), num_experts_per_tok = 1, rms_norm_eps = layer_norm_epsilon. ONE global layer
// numbering is used by the expert provider, the manifest and the cache: encoder blocks are layers
// 0..num_layers-1 (num_encoder_layers), decoder blocks are num_layers..num_layers+num_decoder_layers-1,
// and num_hidden_layers is their sum, so every per-layer array keeps working. tie_word_embeddings
// defaults to true (PretrainedConfig's default; SwitchTransformersConfig does not override it):
// the decoder output is then scaled by d_model^-0.5 and lm_head is shared.weight.
// max_position_embeddings (no such key: positions are relative) is kSwitchMaxPositions.
//
// Plain value type; pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe {

enum class ModelArch : uint8_t {
  kQwen2Moe = 0,
  kMixtral = 1,
  kQwen3Moe = 2,
  kOlmoe = 3,
  kDeepseekV2 = 4,
  kSwitchTransformers = 5,
  kDeepseekV3 = 6,
  kGlm4Moe = 7,
  kGlm4MoeLite = 8,
  kErnie45Moe = 9,
  kGptOss = 10,
  kQwen3Next = 11,
  kQwen35Moe = 12,
  kGraniteMoe = 13,
  kGraniteMoeShared = 14,
  kGraniteMoeHybrid = 15,
  kLfm2Moe = 16,
  kAfmoe = 17,
};

// switch_transformers has no position limit of its own (relative position buckets); the encoder input
// and the decoded sequence are each capped at this many tokens (the T5 tokenizer's model_max_length is
// 512; the cap only bounds memory).
inline constexpr int64_t kSwitchMaxPositions = 4096;

// "qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "switch_transformers", "deepseek_v3",
// "glm4_moe", "glm4_moe_lite", "ernie4_5_moe", "gpt_oss", "qwen3_next", "qwen3_5_moe", "granitemoe",
// "granitemoeshared", "granitemoehybrid", "lfm2_moe", "afmoe".
const char* ModelArchName(ModelArch arch);
// Every supported model_type, comma-separated (for error messages).
const char* SupportedModelTypes();

// rope_scaling of config.json. kNone: plain RoPE. kLinear: positions divided by `factor`.
// kYarn: DeepSeek-V2's DeepseekV2YarnRotaryEmbedding (the MLA models: deepseek_v2, deepseek_v3,
// glm4_moe_lite).
struct RopeScaling {
  enum class Type : uint8_t { kNone = 0, kLinear = 1, kYarn = 2 };
  Type type = Type::kNone;
  double factor = 1.0;
  // yarn only (defaults as DeepseekV2YarnRotaryEmbedding's constructor)
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  // HF's generic yarn (modeling_rope_utils._compute_yarn_parameters; gpt_oss): whether the correction
  // range is floored/ceiled (`truncate`, default true; DeepSeek-V2's always is), and the cos/sin factor
  // when the config sets `attention_factor` (else get_mscale as above).
  bool truncate = true;
  std::optional<double> attention_factor;
};

// MoEGate topk_method: DeepSeek-V2's greedy / group_limited_greedy (group score = the group's max
// score), DeepSeek-V3's noaux_tc (selection on score + e_score_correction_bias; group score = sum of
// the group's two best).
enum class TopkMethod : uint8_t { kGreedy = 0, kGroupLimitedGreedy = 1, kNoauxTc = 2 };
// scoring_func: router probabilities = softmax(logits) over the experts, or sigmoid(logits) each.
enum class ScoringFunc : uint8_t { kSoftmax = 0, kSigmoid = 1 };

struct ModelConfig {
  ModelArch arch = ModelArch::kQwen2Moe;
  std::string model_type;
  std::string source;  // file the config came from (for messages)

  // --- sizes ---
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // = num_attention_heads for MHA and for deepseek_v2
  int64_t head_dim = 0;             // per-head q/k/v width (MLA: qk_nope + qk_rope)
  int64_t intermediate_size = 0;    // dense MLP width (mixtral, olmoe: also the expert width)
  int64_t moe_intermediate_size = 0;  // routed expert width (= intermediate_size for mixtral, olmoe)
  int64_t shared_expert_intermediate_size = 0;  // qwen2_moe, granitemoeshared; 0 = no shared expert
  int64_t max_position_embeddings = 0;

  // --- attention ---
  bool qkv_bias = false;  // q/k/v projections have a bias (qwen2_moe always; others attention_bias)
  bool o_bias = false;    // o_proj has a bias (attention_bias, not qwen2_moe)
  std::optional<double> clip_qkv;  // olmoe: clamp q, k, v to [-clip, clip]
  std::optional<int64_t> sliding_window;  // mixtral: key i visible to query j iff j - i < window
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // glm4_moe: RoPE rotates the first int(head_dim * factor) dims of each head; 1 = all (the only
  // value other models accept).
  double partial_rotary_factor = 1.0;
  // MLA: the rope part of q/k is interleaved in the checkpoint (rope_interleave, default true; the
  // DeepSeek-V2 Hub code always de-interleaves).
  bool rope_interleave = true;
  bool use_qk_norm = false;  // glm4_moe: RMSNorm per head over head_dim on q and k (q_norm / k_norm)
  // gpt_oss: layer_types, 1 = "sliding_attention" (window sliding_window), 0 = "full_attention"; and the
  // learned sink logit per query head (self_attn.sinks [num_attention_heads] float32).
  std::vector<uint8_t> sliding_layers;
  bool attention_sinks = false;

  // --- hybrid linear attention (qwen3_next, qwen3_5_moe: Gated DeltaNet, modeling_qwen3_next.py) ---
  // Per decoder layer: 1 = "linear_attention" (Gated DeltaNet), 0 = "full_attention". Empty for
  // every other model.
  std::vector<uint8_t> linear_layers;
  int64_t linear_num_key_heads = 0;    // q/k heads of the delta rule
  int64_t linear_num_value_heads = 0;  // v heads (a multiple of the key heads; value head h reads key
                                       // head h / (value heads / key heads))
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;  // the causal depthwise conv1d's width over time
  // The full attention's output gate: q_proj yields [query | gate] per head, out = o_proj(attn * sigmoid(gate)).
  bool attn_output_gate = false;
  // RMSNorm weights stored zero-centred: every norm but the DeltaNet's gated one scales by (1 + w).
  bool zero_centered_norms = false;
  // Mamba2 layers (granitemoehybrid's "mamba" entries of linear_layers; BambaMixer): n_heads heads of
  // head_dim values (d_inner = n_heads * head_dim = mamba_expand * hidden), B and C in n_groups groups of
  // d_state, a conv1d of d_conv taps over conv_dim = d_inner + 2 n_groups d_state channels.
  int64_t mamba_n_heads = 0;
  int64_t mamba_head_dim = 0;
  int64_t mamba_n_groups = 0;
  int64_t mamba_d_state = 0;
  int64_t mamba_d_conv = 0;
  bool mamba_conv_bias = true;   // conv1d.bias
  bool mamba_proj_bias = false;  // in_proj.bias / out_proj.bias
  int64_t mamba_d_inner() const { return mamba_n_heads * mamba_head_dim; }
  int64_t mamba_conv_dim() const { return mamba_d_inner() + 2 * mamba_n_groups * mamba_d_state; }
  // lfm2_moe: linear_layers are LFM2's gated short convolutions ("conv" entries of layer_types): in_proj [3H, H]
  // -> B | C | x, a depthwise causal conv1d of linear_conv_kernel_dim (conv_L_cache) taps over B * x, times C,
  // out_proj [H, H]; in_proj, the conv and out_proj have biases iff short_conv_bias (conv_bias).
  bool short_conv_bias = false;
  // No positional embedding in the attention layers (granitemoehybrid without position_embedding_type "rope").
  bool no_rope = false;
  // afmoe: rotary only on the sliding-window layers (sliding_layers); its full-attention layers have no positional
  // embedding.
  bool rope_on_sliding_only = false;
  // afmoe: the attention output gate as its own projection, attn * sigmoid(self_attn.gate_proj(x)) before o_proj;
  // and the sandwich norms (a norm on each branch's output before the residual add).
  bool attn_gate_proj = false;
  bool sandwich_norms = false;
  // Where the decoder's tensors live: "model." (model.embed_tokens, model.layers.L., model.norm), or
  // "model.language_model." (qwen3_5_moe, a multimodal checkpoint).
  std::string weight_prefix = "model.";

  // --- multi-head latent attention (deepseek_v2, deepseek_v3, glm4_moe_lite) ---
  int64_t q_lora_rank = 0;  // 0 = null (q_proj); > 0: q_a_proj -> q_a_layernorm -> q_b_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // --- MoE ---
  int64_t num_experts = 0;  // routed experts per MoE layer (0 = dense model)
  int64_t num_experts_per_tok = 0;  // top_k
  bool norm_topk_prob = false;      // mixtral: always true
  int64_t decoder_sparse_step = 1;  // qwen
  std::vector<int64_t> mlp_only_layers;  // qwen
  // DeepSeek-style MoE (deepseek_v2/v3, glm4_moe, glm4_moe_lite):
  int64_t n_shared_experts = 0;          // shared MLP width = n * moe_intermediate_size
  int64_t first_k_dense_replace = 0;     // layers below are dense MLPs
  int64_t moe_layer_freq = 1;            // deepseek_v2/v3; ernie4_5_moe moe_layer_interval
  std::vector<uint8_t> sparse_layers;    // glm4_moe_lite mlp_layer_types: 1 = "sparse" (empty = rule above)
  double routed_scaling_factor = 1.0;
  TopkMethod topk_method = TopkMethod::kGreedy;
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  int64_t n_group = 1;                   // group-limited selection: experts in n_group equal groups,
  int64_t topk_group = 1;                //   the topk_group best groups kept
  int64_t num_nextn_predict_layers = 0;  // MTP layers (DeepSeek-style after the decoder's; qwen3_next's mtp.*),
                                         // not used for decoding
  bool vision_tower = false;             // qwen3_5_moe: a vision_config (model.visual.*), not used
  // ernie4_5_moe: normalised weights are w / max(sum(w), norm_min) (moe_norm_min); 0 = the DeepSeek-V3
  // rule w / (sum(w) + 1e-20). Its MoE layer range: (layer + 1) % moe_layer_interval == 0 and
  // moe_layer_start <= layer <= moe_layer_end.
  double norm_min = 0.0;
  // noaux_tc with norm_topk_prob and no norm_min: w / (sum(w) + topk_norm_epsilon), 1e-20 as DeepSeek-V3's router,
  // 1e-6 as Lfm2MoeSparseMoeBlock's.
  double topk_norm_epsilon = 1e-20;
  // noaux_tc: whether the checkpoint has the selection bias tensor (lfm2_moe: use_expert_bias; always elsewhere).
  bool selection_bias_tensor = true;
  int64_t moe_layer_start = 0;
  int64_t moe_layer_end = 0;
  // gpt_oss: the router has a bias (mlp.router.bias [E]) added to its logits; the experts have biases
  // (gate_up_proj_bias [E, 2I] interleaved gate/up, down_proj_bias [E, H], inside the routing weight)
  // and the clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit),
  // act = (u + 1) * g * sigmoid(alpha * g) (swiglu_limit > 0; else silu(gate) * up).
  bool router_logit_bias = false;
  bool expert_bias = false;
  double swiglu_limit = 0.0;
  double swiglu_alpha = 1.702;
  // gpt_oss MXFP4 checkpoints (quantization_config quant_method "mxfp4"): the routed experts are FP4
  // E2M1 values in 32-value blocks with an E8M0 scale each (common/dtype.h DType::kMXFP4).
  bool mxfp4_experts = false;

  // --- encoder-decoder (switch_transformers; 0 / unused for decoder-only models) ---
  int64_t num_encoder_layers = 0;   // num_layers: global layers [0, num_encoder_layers)
  int64_t num_decoder_layers = 0;   // global layers [num_encoder_layers, num_hidden_layers)
  int64_t encoder_sparse_step = 0;  // (decoder_sparse_step above holds the decoder's)
  int64_t expert_capacity = 0;      // tokens per expert and sequence per forward call (Top1Router)
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  int32_t decoder_start_token_id = 0;  // first decoder input (T5: = pad_token_id)
  int32_t pad_token_id = 0;

  // --- FP8 checkpoints (quantization_config quant_method "fp8"; 0 = not quantized) ---
  // Linear weights may be F8_E4M3 with `<name>_scale_inv` float32 [ceil(out/rows), ceil(in/cols)]:
  // W = e4m3(q) * scale_inv per block (kernels/bf16_gemm.h GemmWeights::f8).
  int64_t fp8_block_rows = 0;
  int64_t fp8_block_cols = 0;
  bool fp8() const { return fp8_block_rows > 0; }

  // --- Granite's scalar multipliers (granitemoe, granitemoeshared; 1 / unset for every other model) ---
  double embedding_multiplier = 1.0;  // h0 = embed_tokens[id] * embedding_multiplier
  double residual_multiplier = 1.0;   // h = h + branch * residual_multiplier (attention and MLP branches)
  double logits_scaling = 1.0;        // logits = lm_head(h) / logits_scaling
  std::optional<double> attention_multiplier;  // the attention softmax scale, replacing q_head_dim^-0.5

  // --- embeddings / generation ---
  bool tie_word_embeddings = false;
  std::vector<int32_t> eos_token_ids;  // union of config.json and generation_config.json, in order
  std::optional<int32_t> bos_token_id;

  bool is_encoder_decoder() const { return arch == ModelArch::kSwitchTransformers; }
  // Multi-head latent attention (deepseek_v2, deepseek_v3, glm4_moe_lite).
  bool mla() const;
  // MoE blocks with `mlp.shared_experts` of n_shared_experts * moe_intermediate_size (deepseek_v2,
  // deepseek_v3, glm4_moe, glm4_moe_lite, ernie4_5_moe).
  bool deepseek_moe() const;
  // The router has an e_score_correction_bias [num_experts] float32 for selection (topk_method noaux_tc;
  // ernie4_5_moe's moe_statics too).
  // lfm2_moe: feed_forward.expert_bias when use_expert_bias.
  bool has_selection_bias() const { return topk_method == TopkMethod::kNoauxTc && selection_bias_tensor; }

  // True iff decoder layer `layer_id` has a sparse MoE block (else a dense MLP):
  //   qwen2_moe/qwen3_moe: layer not in mlp_only_layers, num_experts > 0, (layer+1) % step == 0;
  //   mixtral/olmoe: always; deepseek_v2/v3: num_experts > 0, layer >= first_k_dense_replace and
  //   layer % moe_layer_freq == 0; glm4_moe: layer >= first_k_dense_replace; glm4_moe_lite:
  //   mlp_layer_types[layer] == "sparse" (without it layer >= first_k_dense_replace); ernie4_5_moe:
  //   (layer + 1) % moe_layer_freq == 0 and moe_layer_start <= layer <= moe_layer_end; lfm2_moe, afmoe: layer >=
  //   num_dense_layers (first_k_dense_replace);
  //   switch_transformers (global layer numbering above; SwitchTransformersStack.__init__): block i of
  //   a stack with sparse step s is sparse iff s > 0 and (i % s == 1 or s == 1).
  bool IsMoeLayer(int64_t layer_id) const;
  // Width of the rotary part of q/k: qk_rope_head_dim (MLA) or head_dim, times
  // partial_rotary_factor (int(), as Glm4MoeRotaryEmbedding); even.
  int64_t rope_dim() const;
  // Per-head q/k width: qk_nope + qk_rope (MLA) or head_dim.
  int64_t q_head_dim() const;
  // Per-head v width: v_head_dim (MLA) or head_dim.
  int64_t v_dim() const;
  // Attention softmax scale: attention_multiplier where set (granitemoe), else q_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2 for
  // the MLA models when rope_scaling sets mscale_all_dim (DeepseekV2Attention.__init__).
  double softmax_scale() const;
  // The attention window of decoder layer `layer_id` (0 = full causal attention): mixtral's
  // sliding_window on every layer, gpt_oss's and afmoe's on their sliding_attention layers.
  int64_t attention_window(int64_t layer_id) const;
  // Whether decoder layer `layer_id` is a Gated DeltaNet (linear attention) layer.
  bool IsLinearAttentionLayer(int64_t layer_id) const;
  // qwen3_next / qwen3_5_moe.
  bool hybrid_linear_attention() const { return arch == ModelArch::kQwen3Next || arch == ModelArch::kQwen35Moe; }
  // What the checkpoint ships that decoding does not use, for a note printed once at load: e.g. "1
  // multi-token-prediction layer and the vision tower"; empty when nothing.
  std::string UnusedParts() const;
  // Whether `token_id` is one of eos_token_ids.
  bool IsEos(int32_t token_id) const;
  // granitemoe / granitemoeshared (their multipliers above, fused `block_sparse_moe` experts).
  bool granite() const {
    return arch == ModelArch::kGraniteMoe || arch == ModelArch::kGraniteMoeShared || arch == ModelArch::kGraniteMoeHybrid;
  }
  // granitemoehybrid: its linear_layers are Mamba2 layers (not Gated DeltaNet).
  bool mamba() const { return arch == ModelArch::kGraniteMoeHybrid; }
  // lfm2_moe: its linear_layers are gated short convolutions.
  bool short_conv() const { return arch == ModelArch::kLfm2Moe; }
  // Whether decoder layer `layer_id`'s attention rotates q and k (false under no_rope, and on afmoe's full-attention
  // layers).
  bool LayerHasRope(int64_t layer_id) const;
};

// Parses a config.json object. `source_path` names the file in messages. gpt_oss: keys it omits take
// GptOssConfig's defaults (hidden 2880, 24 layers as released are read from the file; YaRN factor 32,
// beta 32/1, truncate false, original 4096, theta 150000 when no rope settings are given);
// attention_bias false, a quantization other than mxfp4, and a layer_types entry other than
// sliding_attention / full_attention are refused by name.
// qwen3_next / qwen3_5_moe: keys the file omits take Qwen3NextConfig's / Qwen3_5MoeTextConfig's
// defaults; qwen3_5_moe's settings are read from `text_config` (model_type qwen3_5_moe_text), a
// tie_word_embeddings there that contradicts the top level is refused; attn_output_gate false, a
// rope type other than default, use_sliding_window true, a layer_types entry other than
// linear_attention / full_attention, and for qwen3_5_moe decoder_sparse_step != 1, mlp_only_layers or
// norm_topk_prob false are refused by name.
// granitemoe / granitemoeshared / granitemoehybrid: keys the file omits take GraniteMoe(Hybrid)Config's
// defaults (num_local_experts 8, num_experts_per_tok 2, the multipliers 1, tie_word_embeddings false; hybrid:
// shared_intermediate_size 1024, every layer "mamba", mamba_n_heads 128, n_groups 1, d_state 256, d_head
// "auto", d_conv 4, expand 2, conv bias on, proj bias off); a multiplier that is not finite and > 0 is refused
// by name; granitemoehybrid without experts (a dense Granite 4.0-H), a layer_types entry other than mamba /
// attention, a position_embedding_type other than rope / nope / null and Mamba sizes that do not fit are
// refused naming the key.
// lfm2_moe: keys the file omits take Lfm2MoeConfig's defaults (vocab 65536, hidden 2048, intermediate 7168,
// moe_intermediate 1792, 32 layers, 32 heads / 8 KV heads, norm_eps 1e-5, conv_L_cache 3, conv_bias false,
// num_dense_layers 2, 32 experts top-4, use_expert_bias / norm_topk_prob true, routed_scaling_factor 1, rope_theta
// 1e6, max_position_embeddings 128000, tied embeddings; `tie_embedding` overrides tie_word_embeddings);
// layer_types (or the older `full_attn_idxs`) is required, an entry other than conv / full_attention is refused.
// afmoe: keys the file omits take AfmoeConfig's defaults (vocab 200192, hidden 2048, intermediate 6144,
// moe_intermediate 1408, 32 layers, 1 dense, 16 heads (KV heads = heads when null), head_dim 128, eps 1e-5,
// max_position_embeddings 16384, rope_theta 10000, 64 experts top-6, 2 shared, route_scale 1, sliding_window 1024,
// every global_attn_every_n_layers-th (4) layer full attention unless layer_types says, mup off, untied); the keys the
// released Trinity configs add are honoured where they agree with transformers' code and refused by name where they
// would not (route_norm false, score_func other than sigmoid, n_group / topk_group other than 1).
// Errors: kInvalidArgument for an unsupported model_type (naming it and SupportedModelTypes()),
// a missing or mistyped key (naming key and file), inconsistent sizes (heads not dividing, ...),
// hidden_act other than silu, an unsupported rope_scaling type or topk_method / scoring_func (named),
// a quantization_config other than block-scaled FP8 e4m3 with dynamic activations (naming the key),
// rope_interleave false on a non-MLA model, mlp_layer_types of the wrong length or with an unknown entry;
// switch_transformers: a dense_act_fn / feed_forward_proj other than "relu" (gated variants too),
// router_dtype other than "float32", router_bias true, expert_capacity < 0.
Result<ModelConfig> ParseModelConfig(const nlohmann::json& config, const std::string& source_path);

// Reads DIR/config.json (required) and DIR/generation_config.json (optional; its eos_token_id ids
// are merged into eos_token_ids). Errors: kNotFound (no config.json), kCorruption (invalid JSON,
// naming the file), plus ParseModelConfig's.
Result<ModelConfig> LoadModelConfig(const std::string& dir);

}  // namespace zipmoe
