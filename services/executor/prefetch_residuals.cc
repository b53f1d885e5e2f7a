#include "services/executor/prefetch_residuals.h"

#include <cstring>
#include <regex>

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/checkpoint/safetensors.h"

namespace zipmoe::executor {

namespace {
std::string TensorName(int32_t layer) { return fmt::format("layers.{}.prefetch_residual", layer); }
}  // namespace

Status WritePrefetchResiduals(const std::string& path, const PrefetchResiduals& r) {
  if (r.by_layer.empty()) {
    return Status::InvalidArgument(fmt::format("{}: no residual vector to write (a model with one MoE layer?)", path));
  }
  std::vector<TensorSpec> specs;
  for (const auto& [layer, v] : r.by_layer) {
    if (static_cast<int64_t>(v.size()) != r.hidden) {
      return Status::InvalidArgument(
          fmt::format("{}: layer {}'s residual has {} values, hidden size is {}", path, layer, v.size(), r.hidden));
    }
    specs.push_back(TensorSpec{TensorName(layer), DType::kF32, {r.hidden}});
  }
  std::map<std::string, int32_t> layer_of;
  for (const auto& [layer, v] : r.by_layer) layer_of[TensorName(layer)] = layer;
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"calibration_tokens", std::to_string(r.calibration_tokens)},
                                                       {"calibration_prompts", std::to_string(r.calibration_prompts)},
                                                       {"source", r.source}};
  return WriteSafetensors(
      path, specs,
      [&](const TensorSpec& spec, uint8_t* out) {
        const std::vector<float>& v = r.by_layer.at(layer_of.at(spec.name));
        std::memcpy(out, v.data(), v.size() * sizeof(float));
        return Status::Ok();
      },
      metadata);
}

Result<PrefetchResiduals> ReadPrefetchResiduals(const std::string& path, int64_t hidden, int64_t n_layers) {
  if (!FileExists(path)) {
    return Status::NotFound(fmt::format(
        "{}: no residual vectors for --prefetch residual; calibrate them with `zipmoe profile --model DIR "
        "--prefetch-residuals PROMPTS.txt` (or use --prefetch top-score)",
        path));
  }
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  PrefetchResiduals out;
  out.hidden = hidden;
  static const std::regex kName(R"(layers\.(\d+)\.prefetch_residual)");
  for (const TensorView& t : file->tensors()) {
    std::smatch m;
    if (!std::regex_match(t.spec.name, m, kName)) {
      return Status::InvalidArgument(
          fmt::format("{}: tensor '{}' is not a residual vector (want layers.<l>.prefetch_residual)", path, t.spec.name));
    }
    // A layer number of more than 9 digits is beyond any model (std::stoll would throw past INT64_MAX).
    const int64_t layer = m[1].length() <= 9 ? std::stoll(m[1].str()) : INT64_MAX;
    if (layer >= n_layers) {
      return Status::InvalidArgument(
          fmt::format("{}: tensor '{}': layer {} beyond the model's {} layers", path, t.spec.name, layer, n_layers));
    }
    if (t.spec.dtype != DType::kF32 || t.spec.shape != std::vector<int64_t>{hidden}) {
      return Status::InvalidArgument(fmt::format("{}: tensor '{}' is {} {}, want F32 [{}] (the model's hidden size)",
                                                 path, t.spec.name, DTypeName(t.spec.dtype),
                                                 fmt::format("[{}]", fmt::join(t.spec.shape, ", ")), hidden));
    }
    std::vector<float>& v = out.by_layer[static_cast<int32_t>(layer)];
    v.resize(static_cast<size_t>(hidden));
    std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  }
  if (out.by_layer.empty()) return Status::InvalidArgument(fmt::format("{}: no residual vector in the file", path));
  const auto& meta = file->metadata();
  auto num = [&](const char* key) -> int64_t {
    auto it = meta.find(key);
    if (it == meta.end()) return 0;
    try {
      return std::stoll(it->second);
    } catch (const std::exception&) {
      return 0;
    }
  };
  out.calibration_tokens = num("calibration_tokens");
  out.calibration_prompts = num("calibration_prompts");
  if (meta.count("source") > 0) out.source = meta.at("source");
  return out;
}

}  // namespace zipmoe::executor
