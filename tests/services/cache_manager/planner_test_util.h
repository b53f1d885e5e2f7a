// Helpers of the cache planner tests (planner_test.cc, planner_probability_test.cc,
// planner_trace_test.cc, planner_cli_test.cc): brute-force enumeration of k-subsets, random feasible
// rank frequencies, a fixed cost model and activation records.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "services/cache_manager/plan_cost.h"
#include "services/cache_manager/plan_probability.h"
#include "services/cache_manager/plan_trace.h"
#include "services/cache_manager/planner.h"

namespace zipmoe::cache_manager::test {

using Hits = std::array<int32_t, kPoolCount>;

// Exactly-k conditional-Bernoulli distribution over subsets (bitmasks), by enumeration.
inline std::map<uint32_t, double> BruteForceSubsets(const std::vector<double>& q, int k) {
  std::map<uint32_t, double> p;
  double z = 0;
  const int n = static_cast<int>(q.size());
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != k) continue;
    double w = 1;
    for (int i = 0; i < n; ++i) w *= (mask >> i & 1) ? q[i] : 1 - q[i];
    p[mask] = w;
    z += w;
  }
  for (auto& [mask, w] : p) w /= z;
  return p;
}

inline std::vector<double> BruteForceInclusion(const std::vector<double>& q, int k) {
  std::vector<double> f(q.size(), 0.0);
  for (const auto& [mask, w] : BruteForceSubsets(q, k)) {
    for (size_t i = 0; i < q.size(); ++i) f[i] += (mask >> i & 1) ? w : 0;
  }
  return f;
}

// Random feasible inclusion probabilities: sorted random weights normalised to Σ = k (capped at 1).
inline std::vector<double> RandomRankFreq(std::mt19937_64& rng, int n, int k, double skew) {
  std::uniform_real_distribution<double> u(0.05, 1.0);
  std::vector<double> w(n);
  for (double& x : w) x = std::pow(u(rng), skew);
  std::sort(w.rbegin(), w.rend());
  return NormalizeInclusion(w, k).value();
}

inline CostModel TestCost() {
  CostModel c;
  c.sm_read_us = 100;
  c.e_read_us = 10;
  c.decompress_us = 20;
  c.n_shards = 2;
  c.n_workers = 2;
  c.tensors_per_expert = 3;
  return c;
}

inline ActivationRecord Rec(int64_t step, int32_t layer, std::vector<int32_t> experts, std::string session = "") {
  ActivationRecord r;
  r.step = step;
  r.layer_id = layer;
  r.expert_ids = std::move(experts);
  r.tokens_per_expert.assign(r.expert_ids.size(), 1);
  r.session = std::move(session);
  return r;
}

}  // namespace zipmoe::cache_manager::test
