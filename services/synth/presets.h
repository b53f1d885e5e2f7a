// Preset table of synthetic MoE model sizes and the Hugging Face config.json each one produces.
//
// Every preset keeps the real model's non-size keys (rope_theta, eps, router coefficients, ...) and
// changes only widths/depths/counts; docs/synth.md reproduces this table. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe::synth {

// One row of the preset table. Sizes are element counts; 0 means "not used by this architecture".
struct PresetRow {
  const char* arch;    // qwen2_moe | mixtral | qwen3_moe | olmoe | deepseek_v2 | deepseek_v3 | glm4_moe | glm4_moe_lite | ernie4_5_moe | gpt_oss | qwen3_next | qwen3_5_moe | granitemoe | granitemoeshared | granitemoehybrid | lfm2_moe | afmoe
  const char* preset;  // tiny | mini
  int64_t hidden_size;
  int64_t num_hidden_layers;
  int64_t num_attention_heads;
  int64_t num_key_value_heads;
  int64_t head_dim;              // qwen3_moe, glm4_moe (explicit key); others derive hidden / heads
  int64_t intermediate_size;     // dense MLP width (mixtral, olmoe, gpt_oss, granite: the expert width)
  int64_t moe_intermediate_size; // expert width (qwen2_moe, qwen3_moe, the DeepSeek-style MoEs)
  int64_t shared_intermediate;   // qwen2_moe shared_expert_intermediate_size, granitemoeshared shared_intermediate_size
  int64_t num_experts;
  int64_t top_k;
  int64_t vocab_size;
  // MLA (deepseek_v2/v3, glm4_moe_lite) and DeepSeek-style shared experts / dense first layers
  int64_t kv_lora_rank;
  int64_t qk_nope_head_dim;
  int64_t qk_rope_head_dim;
  int64_t v_head_dim;
  int64_t n_shared_experts;
  int64_t first_k_dense_replace;  // (lfm2_moe: num_dense_layers)
  const char* note;  // what differs from "real model, width halved"
  // Trailing keys of the newer DeepSeek-style configs (0 / 1 when unused):
  int64_t q_lora_rank = 0;      // MLA low-rank query (glm4_moe_lite); 0 = null
  int64_t n_group = 1;          // noaux_tc groups
  int64_t topk_group = 1;
  int64_t mtp_layers = 0;       // num_nextn_predict_layers: MTP layers written after the decoder's
  bool use_qk_norm = false;     // glm4_moe
  // Gated DeltaNet of the hybrid models (qwen3_next, qwen3_5_moe; every 4th layer full attention):
  int64_t linear_key_heads = 0;    // linear_num_key_heads
  int64_t linear_value_heads = 0;  // linear_num_value_heads
  int64_t linear_head_dim = 0;     // linear_key_head_dim = linear_value_head_dim
};

const std::vector<PresetRow>& PresetTable();
const std::vector<std::string>& ArchNames();    // in table order
const std::vector<std::string>& PresetNames();  // tiny, mini

// config.json of (arch, preset); arch "switch_transformers" (not in the table: an encoder-decoder
// with its own keys) has presets tiny and mini too (docs/synth.md). q_lora_rank > 0 sets an MLA
// model's q_lora_rank (deepseek_v2/v3, glm4_moe_lite: q_a_proj / q_a_layernorm / q_b_proj); 0 keeps the preset's.
// Errors: kInvalidArgument naming the unknown arch/preset, or q_lora_rank on another arch / < 0.
Result<nlohmann::json> BuildPresetConfig(const std::string& arch, const std::string& preset,
                                         int64_t q_lora_rank);

}  // namespace zipmoe::synth
