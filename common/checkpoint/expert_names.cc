#include "common/checkpoint/expert_names.h"

#include <cstdlib>

namespace zipmoe {
namespace {

// Reads a non-negative decimal at s[pos..] up to '.', advancing pos past the dot.
bool ReadIndex(const std::string& s, size_t* pos, int32_t* out) {
  size_t p = *pos;
  if (p >= s.size() || s[p] < '0' || s[p] > '9') return false;
  int64_t v = 0;
  while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
    v = v * 10 + (s[p] - '0');
    if (v > 1'000'000'000) return false;
    ++p;
  }
  if (p >= s.size() || s[p] != '.') return false;
  *out = static_cast<int32_t>(v);
  *pos = p + 1;
  return true;
}

bool Consume(const std::string& s, size_t* pos, const std::string& prefix) {
  if (s.compare(*pos, prefix.size(), prefix) != 0) return false;
  *pos += prefix.size();
  return true;
}

// {encoder|decoder}.block.{i}.layer.{1|2}.mlp.experts.expert_{E}.{wi|wo}.weight (name ends in .weight).
std::optional<ExpertTensorName> ParseSwitchName(const std::string& name, int64_t num_encoder_layers) {
  size_t pos = 0;
  bool decoder = false;
  if (Consume(name, &pos, "decoder.block.")) {
    decoder = true;
  } else if (!Consume(name, &pos, "encoder.block.")) {
    return std::nullopt;
  }
  ExpertTensorName out;
  int32_t block = 0;
  if (!ReadIndex(name, &pos, &block)) return std::nullopt;
  if (!Consume(name, &pos, decoder ? "layer.2.mlp.experts.expert_" : "layer.1.mlp.experts.expert_"))
    return std::nullopt;
  if (!ReadIndex(name, &pos, &out.expert_id)) return std::nullopt;
  const std::string proj = name.substr(pos);
  if (proj == "wi.weight") {
    out.proj = ExpertProj::kUp;
  } else if (proj == "wo.weight") {
    out.proj = ExpertProj::kDown;
  } else {
    return std::nullopt;
  }
  out.layer_id = static_cast<int32_t>(decoder ? num_encoder_layers + block : block);
  return out;
}

}  // namespace

std::string ConfigModelType(const nlohmann::json& config) {
  if (!config.is_object()) return std::string();
  const auto it = config.find("model_type");
  return it != config.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t EncoderLayerCount(const nlohmann::json& config) {
  if (ConfigModelType(config) != "switch_transformers") return 0;
  auto it = config.find("num_layers");
  if (it == config.end() || !it->is_number_integer()) return 0;
  return it->get<int64_t>();
}

std::optional<ExpertTensorName> ParseExpertTensorName(const std::string& name, int64_t num_encoder_layers) {
  static const std::string kLayers = "layers.";
  static const std::string kWeight = ".weight";
  if (name.size() < kWeight.size() || name.compare(name.size() - kWeight.size(), kWeight.size(), kWeight) != 0)
    return std::nullopt;
  if (auto s = ParseSwitchName(name, num_encoder_layers)) return s;
  const size_t lp = name.find(kLayers);
  if (lp == std::string::npos || (lp > 0 && name[lp - 1] != '.')) return std::nullopt;
  ExpertTensorName out;
  size_t pos = lp + kLayers.size();
  if (!ReadIndex(name, &pos, &out.layer_id)) return std::nullopt;
  std::string block;
  for (const char* b : {"mlp.experts.", "block_sparse_moe.experts.", "feed_forward.experts."}) {
    const std::string prefix(b);
    if (name.compare(pos, prefix.size(), prefix) == 0) {
      block = prefix;
      break;
    }
  }
  if (block.empty()) return std::nullopt;
  pos += block.size();
  if (!ReadIndex(name, &pos, &out.expert_id)) return std::nullopt;
  const std::string proj = name.substr(pos, name.size() - kWeight.size() - pos);
  if (proj == "gate_proj" || proj == "w1") {
    out.proj = ExpertProj::kGate;
  } else if (proj == "up_proj" || proj == "w3") {
    out.proj = ExpertProj::kUp;
  } else if (proj == "down_proj" || proj == "w2") {
    out.proj = ExpertProj::kDown;
  } else {
    return std::nullopt;
  }
  return out;
}

bool IsNotDecodedTensor(const std::string& name, const nlohmann::json& config) {
  static const std::string kPrefix = "model.layers.";
  if (!config.is_object()) return false;
  const std::string type = ConfigModelType(config);
  if (type == "switch_transformers") return false;
  if (name.compare(0, 4, "mtp.") == 0) return true;
  if (type == "qwen3_5_moe" && name.compare(0, 13, "model.visual.") == 0) return true;
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  auto it = config.find("num_hidden_layers");
  if (it == config.end() || !it->is_number_integer()) return false;
  size_t pos = kPrefix.size();
  int32_t layer = 0;
  if (!ReadIndex(name, &pos, &layer)) return false;
  return layer >= it->get<int64_t>();
}

}  // namespace zipmoe
