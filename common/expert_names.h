// Recognises routed-expert weight tensors by their Hugging Face names, for every supported arch:
//   model.layers.{L}.mlp.experts.{E}.{gate_proj|up_proj|down_proj}.weight   (Qwen2/3-MoE, OLMoE, DeepSeek-V2)
//   model.layers.{L}.block_sparse_moe.experts.{E}.{w1|w3|w2}.weight          (Mixtral: w1=gate, w3=up, w2=down)
// Shared experts (`shared_expert.`, `shared_experts.`) and dense MLPs are not routed experts.
// Pure; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "common/manifest.h"

namespace zipmoe {

struct ExpertTensorName {
  int32_t layer_id = 0;
  int32_t expert_id = 0;
  ExpertProj proj = ExpertProj::kGate;
};

// Parses `name`; std::nullopt if it is not a routed-expert weight.
std::optional<ExpertTensorName> ParseExpertTensorName(const std::string& name);

}  // namespace zipmoe
