// `zipmoe plan`: hierarchical cache planning (ZipMoE §3.4, Appendix C Alg. 4; docs/planner.md).
//
//   zipmoe plan --model COMPRESSED_DIR --memory-budget 512MiB [--policy P] [--trace FILE] [--pools FCSE]
//               [--profile FILE] [--decompress-threads L] [--batch-size B] [--grid-step 0.05]
//               [--byte-costs slot|stored] [--expert-compute-us P] [--recovery-us R] [--json]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/checkpoint/manifest.h"
#include "services/cache_manager/cache_manager.h"
#include "services/cache_manager/plan_builder.h"
#include "services/cache_manager/plan_cost.h"
#include "services/cli/cli_util.h"
#include "services/cache_manager/planner.h"
#include "services/cli/commands.h"
#include "services/decompressor/decompressor_pool.h"

namespace zipmoe::cli {
namespace {

namespace cm = cache_manager;

struct PlanArgs {
  std::string model;
  std::string budget;
  std::string trace;
  std::string pools;               // "" = the policy's own: zipmoe FCSE, the others F
  std::string policy = "zipmoe";  // CachePolicyName; the others plan one F pool unless given --pools
  std::string profile;  // "" = MODEL/profile.json when present
  int32_t n_workers = 0;  // 0 = decompressor::DefaultWorkerCount(): the CPUs this process may run on - 1, at least 1
  int32_t batch_size = 1;
  double grid_step = 0.05;
  std::string byte_costs = "slot";
  double expert_compute_us = -1;  // < 0: from the profile (else 0)
  double recovery_us = -1;
  bool json = false;
};

std::string Mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / 1048576.0); }

// {"F": v[0], "C": v[1], "S": v[2], "E": v[3]}
template <typename T>
nlohmann::json PerPool(const std::array<T, cm::kPoolCount>& v) {
  nlohmann::json j = nlohmann::json::object();
  for (int p = 0; p < cm::kPoolCount; ++p) j[std::string(1, cm::kPoolLetters[p])] = v[p];
  return j;
}

