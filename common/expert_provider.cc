#include "common/expert_provider.h"

#include <fmt/format.h>

namespace zipmoe {

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
