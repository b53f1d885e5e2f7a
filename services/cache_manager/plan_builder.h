// From a compressed model, a memory budget and a workload to cache pool capacities: the glue
// between the planner (planner.h, ZipMoE §3.4 / Appendix C Alg. 4) and its inputs — model facts
// from the manifest, delays from profile.json (or the documented defaults), rank frequencies from a
// routing trace (or uniform f_r = k/N). Used by `zipmoe plan` and by the runtime at start-up.
//
// BuildPlan reads the profile and trace files; the rest is pure. Callable from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/checkpoint/manifest.h"
#include "common/status.h"
#include "services/cache_manager/plan_cost.h"
#include "services/cache_manager/planner.h"
#include "services/cache_manager/pool_layout.h"

namespace zipmoe::cache_manager {

struct PlanRequest {
  std::string model_dir;       // compressed dir (default profile: model_dir/profile.json)
  uint64_t budget_bytes = 0;   // bytes for the pools of all MoE layers (split evenly per layer)
  PoolSet pools = kAllPools;   // Λ
  std::string trace_path;      // routing trace (plan_trace.h); "" = uniform f_r
  int32_t batch_size = 1;      // plan for steps of this many tokens
  int32_t n_workers = 1;       // L
  std::string profile_path;    // "" = model_dir/profile.json when it exists, else DefaultCostModel
  double grid_step = 0.05;     // δ of Alg. 4
  bool slot_costs = true;      // bytes per expert as the arena charges them (else mean stored bytes)
  double expert_compute_us = -1;  // >= 0 overrides the profile's p
  double recovery_us = -1;        // >= 0 overrides the profile's recovery time
  // Fixed byte ratios γ (F, C, S, E; Σ = 1, 0 outside Λ): skips the grid search (ablations, tests).
  std::optional<std::array<double, kPoolCount>> ratios;
  // >= 0: pool F lives in the GPU executor's device memory with this budget for all MoE layers (split
  // evenly; issue 36 item 1): F's capacity per layer is that share over F's bytes per expert, and
  // budget_bytes plans Λ \ {F} around it (PlanOptions::fixed_f_capacity; fixed `ratios` must then
  // give F 0). -1: F is one of the pools of budget_bytes.
  int64_t device_f_budget_bytes = -1;
};

struct PlanBuild {
  ModelPlanInputs model;
  CostModel cost;
  std::string cost_source;     // profile path, or "defaults"
  std::string io_mode;         // from the profile ("" for defaults)
  std::string workload;        // "trace" or "uniform"
  std::vector<double> rank_freq;  // [N] f_r used
  int32_t active_k = 0;        // k used by the planner
  double mean_active_experts = 0;
  int64_t trace_records = 0;
  uint64_t budget_bytes_per_layer = 0;
  PoolCosts costs;             // bytes per expert per pool used
  PoolPlan plan;               // chosen ratios/capacities (+ expectations when grid-searched)
  PoolPlan f_only;             // the same budget as an F-only cache (for comparison)
};

// Errors: ReadManifest/ModelPlanInputsFromManifest/ReadStorageProfile/ReadTrace/PlanPools errors;
// kInvalidArgument for batch_size < 1, a trace without records of that batch size (naming the sizes
// it has), or fixed ratios that are negative, do not sum to 1, use a pool outside Λ, or give F a share
// of budget_bytes while F has a device budget of its own.
Result<PlanBuild> BuildPlan(const Manifest& manifest, const PlanRequest& request);

// The per-layer capacities of `build` on every layer of `layout` that has experts (0 elsewhere).
CachePlan ToCachePlan(const PlanBuild& build, const ModelLayout& layout);

// "F=0.5,C=0.25,S=0.25,E=0" (any order, missing letters = 0). Errors: kInvalidArgument naming the text.
Result<std::array<double, kPoolCount>> ParsePoolRatios(const std::string& text);

}  // namespace zipmoe::cache_manager
