#include "services/pipeline/runtime_options.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cmath>
#include <exception>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/checkpoint/manifest.h"
#include "common/checkpoint/model_config.h"
#include "kernels/device_memory.h"
#include "kernels/recovery.h"
#include "services/cache_manager/cache_manager.h"

namespace zipmoe::runtime {

namespace cm = cache_manager;

Result<uint64_t> ParseByteSize(const std::string& text, const std::string& flag) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    return Status::InvalidArgument(fmt::format("{} '{}': expected a size such as 512MiB", flag, text));
  }
  std::string unit = text.substr(pos);
  unit.erase(0, unit.find_first_not_of(' '));
  for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double scale = 0;
  const std::pair<const char*, double> units[] = {
      {"", 1},         {"b", 1},          {"k", 1e3},         {"kb", 1e3},        {"kib", 1024.0},
      {"m", 1e6},      {"mb", 1e6},       {"mib", 1048576.0}, {"g", 1e9},         {"gb", 1e9},
      {"gib", 1073741824.0}, {"t", 1e12}, {"tb", 1e12},       {"tib", 1099511627776.0}};
  for (const auto& [name, s] : units) {
    if (unit == name) scale = s;
  }
  if (scale == 0) {
    return Status::InvalidArgument(fmt::format("{} '{}': unknown unit '{}' (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)",
                                               flag, text, unit));
  }
  // 2^64 bytes and beyond would wrap in the conversion (undefined behaviour; it gave 0).
  if (!(value >= 0) || !std::isfinite(value) || value * scale >= 18446744073709551616.0)
    return Status::InvalidArgument(fmt::format("{} '{}': expected a size in [0, 2^64) bytes", flag, text));
  return static_cast<uint64_t>(std::floor(value * scale));
}

Result<double> ParseBudgetPercent(const std::string& text, const std::string& flag) {
  double percent = -1;
  if (!text.empty() && text.back() == '%') {
    try {
      size_t used = 0;
      percent = std::stod(text.substr(0, text.size() - 1), &used);
      if (used != text.size() - 1) percent = -1;
    } catch (const std::exception&) {
      percent = -1;
    }
  }
  if (!(percent > 0 && percent <= 1000))
    return Status::InvalidArgument(fmt::format("{} '{}': a percentage must be in (0, 1000]", flag, text));
  return percent;
}

Status ParseDeviceMemoryBudget(const std::string& text, const std::string& flag, int64_t* bytes, double* percent) {
  *bytes = -1;
  *percent = 0;
  if (text.empty() || text == "auto") return Status::Ok();
  if (text.back() == '%') {
    double v = 0;
    size_t pos = 0;
    try {
      v = std::stod(text.substr(0, text.size() - 1), &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != text.size() - 1 || !(v > 0 && v <= 100))
      return Status::InvalidArgument(fmt::format("{} '{}': expected auto, a share in (0, 100]% or a size such as 4GiB",
                                                 flag, text));
    *percent = v;
    return Status::Ok();
  }
  ZM_ASSIGN_OR_RETURN(uint64_t b, ParseByteSize(text, flag));
  *bytes = static_cast<int64_t>(std::min<uint64_t>(b, static_cast<uint64_t>(INT64_MAX)));
  return Status::Ok();
}

Result<bool> ConfigureDeviceFPool(OffloadConfig* config, const std::string& device, bool gpu_executor,
                                  const std::string& device_memory_budget, const std::string& flag) {
  int64_t bytes = -1;
  double percent = 0;
  ZM_RETURN_IF_ERROR(ParseDeviceMemoryBudget(device_memory_budget, flag, &bytes, &percent));
  if (!gpu_executor || device == "cpu" || kernels::CudaDeviceCount() <= 0) return false;
  ZM_ASSIGN_OR_RETURN(const ModelConfig model, LoadModelConfig(config->model_dir));
  if (model.is_encoder_decoder()) return false;  // its executor keeps its own device tier
  config->device_f_pool = true;
  if (percent > 0) {
    config->device_f_budget_percent = percent;
  } else if (bytes >= 0) {
    config->device_f_budget_bytes = bytes;
  } else {
    Result<kernels::DeviceProperties> p = kernels::QueryDevice();
    if (p.ok() && !p->integrated) config->device_f_budget_bytes = static_cast<int64_t>(kernels::UsableExpertBytes(*p));
  }
  return true;
}

PrefetchMode DefaultPrefetch(const std::string& policy, const std::string& model_dir) {
  if (policy == "smoe") return PrefetchMode::kTopScore;
  if (policy == "dali")
    return FileExists(JoinPath(model_dir, kPrefetchResidualsFileName)) ? PrefetchMode::kResidual
                                                                            : PrefetchMode::kTopScore;
  return PrefetchMode::kNone;
}

Result<PrefetchMode> ResolvePrefetch(const std::string& prefetch, const std::string& policy,
                                     const std::string& model_dir) {
  if (prefetch.empty()) return DefaultPrefetch(policy, model_dir);
  return ParsePrefetchMode(prefetch);
}

Result<OffloadConfig> ToOffloadConfig(const RuntimeFlags& f, const std::string& model_dir) {
  OffloadConfig c;
  c.model_dir = model_dir;
  if (!f.memory_budget.empty() && f.memory_budget.back() == '%') {
    // A share of the model's expert bytes (what every expert resident would take), resolved against
    // them by OffloadExpertProvider::Create.
    ZM_ASSIGN_OR_RETURN(c.memory_budget_percent, ParseBudgetPercent(f.memory_budget, "--memory-budget"));
  } else {
    ZM_ASSIGN_OR_RETURN(c.memory_budget_bytes, ParseByteSize(f.memory_budget, "--memory-budget"));
  }
  ZM_ASSIGN_OR_RETURN(c.policy, cm::ParseCachePolicy(f.policy));
  c.pools = f.pools;
  c.pool_ratios = f.pool_ratios;
  c.trace_path = f.plan_trace;
  c.profile_path = f.profile;
  c.tolerance = f.tolerance;
  c.n_workers = f.decompress_threads;
  c.staging_slots = f.staging_slots;
  c.page_cache = f.page_cache;
  c.scheduler = !f.fifo_dispatch;
  c.verify_recovered = !f.no_verify_recovery;
  c.no_compression = f.no_compression;
  c.fused_recovery = !f.separate_recovery;
  ZM_ASSIGN_OR_RETURN(c.prefetch, ResolvePrefetch(f.prefetch, f.policy, model_dir));
  return c;
}

}  // namespace zipmoe::runtime
