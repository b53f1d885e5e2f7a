#include "services/cache_manager/plan_builder.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "common/file_util.h"
#include "services/cache_manager/plan_profile.h"
#include "services/cache_manager/plan_trace.h"

namespace zipmoe::cache_manager {

Result<PlanBuild> BuildPlan(const Manifest& manifest, const PlanRequest& request) {
  PlanBuild b;
  ZM_ASSIGN_OR_RETURN(b.model, ModelPlanInputsFromManifest(manifest, request.model_dir));
  if (request.batch_size < 1) {
    return Status::InvalidArgument(fmt::format("plan: batch size {} must be >= 1", request.batch_size));
  }
  const int32_t n_workers = std::max(1, request.n_workers);

  // Costs: the profile when there is one, else the documented defaults.
  const std::string default_profile = JoinPath(request.model_dir, kProfileFileName);
  const std::string profile_path = !request.profile_path.empty() ? request.profile_path : default_profile;
  if (!request.profile_path.empty() || FileExists(default_profile)) {
    ZM_ASSIGN_OR_RETURN(StorageProfile profile, ReadStorageProfile(profile_path));
    b.cost = CostModelFromProfile(profile, b.model, n_workers);
    b.cost_source = profile_path;
    b.io_mode = profile.io_mode;
  } else {
    b.cost = DefaultCostModel(b.model, n_workers);
    b.cost_source = "defaults";
  }
  if (request.expert_compute_us >= 0) b.cost.expert_compute_us = request.expert_compute_us;
  if (request.recovery_us >= 0) b.cost.recovery_us = request.recovery_us;

  // Workload: rank frequencies of the trace at this batch size, or uniform.
  b.active_k = b.model.top_k;
  b.mean_active_experts = b.model.top_k;
  if (!request.trace_path.empty()) {
    ZM_ASSIGN_OR_RETURN(auto records, ReadTrace(request.trace_path));
    ZM_ASSIGN_OR_RETURN(auto by_batch, ComputeRankFrequencies(records, b.model.n_experts, b.model.top_k));
    auto it = by_batch.find(request.batch_size);
    if (it == by_batch.end()) {
      std::string have;
      for (const auto& [bs, rf] : by_batch) have += fmt::format("{}{} ({} records)", have.empty() ? "" : ", ", bs, rf.n_records);
      return Status::InvalidArgument(fmt::format("{}: no records with batch size {} (trace has: {})",
                                                 request.trace_path, request.batch_size, have));
    }
    b.rank_freq = it->second.rank_freq;
    b.active_k = it->second.active_k;
    b.trace_records = it->second.n_records;
    b.mean_active_experts = it->second.mean_active_experts;
    b.workload = "trace";
  } else {
    // Distinct experts per step when each of B tokens picks k of N uniformly: N (1 - (1 - k/N)^B).
    const double n = b.model.n_experts;
    b.mean_active_experts = n * (1.0 - std::pow(1.0 - b.model.top_k / n, request.batch_size));
    b.active_k = static_cast<int32_t>(std::clamp<double>(std::round(b.mean_active_experts), 1, n));
    b.rank_freq = UniformRankFrequencies(b.model.n_experts, b.active_k);
    b.workload = "uniform";
  }

  b.budget_bytes_per_layer = request.budget_bytes / static_cast<uint64_t>(std::max(b.model.n_moe_layers, 1));
  b.costs = request.slot_costs ? b.model.slot_costs : b.model.pool_costs;
  PlanOptions options;
  options.grid_step = request.grid_step;
  options.pools = request.pools;
  // Pool F on the device with a budget of its own: its capacity is fixed, the host pools planned around it.
  const bool f_apart = request.device_f_budget_bytes >= 0 && request.pools[kPoolF];
  if (f_apart) {
    const uint64_t per_layer =
        static_cast<uint64_t>(request.device_f_budget_bytes) / static_cast<uint64_t>(std::max(b.model.n_moe_layers, 1));
    const double f_bytes = b.costs.bytes_per_expert[kPoolF];
    options.fixed_f_capacity = f_bytes > 0 ? static_cast<int32_t>(std::min<double>(
                                                 std::floor(static_cast<double>(per_layer) / f_bytes), b.model.n_experts))
                                           : 0;
  }
  PlanOptions f_only = options;
  f_only.fixed_f_capacity = -1;
  f_only.pools = {true, false, false, false};
  if (b.budget_bytes_per_layer > 0) {
    ZM_ASSIGN_OR_RETURN(b.f_only, PlanPools(b.rank_freq, b.active_k, b.budget_bytes_per_layer, b.costs, b.cost, f_only));
  }

  if (request.ratios.has_value()) {
    const auto& r = *request.ratios;
    double sum = 0;
    for (int p = 0; p < kPoolCount; ++p) {
      if (r[p] < 0 || !std::isfinite(r[p]) || (r[p] > 0 && !request.pools[p])) {
        return Status::InvalidArgument(fmt::format("plan: pool ratio {}={} is negative or outside Λ = {}",
                                                   kPoolLetters[p], r[p], PoolSetString(request.pools)));
      }
      sum += r[p];
    }
    if (std::fabs(sum - 1.0) > 1e-6) {
      return Status::InvalidArgument(fmt::format("plan: pool ratios sum to {}, expected 1", sum));
    }
    if (f_apart && r[kPoolF] != 0) {
      return Status::InvalidArgument(fmt::format(
          "plan: pool ratio F={} while pool F has a device budget of its own; give the host pools' ratios", r[kPoolF]));
    }
    b.plan.ratios = r;
    b.plan.capacities =
        CapacitiesForRatios(r, b.budget_bytes_per_layer, b.costs, b.model.n_experts, options.fixed_f_capacity);
    int32_t cached = 0;
    for (int p = 0; p < kPoolCount; ++p) {
      b.plan.bytes[p] = static_cast<uint64_t>(b.plan.capacities[p] * b.costs.bytes_per_expert[p]);
      cached += b.plan.capacities[p];
    }
    b.plan.miss_capacity = b.model.n_experts - cached;
  } else if (b.budget_bytes_per_layer > 0 || f_apart) {
    ZM_ASSIGN_OR_RETURN(b.plan, PlanPools(b.rank_freq, b.active_k, b.budget_bytes_per_layer, b.costs, b.cost, options));
  } else {
    b.plan.miss_capacity = b.model.n_experts;  // nothing to plan: every request is a miss
  }
  return b;
}

CachePlan ToCachePlan(const PlanBuild& build, const ModelLayout& layout) {
  CachePlan plan;
  plan.capacity.assign(layout.n_layers(), std::array<int32_t, kPoolCount>{});
  for (int32_t l = 0; l < layout.n_layers(); ++l) {
    if (!layout.LayerHasExperts(l)) continue;
    int32_t experts = 0;
    for (int32_t e = 0; e < layout.n_experts(); ++e) experts += layout.Find(l, e) != nullptr;
    int32_t left = experts;  // a layer with fewer experts than the plan's N keeps the hierarchy order
    for (int p = 0; p < kPoolCount; ++p) {
      plan.capacity[l][p] = std::min(build.plan.capacities[p], left);
      left -= plan.capacity[l][p];
    }
  }
  return plan;
}

Result<std::array<double, kPoolCount>> ParsePoolRatios(const std::string& text) {
  std::array<double, kPoolCount> ratios{};
  std::array<bool, kPoolCount> seen{};
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    int pool = -1;
    if (eq == 1) {
      const char letter = static_cast<char>(std::toupper(static_cast<unsigned char>(item[0])));
      for (int p = 0; p < kPoolCount; ++p) pool = kPoolLetters[p] == letter ? p : pool;
    }
    double value = -1;
    if (pool >= 0) {
      try {
        size_t used = 0;
        value = std::stod(item.substr(2), &used);
        if (used != item.size() - 2) value = -1;
      } catch (const std::exception&) {
        value = -1;
      }
    }
    if (pool < 0 || !(value >= 0) || seen[pool]) {
      return Status::InvalidArgument(fmt::format(
          "pool ratios '{}': item '{}' is not LETTER=VALUE with a new letter of FCSE and a value >= 0", text, item));
    }
    seen[pool] = true;
    ratios[pool] = value;
    pos = end + 1;
  }
  return ratios;
}

}  // namespace zipmoe::cache_manager
