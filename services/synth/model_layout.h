// ModelLayout: the exact tensor names and shapes of a Hugging Face MoE checkpoint, derived from its
// config.json, plus how synth initialises each tensor.
//
// Names follow the transformers implementations (state_dict order: embed_tokens, then per layer
// self_attn, mlp / block_sparse_moe, input_layernorm, post_attention_layernorm; then model.norm and
// lm_head). Supported model_type: qwen2_moe, mixtral, qwen3_moe, olmoe, deepseek_v2, deepseek_v3,
// glm4_moe, glm4_moe_lite, ernie4_5_moe, gpt_oss, qwen3_next, qwen3_5_moe (its text_config; tensors under
// model.language_model.), granitemoe, granitemoeshared and switch_transformers (encoder-decoder, F32 tensors; layer_id = the global layer). Works on real
// downloaded configs too (used by the router-skew measurement). Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/checkpoint/safetensors.h"
#include "common/status.h"

namespace zipmoe::synth {

// How synth fills a tensor (see tensor_init.h).
enum class InitKind : uint8_t {
  kNormal,     // N(mean, std²) element-wise
  kEmbedding,  // N(0, std²) plus, under router skew, the shared channel a·μ̂ on every row
  kRouter,     // N(0, std²) rows, under router skew made ⊥ μ̂ and shifted by β_e·μ̂
  // Gated DeltaNet gates (qwen3_next / qwen3_5_moe), u = Φ(z) uniform in (0, 1) from the same stream:
  kLogUniform,     // A_log: log(U(uniform_lo, uniform_hi)) (transformers: A = uniform_(0, 16), A_log = log A)
  kInvSoftplusDt,  // dt_bias: dt = exp(U(log lo, log hi)), stored softplus⁻¹(dt) = dt + log(-expm1(-dt))
                   // (Mamba2's dt init), so softplus(a + dt_bias) ≈ dt for small a
};

// Standard deviations used by synth (HF initializer_range is 0.02; norms are weights ≈ 1).
constexpr float kProjectionStd = 0.02f;  // every Linear weight, embeddings, lm_head, routers
constexpr float kNormMean = 1.0f;        // RMSNorm weights: 1 + N(0, kNormStd²)
constexpr float kNormStd = 0.02f;
constexpr float kBiasStd = 0.01f;        // qwen2_moe q/k/v biases
constexpr float kRelativeBiasStd = 0.1f; // switch_transformers relative_attention_bias (scores are unscaled)
// qwen3_next / qwen3_5_moe store their RMSNorm weights zero-centred (the model multiplies by 1 + w):
// N(0, kZeroCentredNormStd²), wide enough that a loader using w, or 1, instead of 1 + w is caught.
constexpr float kZeroCentredNormStd = 0.1f;

struct TensorRecipe {
  TensorSpec spec;  // BF16, shape [out, in] for Linear weights (row-major, as torch)
  InitKind kind = InitKind::kNormal;
  float mean = 0.0f;
  float std = kProjectionStd;
  int32_t layer_id = -1;  // decoder layer, -1 for embed/norm/lm_head
  int32_t expert_id = -1; // routed expert, -1 otherwise
  // A Linear weight whose input is the RMSNorm-ed residual stream (q/k/v, q_a, kv_a, gate/up/w1/w3,
  // shared_expert_gate, lm_head): under router skew its rows are made ⊥ the skew direction.
  bool reads_residual = false;
  // FP8 (synth --dtype fp8): a weight recipe of dtype F8_E4M3 carries its block sizes; its
  // `<name>_scale_inv` recipe (F32) names the weight in fp8_source (tensor_init.h FillFp8).
  int64_t fp8_block_rows = 0;
  int64_t fp8_block_cols = 0;
  std::string fp8_source;
  // MXFP4 (gpt_oss's fused experts): a U8 `*_blocks` / `*_scales` recipe names the float weight recipe
  // it quantizes (tensor_init.h FillMxfp4) in mxfp4_source; that recipe is `source_only` (not a tensor
  // of the checkpoint: Specs() leaves it out).
  std::string mxfp4_source;
  bool mxfp4_scales = false;  // with mxfp4_source: the scales (else the blocks)
  bool source_only = false;
  // kLogUniform / kInvSoftplusDt: the uniform range.
  float uniform_lo = 0.0f;
  float uniform_hi = 0.0f;
};

// One MoE layer's router and the RMSNorm that feeds it.
struct MoeLayerInfo {
  int32_t layer_id = 0;
  std::string router_name;  // [n_experts, hidden]
  std::string norm_name;    // post_attention_layernorm.weight [hidden]
};

struct ModelLayout {
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int64_t n_experts = 0;  // routed experts per MoE layer
  int64_t top_k = 0;
  double rms_norm_eps = 1e-6;
  bool zero_centred_norms = false;  // RMSNorm weights stored as w, applied as 1 + w (qwen3_next, qwen3_5_moe)
  std::string embed_name;  // model.embed_tokens.weight [vocab, hidden]
  std::vector<TensorRecipe> tensors;
  std::vector<MoeLayerInfo> moe_layers;

  std::vector<TensorSpec> Specs() const;
  uint64_t total_bytes() const;
};

// Errors: kInvalidArgument naming the unsupported model_type or the missing / non-integer /
// non-positive config key.
Result<ModelLayout> BuildModelLayout(const nlohmann::json& config);

}  // namespace zipmoe::synth