Status RunPlan(const PlanArgs& args) {
  ZM_ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(args.model));
  uint64_t budget = 0;
  if (!args.budget.empty() && args.budget.back() == '%') {  // as generate and serve read it
    ZM_ASSIGN_OR_RETURN(const double percent, ParseBudgetPercent(args.budget, "--memory-budget"));
    budget = static_cast<uint64_t>(static_cast<double>(manifest.expert_raw_bytes()) * percent / 100.0);
  } else {
    ZM_ASSIGN_OR_RETURN(budget, ParseByteSize(args.budget, "--memory-budget"));
  }
  if (budget == 0)
    return Status::InvalidArgument(fmt::format("--memory-budget '{}': 0 bytes leave nothing to plan", args.budget));
  if (args.byte_costs != "slot" && args.byte_costs != "stored") {
    return Status::InvalidArgument(fmt::format("--byte-costs '{}': expected slot or stored", args.byte_costs));
  }
  ZM_ASSIGN_OR_RETURN(const cm::CachePolicy policy, cm::ParseCachePolicy(args.policy));
  // Planned per-layer pools: zipmoe's own, or any other policy given pools beyond F (it then evicts
  // within each pool by its own rule; services/cache_manager/policies/policy.h).
  ZM_ASSIGN_OR_RETURN(const cm::PolicyPools resolved, cm::ResolvePolicyPools(policy, args.pools));
  const bool planned = resolved.planned;
  cm::PlanRequest request;
  request.model_dir = args.model;
  request.budget_bytes = budget;
  ZM_ASSIGN_OR_RETURN(request.pools, cm::ParsePoolSet(resolved.pools));
  request.trace_path = args.trace;
  request.batch_size = args.batch_size;
  request.n_workers = args.n_workers > 0 ? args.n_workers : decompressor::DefaultWorkerCount();
  request.profile_path = args.profile;
  request.grid_step = args.grid_step;
  request.slot_costs = args.byte_costs == "slot";
  request.expert_compute_us = args.expert_compute_us;
  request.recovery_us = args.recovery_us;
  ZM_ASSIGN_OR_RETURN(cm::PlanBuild build, cm::BuildPlan(manifest, request));
  const cm::ModelPlanInputs& model = build.model;
  const cm::CostModel& cost = build.cost;
  const cm::PoolSet& pools = request.pools;
  const std::vector<double>& rank_freq = build.rank_freq;
  const int32_t k = build.active_k;
  const std::string& workload = build.workload;
  const std::string& cost_source = build.cost_source;
  const std::string& io_mode = build.io_mode;
  const int64_t trace_records = build.trace_records;
  const double mean_active = build.mean_active_experts;
  const uint64_t per_layer = build.budget_bytes_per_layer;
  const cm::PoolCosts& costs = build.costs;
  const cm::PoolPlan& plan = build.plan;
  const cm::PoolPlan& f_plan = build.f_only;
  // What the policy does with the budget (the runtime: services/pipeline/cache_backend.cc): zipmoe
  // the plan above; dali one F pool per layer of equal size (DaliPlan); full-load nothing; the
  // others one F pool of the whole budget shared by every layer, which the F-only plan (the budget
  // split equally by layer) estimates.
  const uint64_t f_slot = costs.bytes_per_expert[cm::kPoolF] > 0 ? static_cast<uint64_t>(costs.bytes_per_expert[cm::kPoolF]) : 1;
  const bool caches = policy != cm::CachePolicy::kFullLoad;
  const int64_t global_f = caches && !planned ? static_cast<int64_t>(budget / f_slot) : 0;
  std::string layout;
  if (policy == cm::CachePolicy::kZipMoe) {
    layout = "per-layer F/C/S/E pools from the plan below (Alg. 4)";
  } else if (planned) {
    layout = fmt::format("per-layer pools {} from the plan below (Alg. 4), admitted by rank as zipmoe does; {} "
                         "chooses the victim within each pool",
                         resolved.pools, cm::CachePolicyName(policy));
  } else if (!caches) {
    layout = "no cache: every expert is read and decoded on every step (the all-miss makespan)";
  } else if (policy == cm::CachePolicy::kDali) {
    layout = fmt::format("one F pool per MoE layer, {} experts each (the F slots shared equally)",
                         model.n_moe_layers > 0 ? global_f / model.n_moe_layers : 0);
  } else {
    layout = fmt::format("one F pool of {} experts shared by the {} MoE layers (eviction decides which layer holds "
                         "them); estimated below as {} per layer",
                         global_f, model.n_moe_layers, f_plan.capacities[cm::kPoolF]);
  }

  if (args.json) {
    nlohmann::json j;
    j["model"] = args.model;
    j["policy"] = cm::CachePolicyName(policy);
    j["policy_layout"] = layout;
    j["global_f_experts"] = global_f;
    j["arch"] = model.arch;
    j["n_experts"] = model.n_experts;
    j["top_k"] = model.top_k;
    j["active_k"] = k;
    j["mean_active_experts"] = mean_active;
    j["n_moe_layers"] = model.n_moe_layers;
    j["batch_size"] = args.batch_size;
    j["workload"] = workload;
    j["trace"] = args.trace;
    j["trace_records"] = trace_records;
    j["rank_freq"] = rank_freq;
    j["pools"] = cm::PoolSetString(pools);
    j["grid_step"] = args.grid_step;
    j["grid_points"] = plan.grid_points;
    j["budget_bytes"] = budget;
    j["budget_bytes_per_layer"] = per_layer;
    j["byte_costs"] = args.byte_costs;
    j["bytes_per_expert"] = PerPool(costs.bytes_per_expert);
    j["cost"] = {{"source", cost_source},
                 {"io_mode", io_mode},
                 {"sm_read_us", cost.sm_read_us},
                 {"e_read_us", cost.e_read_us},
                 {"decompress_us", cost.decompress_us},
                 {"recovery_us", cost.recovery_us},
                 {"expert_compute_us", cost.expert_compute_us},
                 {"n_shards", cost.n_shards},
                 {"n_workers", cost.n_workers},
                 {"tensors_per_expert", cost.tensors_per_expert}};
    j["ratios"] = PerPool(plan.ratios);
    j["capacities"] = PerPool(plan.capacities);
    j["capacities"]["M"] = plan.miss_capacity;
    j["bytes_per_layer"] = PerPool(plan.bytes);
    j["expected_hits"] = PerPool(plan.expected_hits);
    j["expected_hits"]["M"] = plan.expected_miss;
    j["expected_makespan_us"] = plan.expected_makespan_us;
    j["all_miss_makespan_us"] = plan.all_miss_makespan_us;
    j["f_only_makespan_us"] = f_plan.expected_makespan_us;
    j["f_only_capacity"] = f_plan.capacities[cm::kPoolF];
    j["ipf_iterations"] = plan.ipf_iterations;
    fmt::print("{}\n", j.dump());
    return Status::Ok();
  }

  fmt::print("plan {}: {}, {} MoE layers x {} experts, top-k {}, K={} shards, {} tensors/expert\n", args.model,
             model.arch, model.n_moe_layers, model.n_experts, model.top_k, cost.n_shards, cost.tensors_per_expert);
  if (workload == "trace") {
    fmt::print("  workload   trace {}: batch size {}, {} records, {:.2f} distinct experts/step -> k = {}\n",
               args.trace, args.batch_size, trace_records, mean_active, k);
    std::string head;
    for (size_t r = 0; r < std::min<size_t>(rank_freq.size(), 8); ++r) head += fmt::format(" {:.3f}", rank_freq[r]);
    fmt::print("             f_r ={}{}\n", head, rank_freq.size() > 8 ? " ..." : "");
  } else {
    fmt::print("  workload   uniform f_r = k/N = {}/{} (no --trace given), batch size {}\n", k, model.n_experts,
               args.batch_size);
  }
  fmt::print("  policy     {}: {}\n", cm::CachePolicyName(policy), layout);
  fmt::print("  costs      u {:.1f} us (SM-chunk read), v {:.1f} us (E-chunk read), c {:.1f} us (E-chunk decode), "
             "L = {} workers\n", cost.sm_read_us, cost.e_read_us, cost.decompress_us, cost.n_workers);
  fmt::print("             recovery {:.1f} us/tensor, compute {:.1f} us/expert; from {}{}\n", cost.recovery_us,
             cost.expert_compute_us, cost_source == "defaults" ? "documented defaults (no profile.json; run "
                                                                  "`zipmoe profile`)" : cost_source,
             io_mode.empty() ? "" : fmt::format(" ({})", io_mode));
  fmt::print("  budget     {} total = {} per MoE layer; pools {}, grid step {} ({} ratio vectors)\n", Mib(budget),
             Mib(per_layer), cm::PoolSetString(pools), args.grid_step, plan.grid_points);
  fmt::print("  per expert F {}  C {}  S {}  E {} ({} bytes)\n", Mib(costs.bytes_per_expert[cm::kPoolF]),
             Mib(costs.bytes_per_expert[cm::kPoolC]), Mib(costs.bytes_per_expert[cm::kPoolS]),
             Mib(costs.bytes_per_expert[cm::kPoolE]), args.byte_costs);
  fmt::print("  ratios     F {:.2f}  C {:.2f}  S {:.2f}  E {:.2f}\n", plan.ratios[0], plan.ratios[1], plan.ratios[2],
             plan.ratios[3]);
  fmt::print("  capacity   F {}  C {}  S {}  E {}  (M {}) experts per layer\n", plan.capacities[0], plan.capacities[1],
             plan.capacities[2], plan.capacities[3], plan.miss_capacity);
  fmt::print("  hits/step  F {:.2f}  C {:.2f}  S {:.2f}  E {:.2f}  M {:.2f}\n", plan.expected_hits[0],
             plan.expected_hits[1], plan.expected_hits[2], plan.expected_hits[3], plan.expected_miss);
  fmt::print("  makespan   {:.1f} us expected per layer (all-miss {:.1f} us, F-only with {} experts {:.1f} us)\n",
             plan.expected_makespan_us, plan.all_miss_makespan_us, f_plan.capacities[cm::kPoolF],
             f_plan.expected_makespan_us);
  return Status::Ok();
}

}  // namespace

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlanArgs>();  // shared: owned by the callback
  CLI::App* cmd = app.add_subcommand("plan", "Choose F/C/S/E cache pool sizes for a memory budget (ZipMoE Alg. 4)");
  cmd->add_option("--model", args->model, "compressed model directory (output of `zipmoe compress`)")->required();
  cmd->add_option("--memory-budget", args->budget, "cache bytes for all MoE layers, e.g. 512MiB, 2GB")->required();
  cmd->add_option("--trace", args->trace, "activation trace (JSON lines, docs/planner.md); default: uniform f_r");
  cmd->add_option("--pools", args->pools,
                  "enabled pools Λ, letters of FCSE (default: zipmoe FCSE, the other policies F; any other set gives "
                  "them the planner's pools)");
  cmd->add_option("--policy", args->policy,
                  "zipmoe | lru | fifo | lfu | marking | dali | smoe | coserve | full-load: how that policy lays out "
                  "the budget (every policy but zipmoe keeps full tensors in F)")
      ->capture_default_str();
  cmd->add_option("--profile", args->profile, "profile JSON from `zipmoe profile` (default MODEL/profile.json)");
  cmd->add_option("--decompress-threads", args->n_workers, "L: decompression workers (0 = CPUs - 1)")
      ->capture_default_str();
  cmd->add_option("--batch-size", args->batch_size, "plan for steps of this many tokens")->capture_default_str();
  cmd->add_option("--grid-step", args->grid_step, "δ: ratio grid step (1/δ an integer)")->capture_default_str();
  cmd->add_option("--byte-costs", args->byte_costs,
                  "slot: bytes the cache arena charges (4 KiB-rounded, max over experts); stored: mean stored bytes")
      ->capture_default_str();
  cmd->add_option("--expert-compute-us", args->expert_compute_us, "p: expert compute time (default: profile or 0)");
  cmd->add_option("--recovery-us", args->recovery_us, "BF16 recovery time per tensor (default: profile or 0)");
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->callback([args, exit_code] {
    Status st = RunPlan(*args);
    if (!st.ok()) {
      fmt::print(stderr, "error: {}\n", st.ToString());
      *exit_code = 1;
    }
  });
}

}  // namespace zipmoe::cli
