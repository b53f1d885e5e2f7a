#include "services/cache_manager/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

namespace zipmoe::cache_manager {
namespace {

constexpr double kSumTolerance = 1e-6;  // relative to top_k
constexpr double kOrderTolerance = 1e-12;

Status ValidatePlanInputs(const std::vector<double>& rank_freq, int top_k, uint64_t budget_bytes_per_layer,
                          const PoolCosts& costs, const CostModel& cost, const PlanOptions& options) {
  const int64_t n = static_cast<int64_t>(rank_freq.size());
  if (n == 0) return Status::InvalidArgument("rank_freq is empty: need one entry per expert rank");
  if (top_k < 1 || top_k > n) {
    return Status::InvalidArgument(fmt::format("top_k = {}: must be in [1, n_experts = {}]", top_k, n));
  }
  if (budget_bytes_per_layer == 0 && options.fixed_f_capacity < 0) {
    return Status::InvalidArgument("budget_bytes_per_layer = 0: must be > 0");
  }
  double sum = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (!(rank_freq[r] >= 0 && rank_freq[r] <= 1)) {
      return Status::InvalidArgument(fmt::format("rank_freq[{}] = {}: must be in [0, 1]", r, rank_freq[r]));
    }
    if (r > 0 && rank_freq[r] > rank_freq[r - 1] + kOrderTolerance) {
      return Status::InvalidArgument(fmt::format("rank_freq[{}] = {} > rank_freq[{}] = {}: must be non-increasing",
                                                 r, rank_freq[r], r - 1, rank_freq[r - 1]));
    }
    sum += rank_freq[r];
  }
  if (std::fabs(sum - top_k) > kSumTolerance * top_k) {
    return Status::InvalidArgument(fmt::format("rank_freq sums to {:.9g}: must equal top_k = {}", sum, top_k));
  }
  const double units = 1.0 / options.grid_step;
  if (!(options.grid_step > 0 && options.grid_step <= 1) || std::fabs(units - std::round(units)) > 1e-6) {
    return Status::InvalidArgument(
        fmt::format("options.grid_step = {}: must be in (0, 1] with 1/grid_step an integer", options.grid_step));
  }
  bool any = false;
  for (int p = 0; p < kPoolCount; ++p) {
    if (!options.pools[p]) continue;
    any = true;
    const double bytes = costs.bytes_per_expert[p];
    if (!(std::isfinite(bytes) && bytes > 0)) {
      return Status::InvalidArgument(
          fmt::format("costs.bytes_per_expert[{}] = {}: must be > 0 for an enabled pool", kPoolLetters[p], bytes));
    }
  }
  if (!any) return Status::InvalidArgument("options.pools is empty: enable at least one of F, C, S, E");
  if (options.fixed_f_capacity >= 0 && !options.pools[kPoolF]) {
    return Status::InvalidArgument(fmt::format("options.fixed_f_capacity = {} without pool F in options.pools ({})",
                                               options.fixed_f_capacity, PoolSetString(options.pools)));
  }
  return ValidateCostModel(cost);
}

}  // namespace

Result<PoolSet> ParsePoolSet(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("pool set is empty: use letters from FCSE, e.g. \"FCSE\" or \"FS\"");
  PoolSet pools = {false, false, false, false};
  for (char ch : text) {
    const char up = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const char* at = std::find(kPoolLetters, kPoolLetters + kPoolCount, up);
    if (at == kPoolLetters + kPoolCount) {
      return Status::InvalidArgument(fmt::format("pool set \"{}\": unknown pool '{}' (expected F, C, S or E)", text, ch));
    }
    const int p = static_cast<int>(at - kPoolLetters);
    if (pools[p]) return Status::InvalidArgument(fmt::format("pool set \"{}\": pool '{}' repeated", text, up));
    pools[p] = true;
  }
  return pools;
}

std::string PoolSetString(const PoolSet& pools) {
  std::string s;
  for (int p = 0; p < kPoolCount; ++p) {
    if (pools[p]) s += kPoolLetters[p];
  }
  return s;
}

MakespanExpectation ExpectedMakespan(const HitModel& model, const CostModel& cost) {
  MakespanExpectation out;
  const int32_t k = model.top_k();
  const auto& cap = model.capacities();
  std::array<int32_t, kPoolCount> limit;
  for (int p = 0; p < kPoolCount; ++p) limit[p] = std::min(cap[p], k);
  if (!(model.all_exactly_k() > 0)) return out;
  // Products of pool probabilities are scaled by 1/Φ_N(k) up front; a prefix below kPruneMass is
  // skipped: every pattern below it has P(h) <= prefix (the remaining Φ factors sum to <= 1 and
  // Φ_M <= 1), so all skipped prefixes together hold < (k+1)^3 · kPruneMass of probability.
  constexpr double kPruneMass = 1e-16;
  const double scale = 1.0 / model.all_exactly_k();
  std::array<int32_t, kPoolCount> h{};
  // Alg. 4 lines 16-29, with the k_rem < 0 break hoisted into each loop bound.
  for (h[kPoolF] = 0; h[kPoolF] <= limit[kPoolF]; ++h[kPoolF]) {
    const double pf = scale * model.PoolHits(kPoolF, h[kPoolF]);
    if (pf < kPruneMass) continue;
    for (h[kPoolC] = 0; h[kPoolC] <= std::min(limit[kPoolC], k - h[kPoolF]); ++h[kPoolC]) {
      const double pc = pf * model.PoolHits(kPoolC, h[kPoolC]);
      if (pc < kPruneMass) continue;
      const int32_t used_fc = h[kPoolF] + h[kPoolC];
      for (h[kPoolS] = 0; h[kPoolS] <= std::min(limit[kPoolS], k - used_fc); ++h[kPoolS]) {
        const double ps = pc * model.PoolHits(kPoolS, h[kPoolS]);
        if (ps < kPruneMass) continue;
        const int32_t used_fcs = used_fc + h[kPoolS];
        for (h[kPoolE] = 0; h[kPoolE] <= std::min(limit[kPoolE], k - used_fcs); ++h[kPoolE]) {
          const int32_t k_rem = k - used_fcs - h[kPoolE];  // line 21
          const double prob = ps * model.PoolHits(kPoolE, h[kPoolE]) * model.MissHits(k_rem);
          if (prob == 0) continue;
          out.makespan_us += prob * EstimateMakespanUs(k, h, cost);  // lines 20, 25
          for (int p = 0; p < kPoolCount; ++p) out.expected_hits[p] += prob * h[p];
          out.expected_miss += prob * k_rem;
          out.probability_mass += prob;
        }
      }
    }
  }
  return out;
}

