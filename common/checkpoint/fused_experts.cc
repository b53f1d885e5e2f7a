#include "common/checkpoint/fused_experts.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "common/dtype.h"

namespace zipmoe {
namespace {

constexpr const char* kLayerPrefix = "model.layers.";
constexpr const char* kLanguageModelLayerPrefix = "model.language_model.layers.";  // qwen3_5_moe
constexpr const char* kExpertsInfix = ".mlp.experts.";
constexpr const char* kParts[6] = {"gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks",
                                   "down_proj_scales",    "gate_up_proj",        "down_proj"};
constexpr int kDenseGateUp = 4, kDenseDown = 5;  // the dense runtime tensors' part indices

// granitemoe / granitemoeshared (GraniteMoeParallelExperts): the dense parts under `block_sparse_moe.`.
constexpr const char* kGraniteInfix = ".block_sparse_moe.";
constexpr const char* kGraniteGateUp = "input_linear.weight";
constexpr const char* kGraniteDown = "output_linear.weight";

// The layer and part index (kParts) of a fused expert tensor name, or false.
bool ParseFused(const std::string& name, int32_t* layer, int* part) {
  std::string prefix = kLayerPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) prefix = kLanguageModelLayerPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  size_t pos = prefix.size();
  int64_t v = 0;
  const size_t digits = pos;
  while (pos < name.size() && name[pos] >= '0' && name[pos] <= '9' && v <= 1'000'000'000) v = v * 10 + (name[pos++] - '0');
  if (pos == digits || v > 1'000'000'000) return false;
  const std::string granite = kGraniteInfix;
  if (prefix == kLayerPrefix && name.compare(pos, granite.size(), granite) == 0) {
    pos += granite.size();
    for (auto [suffix, p] : {std::pair<const char*, int>{kGraniteGateUp, kDenseGateUp}, {kGraniteDown, kDenseDown}}) {
      if (name.compare(pos, std::string::npos, suffix) == 0) {
        *layer = static_cast<int32_t>(v);
        *part = p;
        return true;
      }
    }
    return false;
  }
  const std::string infix = kExpertsInfix;
  if (name.compare(pos, infix.size(), infix) != 0) return false;
  pos += infix.size();
  for (int p = 0; p < 6; ++p) {
    if (name.compare(pos, std::string::npos, kParts[p]) == 0) {
      *layer = static_cast<int32_t>(v);
      *part = p;
      return true;
    }
  }
  return false;
}

bool IsQwen35(const nlohmann::json& config) {
  return ConfigModelType(config) == "qwen3_5_moe";
}

bool IsGranite(const nlohmann::json& config) {
  const std::string t = ConfigModelType(config);
  return t == "granitemoe" || t == "granitemoeshared" || t == "granitemoehybrid";
}

// The checkpoint's name of fused part `part` of `layer`.
std::string FusedName(const Checkpoint& ckpt, int32_t layer, int part) {
  if (IsGranite(ckpt.config()))
    return fmt::format("{}{}{}{}", kLayerPrefix, layer, kGraniteInfix, part == kDenseDown ? kGraniteDown : kGraniteGateUp);
  return fmt::format("{}{}{}{}", IsQwen35(ckpt.config()) ? kLanguageModelLayerPrefix : kLayerPrefix, layer,
                     kExpertsInfix, kParts[part]);
}

// The fused blocks + scales of one projection of one layer, checked against each other.
struct FusedPair {
  TensorView blocks, scales;
  int64_t experts = 0, rows = 0, cols = 0;
};

Result<FusedPair> FindPair(const Checkpoint& ckpt, int32_t layer, bool down) {
  FusedPair p;
  ZM_ASSIGN_OR_RETURN(p.blocks, ckpt.Find(FusedName(ckpt, layer, down ? 2 : 0)));
  ZM_ASSIGN_OR_RETURN(p.scales, ckpt.Find(FusedName(ckpt, layer, down ? 3 : 1)));
  for (const TensorView* v : {&p.blocks, &p.scales})
    if (v->spec.dtype != DType::kU8)
      return Status::InvalidArgument(fmt::format("{}: fused expert tensor '{}' is {}, expected U8 (MXFP4)", v->file,
                                                 v->spec.name, DTypeName(v->spec.dtype)));
  const std::vector<int64_t>& b = p.blocks.spec.shape;
  const std::vector<int64_t>& s = p.scales.spec.shape;
  if (b.size() != 4 || b[3] != 16 || b[0] <= 0 || b[1] <= 0 || b[2] <= 0)
    return Status::InvalidArgument(fmt::format("{}: '{}' has shape {}, expected [experts, rows, cols / 32, 16]",
                                               p.blocks.file, p.blocks.spec.name, fmt::join(b, "x")));
  if (s != std::vector<int64_t>{b[0], b[1], b[2]})
    return Status::InvalidArgument(fmt::format("{}: '{}' has shape {}, expected [{}, {}, {}] (the blocks' {})",
                                               p.scales.file, p.scales.spec.name, fmt::join(s, "x"), b[0], b[1], b[2],
                                               p.blocks.spec.name));
  if (!down && b[1] % 2 != 0)
    return Status::InvalidArgument(fmt::format("{}: '{}' has {} rows; gate_up interleaves gate and up rows (even count)",
                                               p.blocks.file, p.blocks.spec.name, b[1]));
  p.experts = b[0];
  p.rows = b[1];
  p.cols = b[2] * 32;
  return p;
}

// The dense fused tensors of one layer, one float dtype: gpt_oss's runtime layout gate_up [E, H, 2I]
// (gate / up interleaved), down [E, I, H]; or qwen3_5_moe's (rows_layout) gate_up [E, 2I, H] (gate rows
// first), down [E, H, I].
struct DensePair {
  TensorView gate_up, down;
  int64_t experts = 0, hidden = 0, inter = 0;
  bool rows_layout = false;
};

Result<DensePair> FindDense(const Checkpoint& ckpt, int32_t layer) {
  DensePair p;
  ZM_ASSIGN_OR_RETURN(p.gate_up, ckpt.Find(FusedName(ckpt, layer, kDenseGateUp)));
  ZM_ASSIGN_OR_RETURN(p.down, ckpt.Find(FusedName(ckpt, layer, kDenseDown)));
  for (const TensorView* v : {&p.gate_up, &p.down}) {
    const DType d = v->spec.dtype;
    if (d != DType::kBF16 && d != DType::kF16 && d != DType::kF32)
      return Status::InvalidArgument(fmt::format("{}: fused expert tensor '{}' is {}, expected BF16, F16 or F32 (or "
                                                 "MXFP4 blocks with quant_method mxfp4)", v->file, v->spec.name,
                                                 DTypeName(d)));
    if (v->spec.shape.size() != 3)
      return Status::InvalidArgument(fmt::format("{}: fused expert tensor '{}' has shape {}, expected 3 dims", v->file,
                                                 v->spec.name, fmt::join(v->spec.shape, "x")));
  }
  const std::vector<int64_t>& g = p.gate_up.spec.shape;
  const std::vector<int64_t>& d = p.down.spec.shape;
  if (IsQwen35(ckpt.config()) || IsGranite(ckpt.config())) {  // [E, 2I, H] (gate rows first) / [E, H, I]
    if (g[1] % 2 != 0 || d != std::vector<int64_t>{g[0], g[2], g[1] / 2} || p.gate_up.spec.dtype != p.down.spec.dtype)
      return Status::InvalidArgument(fmt::format(
          "{}: layer {}: '{}' is {} [{}] and '{}' {} [{}]: expected gate_up [E, 2I, H] and down [E, H, I] of one dtype",
          ckpt.dir(), layer, p.gate_up.spec.name, DTypeName(p.gate_up.spec.dtype), fmt::join(g, ", "), p.down.spec.name,
          DTypeName(p.down.spec.dtype), fmt::join(d, ", ")));
    p.experts = g[0];
    p.hidden = g[2];
    p.inter = g[1] / 2;
    p.rows_layout = true;
    return p;
  }
  if (g[2] % 2 != 0 || d != std::vector<int64_t>{g[0], g[2] / 2, g[1]} || p.gate_up.spec.dtype != p.down.spec.dtype)
    return Status::InvalidArgument(fmt::format(
        "{}: layer {}: '{}' is {} [{}] and '{}' {} [{}]: expected gate_up [E, H, 2I] and down [E, I, H] of one dtype",
        ckpt.dir(), layer, p.gate_up.spec.name, DTypeName(p.gate_up.spec.dtype), fmt::join(g, ", "), p.down.spec.name,
        DTypeName(p.down.spec.dtype), fmt::join(d, ", ")));
  p.experts = g[0];
  p.hidden = g[1];
  p.inter = g[2] / 2;
  return p;
}

}  // namespace

bool IsFusedExpertTensor(const std::string& name) {
  int32_t layer = 0;
  int part = 0;
  return ParseFused(name, &layer, &part);
}

bool HasFusedExperts(const nlohmann::json& config) {
  return ConfigModelType(config) == "gpt_oss" || IsQwen35(config) || IsGranite(config);
}

bool HasFusedMxfp4Experts(const nlohmann::json& config) {
  if (!HasFusedExperts(config)) return false;
  auto q = config.find("quantization_config");
  return q != config.end() && q->is_object() && q->value("quant_method", std::string()) == "mxfp4";
}

std::string UnfusedExpertName(int32_t layer_id, int32_t expert_id, ExpertProj proj) {
  return fmt::format("{}{}{}{}.{}", kLayerPrefix, layer_id, kExpertsInfix, expert_id, ExpertProjName(proj));
}

Result<std::vector<FusedExpertRef>> ListFusedExperts(const Checkpoint& ckpt) {
  std::vector<FusedExpertRef> out;
  if (!HasFusedExperts(ckpt.config())) return out;
  const bool mxfp4 = HasFusedMxfp4Experts(ckpt.config());
  std::map<int32_t, int> parts;  // layer -> bit mask of kParts seen
  for (const std::string& name : ckpt.names()) {
    int32_t layer = 0;
    int part = 0;
    if (!ParseFused(name, &layer, &part) || IsNotDecodedTensor(name, ckpt.config())) continue;
    parts[layer] |= 1 << part;
  }
  if (!mxfp4) {
    for (const auto& [layer, mask] : parts) {
      for (int p : {kDenseGateUp, kDenseDown})
        if ((mask & (1 << p)) == 0)
          return Status::InvalidArgument(fmt::format("{}: layer {} has fused experts but no '{}'", ckpt.dir(), layer,
                                                     FusedName(ckpt, layer, p)));
      ZM_ASSIGN_OR_RETURN(const DensePair d, FindDense(ckpt, layer));
      for (int64_t e = 0; e < d.experts; ++e) {
        for (ExpertProj proj : {ExpertProj::kGate, ExpertProj::kUp, ExpertProj::kDown}) {
          FusedExpertRef r;
          r.id = ExpertTensorName{layer, static_cast<int32_t>(e), proj};
          r.name = UnfusedExpertName(layer, static_cast<int32_t>(e), proj);
          r.shape = proj == ExpertProj::kDown ? std::vector<int64_t>{d.hidden, d.inter}
                                              : std::vector<int64_t>{d.inter, d.hidden};
          r.dtype = d.gate_up.spec.dtype;
          out.push_back(std::move(r));
        }
      }
    }
    return out;
  }
  for (auto& [layer, mask] : parts) mask &= 0xF;  // the dense names are not MXFP4 parts
  for (const auto& [layer, mask] : parts) {
    if (mask != 0xF) {
      for (int p = 0; p < 4; ++p)
        if ((mask & (1 << p)) == 0)
          return Status::InvalidArgument(fmt::format("{}: layer {} has fused MXFP4 experts but no '{}'", ckpt.dir(),
                                                     layer, FusedName(ckpt, layer, p)));
    }
    ZM_ASSIGN_OR_RETURN(const FusedPair gate_up, FindPair(ckpt, layer, false));
    ZM_ASSIGN_OR_RETURN(const FusedPair down, FindPair(ckpt, layer, true));
    if (down.experts != gate_up.experts || down.rows != gate_up.cols || down.cols != gate_up.rows / 2)
      return Status::InvalidArgument(fmt::format(
          "{}: layer {}: down_proj_blocks is [{} experts, {} x {}], gate_up_proj_blocks [{} experts, {} x {}]: "
          "expected down [E, H, I] for gate_up [E, 2I, H]", ckpt.dir(), layer, down.experts, down.rows, down.cols,
          gate_up.experts, gate_up.rows, gate_up.cols));
    for (int64_t e = 0; e < gate_up.experts; ++e) {
      for (ExpertProj proj : {ExpertProj::kGate, ExpertProj::kUp, ExpertProj::kDown}) {
        FusedExpertRef r;
        r.id = ExpertTensorName{layer, static_cast<int32_t>(e), proj};
        r.name = UnfusedExpertName(layer, static_cast<int32_t>(e), proj);
        r.shape = proj == ExpertProj::kDown ? std::vector<int64_t>{down.rows, down.cols}
                                            : std::vector<int64_t>{gate_up.rows / 2, gate_up.cols};
        out.push_back(std::move(r));
      }
    }
  }
  return out;
}

Status ReadFusedExpert(const Checkpoint& ckpt, const FusedExpertRef& ref, uint8_t* out) {
  const bool down = ref.id.proj == ExpertProj::kDown;
  if (ref.dtype != DType::kMXFP4) {  // dense [E, H, 2I] / [E, I, H] -> [out, in]
    ZM_ASSIGN_OR_RETURN(const DensePair d, FindDense(ckpt, ref.id.layer_id));
    const int64_t rows = down ? d.hidden : d.inter, cols = down ? d.inter : d.hidden;
    if (ref.id.expert_id < 0 || ref.id.expert_id >= d.experts || ref.shape != std::vector<int64_t>{rows, cols} ||
        ref.dtype != d.gate_up.spec.dtype)
      return Status::InvalidArgument(fmt::format("{}: '{}' [{}] does not fit the fused experts of layer {}", ckpt.dir(),
                                                 ref.name, fmt::join(ref.shape, "x"), ref.id.layer_id));
    const size_t w = static_cast<size_t>(DTypeSize(ref.dtype));
    if (d.rows_layout) {  // qwen3_5_moe, granite: gate = rows [0, I) of gate_up[e], up = rows [I, 2I), down = down[e]
      const TensorView& v = down ? d.down : d.gate_up;
      const int64_t per_expert = down ? d.hidden * d.inter : 2 * d.inter * d.hidden;
      const int64_t offset = ref.id.expert_id * per_expert + (ref.id.proj == ExpertProj::kUp ? d.inter * d.hidden : 0);
      std::memcpy(out, v.data + static_cast<size_t>(offset) * w, static_cast<size_t>(rows * cols) * w);
      return Status::Ok();
    }
    // out[r, c] = gate_up[e, c, 2r (+1 for up)] or down[e, c, r]
    const TensorView& v = down ? d.down : d.gate_up;
    const int64_t src_cols = down ? d.hidden : 2 * d.inter;  // the source's last dimension
    const int64_t first = ref.id.proj == ExpertProj::kUp ? 1 : 0, step = down ? 1 : 2;
    const uint8_t* base = v.data + static_cast<size_t>(ref.id.expert_id * cols * src_cols) * w;
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t* src_row = base + static_cast<size_t>(c * src_cols) * w;
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(out + static_cast<size_t>(r * cols + c) * w, src_row + static_cast<size_t>(first + r * step) * w, w);
    }
    return Status::Ok();
  }
  ZM_ASSIGN_OR_RETURN(const FusedPair p, FindPair(ckpt, ref.id.layer_id, down));
  const int64_t rows = down ? p.rows : p.rows / 2;
  if (ref.id.expert_id < 0 || ref.id.expert_id >= p.experts || ref.shape != std::vector<int64_t>{rows, p.cols})
    return Status::InvalidArgument(fmt::format("{}: '{}' [{}] does not fit '{}' ({} experts of {} x {})", ckpt.dir(),
                                               ref.name, fmt::join(ref.shape, "x"), p.blocks.spec.name, p.experts,
                                               rows, p.cols));
  const int64_t block_row = p.cols / 2, scale_row = p.cols / 32;  // bytes per row
  const uint8_t* blocks = p.blocks.data + ref.id.expert_id * p.rows * block_row;
  const uint8_t* scales = p.scales.data + ref.id.expert_id * p.rows * scale_row;
  // gate: even rows of gate_up, up: odd rows; down: every row.
  const int64_t first = ref.id.proj == ExpertProj::kUp ? 1 : 0, step = down ? 1 : 2;
  uint8_t* out_scales = out + rows * block_row;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = first + r * step;
    std::memcpy(out + r * block_row, blocks + src * block_row, static_cast<size_t>(block_row));
    std::memcpy(out_scales + r * scale_row, scales + src * scale_row, static_cast<size_t>(scale_row));
  }
  return Status::Ok();
}

}  // namespace zipmoe
