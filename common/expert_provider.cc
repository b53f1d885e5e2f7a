#include "common/expert_provider.h"

#include <fmt/format.h>

namespace zipmoe {

LayerRouting LayerRouting::AllSelected() const {
  if (device_resident.empty()) return *this;
  LayerRouting all = *this;
  all.expert_ids.clear();
  all.tokens_per_expert.clear();
  all.device_resident.clear();
  all.device_resident_tokens.clear();
  size_t i = 0, j = 0;
  const auto tokens = [](const std::vector<int32_t>& v, size_t k) { return k < v.size() ? v[k] : 0; };
  while (i < expert_ids.size() || j < device_resident.size()) {
    if (j == device_resident.size() || (i < expert_ids.size() && expert_ids[i] < device_resident[j])) {
      all.expert_ids.push_back(expert_ids[i]);
      all.tokens_per_expert.push_back(tokens(tokens_per_expert, i++));
    } else {
      all.expert_ids.push_back(device_resident[j]);
      all.tokens_per_expert.push_back(tokens(device_resident_tokens, j++));
    }
  }
  return all;
}

const char* PrefetchModeName(PrefetchMode mode) {
  switch (mode) {
    case PrefetchMode::kNone: return "none";
    case PrefetchMode::kTopScore: return "top-score";
    case PrefetchMode::kResidual: return "residual";
  }
  return "?";
}

Result<PrefetchMode> ParsePrefetchMode(const std::string& text) {
  for (PrefetchMode m : {PrefetchMode::kNone, PrefetchMode::kTopScore, PrefetchMode::kResidual}) {
    if (text == PrefetchModeName(m)) return m;
  }
  return Status::InvalidArgument(
      fmt::format("prefetch '{}': unknown (want none, top-score or residual)", text));
}

}  // namespace zipmoe