std::array<int32_t, kPoolCount> CapacitiesForRatios(const std::array<double, kPoolCount>& ratios,
                                                   uint64_t budget_bytes_per_layer, const PoolCosts& costs,
                                                   int32_t n_experts, int32_t fixed_f_capacity) {
  std::array<int32_t, kPoolCount> cap{};
  int64_t remaining = n_experts;
  if (fixed_f_capacity >= 0) {  // F from a budget of its own: the top ranks
    cap[kPoolF] = std::min(fixed_f_capacity, n_experts);
    remaining -= cap[kPoolF];
  }
  for (int p = 0; p < kPoolCount; ++p) {
    if (p == kPoolF && fixed_f_capacity >= 0) continue;
    if (!(ratios[p] > 0) || !(costs.bytes_per_expert[p] > 0)) continue;
    // Whole bytes for the pool first, so Σ S_p · bytes_p never exceeds the budget.
    const long double pool_bytes = std::floor(static_cast<long double>(ratios[p]) * budget_bytes_per_layer);
    const int64_t experts = static_cast<int64_t>(std::floor(pool_bytes / costs.bytes_per_expert[p]));
    cap[p] = static_cast<int32_t>(std::min(experts, remaining));
    remaining -= cap[p];
  }
  return cap;
}

Result<PoolPlan> PlanPools(const std::vector<double>& rank_freq, int top_k, uint64_t budget_bytes_per_layer,
                           const PoolCosts& costs, const CostModel& cost, const PlanOptions& options) {
  ZM_RETURN_IF_ERROR(ValidatePlanInputs(rank_freq, top_k, budget_bytes_per_layer, costs, cost, options));
  const int32_t n = static_cast<int32_t>(rank_freq.size());
  ZM_ASSIGN_OR_RETURN(std::vector<double> f, NormalizeInclusion(rank_freq, top_k));
  ZM_ASSIGN_OR_RETURN(SelectionFit fit, FitSelectionProbabilities(f, top_k, options.ipf));  // Alg. 4 line 4

  PoolPlan best;
  best.selection_prob = fit.q;
  best.ipf_iterations = fit.iterations;
  best.all_miss_makespan_us = EstimateMakespanUs(top_k, {0, 0, 0, 0}, cost);
  double min_cost = std::numeric_limits<double>::infinity();  // line 3

  // F from a budget of its own (options.fixed_f_capacity): the top ranks; the grid covers the others.
  const bool f_fixed = options.fixed_f_capacity >= 0;
  std::vector<int> enabled;
  for (int p = 0; p < kPoolCount; ++p) {
    if (options.pools[p] && !(f_fixed && p == kPoolF)) enabled.push_back(p);
  }
  if (f_fixed && budget_bytes_per_layer == 0) enabled.clear();  // no host bytes: F alone
  const int total_units = static_cast<int>(std::lround(1.0 / options.grid_step));
  std::array<int, kPoolCount> units{};
  const auto evaluate = [&](const std::array<double, kPoolCount>& ratios) {
    const auto cap = CapacitiesForRatios(ratios, budget_bytes_per_layer, costs, n, options.fixed_f_capacity);  // line 6
    const HitModel model(fit.q, top_k, cap);                       // lines 8-13
    const MakespanExpectation e = ExpectedMakespan(model, cost);  // lines 15-29
    ++best.grid_points;
    if (e.makespan_us < min_cost) {  // lines 30-33
      min_cost = e.makespan_us;
      best.ratios = ratios;
      best.capacities = cap;
      best.expected_hits = e.expected_hits;
      best.expected_miss = e.expected_miss;
    }
  };
  // Line 5: every γ with Σ_{p∈Λ} γ_p = 1 on the δ grid, γ_F descending first.
  std::function<void(size_t, int)> enumerate = [&](size_t i, int left) {
    if (i + 1 == enabled.size()) {
      units[enabled[i]] = left;
      std::array<double, kPoolCount> ratios{};
      for (int p = 0; p < kPoolCount; ++p) ratios[p] = static_cast<double>(units[p]) / total_units;
      evaluate(ratios);
      return;
    }
    for (int u = left; u >= 0; --u) {
      units[enabled[i]] = u;
      enumerate(i + 1, left - u);
    }
  };
  if (enabled.empty()) {
    evaluate({});  // F on its own budget only
  } else {
    enumerate(0, total_units);
  }

  best.expected_makespan_us = min_cost;
  int32_t used = 0;
  for (int p = 0; p < kPoolCount; ++p) {
    best.bytes[p] = static_cast<uint64_t>(std::llround(best.capacities[p] * costs.bytes_per_expert[p]));
    used += best.capacities[p];
  }
  best.miss_capacity = n - used;
  return best;
}

}  // namespace zipmoe::cache_manager
