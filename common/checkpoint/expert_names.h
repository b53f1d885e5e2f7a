// Recognises routed-expert weight tensors by their Hugging Face names, for every supported arch:
//   model.layers.{L}.mlp.experts.{E}.{gate_proj|up_proj|down_proj}.weight   (Qwen2/3-MoE, OLMoE, DeepSeek-V2)
//   model.layers.{L}.block_sparse_moe.experts.{E}.{w1|w3|w2}.weight          (Mixtral: w1=gate, w3=up, w2=down)
//   model.layers.{L}.feed_forward.experts.{E}.{w1|w3|w2}.weight              (LFM2-MoE, the same naming)
//   encoder.block.{i}.layer.1.mlp.experts.expert_{E}.{wi|wo}.weight          (Switch Transformers: wi=up,
//   decoder.block.{i}.layer.2.mlp.experts.expert_{E}.{wi|wo}.weight           wo=down, no gate)
// Switch blocks map onto ONE global layer numbering (model_config.h): encoder block i is layer i,
// decoder block i is layer num_encoder_layers + i.
// Shared experts (`shared_expert.`, `shared_experts.`) and dense MLPs are not routed experts.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/checkpoint/manifest.h"

namespace zipmoe {

struct ExpertTensorName {
  int32_t layer_id = 0;  // global layer id
  int32_t expert_id = 0;
  ExpertProj proj = ExpertProj::kGate;
};

// Parses `name`; std::nullopt if it is not a routed-expert weight. `num_encoder_layers`: the
// encoder blocks preceding the decoder's in the layer numbering (EncoderLayerCount; 0 for
// decoder-only models).
std::optional<ExpertTensorName> ParseExpertTensorName(const std::string& name, int64_t num_encoder_layers);

// config.json's model_type, or "" when `config` is not an object or its model_type is absent or not a
// string (ParseModelConfig reports those, naming the key; the helpers here must not throw on them).
std::string ConfigModelType(const nlohmann::json& config);

// The number of encoder blocks of a config.json object: its integer `num_layers` for model_type
// "switch_transformers" (0 if absent or mistyped: ParseModelConfig reports that), else 0.
int64_t EncoderLayerCount(const nlohmann::json& config);

// Whether `name` is a tensor decoding never reads: a multi-token-prediction layer, "model.layers.{L}."
// with L >= the config's integer num_hidden_layers (DeepSeek-V3 / GLM-4.5 ship num_nextn_predict_layers
// such layers after the decoder's), or "mtp.*" (qwen3_next, qwen3_5_moe); and qwen3_5_moe's vision
// tower "model.visual.*". Loaders and `compress` skip them (their experts included). Never true for
// switch_transformers.
bool IsNotDecodedTensor(const std::string& name, const nlohmann::json& config);

}  // namespace zipmoe
