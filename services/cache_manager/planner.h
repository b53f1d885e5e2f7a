// Hierarchical cache pool planning (ZipMoE §3.4 "Hierarchical Cache Planning", Appendix C Alg. 4).
//
// Given the rank-based inclusion probabilities f_r of one MoE layer, a per-layer memory budget and
// the per-expert byte cost of each pool, PlanPools grid-searches the byte ratios γ_p of the enabled
// pools Λ ⊆ {F, C, S, E} (Σ γ_p = 1, step δ) and returns the ratios that minimise the expected
// makespan: Σ_h Delay(h) · P(h | Σ h = k) over all hit patterns h (Alg. 3 for Delay, Alg. 2 and the
// joint probability of §3.4 for P). docs/planner.md spells out every choice the paper leaves open.
//
// Pure functions on value types; callable from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/cache_manager/plan_cost.h"
#include "services/cache_manager/plan_probability.h"

namespace zipmoe::cache_manager {

// Which pools the planner may use (Λ), indexed by kPoolF..kPoolE.
using PoolSet = std::array<bool, kPoolCount>;
inline constexpr PoolSet kAllPools = {true, true, true, true};

// Parses a pool-set string such as "FCSE", "F", "FS" (letters in any order, case-insensitive).
// Errors: kInvalidArgument for an empty string, an unknown letter or a repeated one.
Result<PoolSet> ParsePoolSet(const std::string& text);
// "FCSE" order, enabled pools only.
std::string PoolSetString(const PoolSet& pools);

struct PlanOptions {
  double grid_step = 0.05;  // δ: ratio step; 1/δ must be an integer (within 1e-6)
  PoolSet pools = kAllPools;
  IpfOptions ipf;
  // >= 0: pool F has this many experts per layer from a budget of its own (pool F in a discrete GPU's
  // device memory, issue 36 item 1; CacheConfig::f_on_device), clipped to n_experts. F then holds the
  // top ranks, and the grid searches the ratios of Λ \ {F} over budget_bytes_per_layer (the host's)
  // for the ranks after F's, so the hit model of every candidate counts F's hits: the two budgets are
  // planned together. budget_bytes_per_layer may then be 0 (nothing but F). -1: F shares the budget.
  int32_t fixed_f_capacity = -1;
};

struct PoolPlan {
  std::array<double, kPoolCount> ratios{};        // γ_p: share of the budget per pool (0 if not in Λ)
  std::array<int32_t, kPoolCount> capacities{};   // S_p: experts per layer (after clipping to N)
  std::array<uint64_t, kPoolCount> bytes{};       // S_p × bytes per expert
  int32_t miss_capacity = 0;                     // ranks in the Miss pool: N - Σ S_p
  std::array<double, kPoolCount> expected_hits{}; // E[h_p] per step
  double expected_miss = 0;                      // E[k_rem]
  double expected_makespan_us = 0;               // of the chosen plan
  double all_miss_makespan_us = 0;               // Alg. 3 with h = 0 (no cache at all)
  std::vector<double> selection_prob;            // q: [N] fitted by eq. 24
  int32_t ipf_iterations = 0;
  int64_t grid_points = 0;                       // ratio vectors evaluated
};

// Expected makespan of one layer under fixed pool capacities, and the expected hits per pool.
struct MakespanExpectation {
  double makespan_us = 0;
  std::array<double, kPoolCount> expected_hits{};
  double expected_miss = 0;
  double probability_mass = 0;  // Σ P(h): 1 up to rounding
};

// Alg. 4 lines 15-29 for one partition: Σ over hit patterns of EstimateMakespanUs × probability.
//   model: the partition's hit model (its capacities and top_k); cost: validated by the caller.
MakespanExpectation ExpectedMakespan(const HitModel& model, const CostModel& cost);

// Experts each pool can hold for ratios γ: S_p = floor(γ_p · budget / bytes_per_expert_p), then
// clipped in hierarchy order F, C, S, E so that Σ S_p <= n_experts (later pools lose ranks first).
// fixed_f_capacity >= 0 (PlanOptions::fixed_f_capacity): S_F is that, clipped to n_experts, whatever
// γ_F, and the other pools share the budget for the ranks after F's.
std::array<int32_t, kPoolCount> CapacitiesForRatios(const std::array<double, kPoolCount>& ratios,
                                                   uint64_t budget_bytes_per_layer, const PoolCosts& costs,
                                                   int32_t n_experts, int32_t fixed_f_capacity = -1);

// Chooses byte ratios for the F/C/S/E pools of one MoE layer: a grid search that minimises expected
// makespan (ZipMoE Appendix C, Alg. 4; hit model from Alg. 2 and eq. 24).
//   rank_freq: [n_experts] float64, inclusion probability per frequency rank, non-increasing, each
//              in [0, 1], summing to top_k (within 1e-6 · top_k; renormalised exactly)
//   top_k: experts selected per step (k; for batch size > 1 the mean distinct experts, rounded)
//   budget_bytes_per_layer: cache bytes this layer may use
//   costs: bytes per expert of each enabled pool (> 0)
//   cost: delays and K, L, n (ValidateCostModel)
// Ties keep the first ratio vector in enumeration order (γ_F descending, then γ_C, γ_S, γ_E), whose
// first element is the paper's initial (1, 0, 0, 0) when F ∈ Λ. With options.fixed_f_capacity >= 0
// the ratios are the host pools' (γ_F = 0), capacities[F] the fixed one, bytes[F] its device bytes.
// Errors: kInvalidArgument naming the field: empty rank_freq, top_k not in [1, n_experts],
// budget_bytes_per_layer = 0, rank_freq not non-increasing / out of [0, 1] / wrong sum, grid_step,
// empty pool set, non-positive pool bytes, bad cost model; kInternal if eq. 24 does not converge.
Result<PoolPlan> PlanPools(const std::vector<double>& rank_freq, int top_k, uint64_t budget_bytes_per_layer,
                           const PoolCosts& costs, const CostModel& cost, const PlanOptions& options = {});

}  // namespace zipmoe::cache_manager
