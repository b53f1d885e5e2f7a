// `zipmoe plan`: hierarchical cache planning (ZipMoE §3.4, Appendix C Alg. 4; docs/planner.md).
//
//   zipmoe plan --model COMPRESSED_DIR --memory-budget 512MiB [--trace FILE] [--pools FCSE]
//               [--profile FILE] [--decompress-threads L] [--batch-size B] [--grid-step 0.05]
//               [--byte-costs slot|stored] [--expert-compute-us P] [--recovery-us R] [--json]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/manifest.h"
#include "services/cache_manager/plan_cost.h"
#include "services/cache_manager/plan_profile.h"
#include "services/cache_manager/plan_trace.h"
#include "services/cache_manager/planner.h"
#include "services/cli/commands.h"

namespace zipmoe::cli {
namespace {

namespace cm = cache_manager;

struct PlanArgs {
  std::string model;
  std::string budget;
  std::string trace;
  std::string pools = "FCSE";
  std::string profile;  // "" = MODEL/profile.json when present
  int32_t n_workers = 0;  // 0 = online CPUs - 1 (one core is the I/O thread), at least 1
  int32_t batch_size = 1;
  double grid_step = 0.05;
  std::string byte_costs = "slot";
  double expert_compute_us = -1;  // < 0: from the profile (else 0)
  double recovery_us = -1;
  bool json = false;
};

// "512MiB", "1.5GB", "4096", "64k": B, K/KB = 1e3, KiB = 2^10, M/MB, MiB, G/GB, GiB, T/TB, TiB.
Result<uint64_t> ParseByteSize(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    return Status::InvalidArgument(fmt::format("--memory-budget '{}': expected a size such as 512MiB", text));
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
  if (scale == 0 || !(value >= 0) || !std::isfinite(value)) {
    return Status::InvalidArgument(fmt::format("--memory-budget '{}': unknown unit '{}' (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)",
                                               text, unit));
  }
  return static_cast<uint64_t>(std::floor(value * scale));
}

std::string Mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / 1048576.0); }

// {"F": v[0], "C": v[1], "S": v[2], "E": v[3]}
template <typename T>
nlohmann::json PerPool(const std::array<T, cm::kNumPools>& v) {
  nlohmann::json j = nlohmann::json::object();
  for (int p = 0; p < cm::kNumPools; ++p) j[std::string(1, cm::kPoolLetters[p])] = v[p];
  return j;
}

Status RunPlan(const PlanArgs& args) {
  ZM_ASSIGN_OR_RETURN(uint64_t budget, ParseByteSize(args.budget));
  ZM_ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(args.model));
  ZM_ASSIGN_OR_RETURN(cm::ModelPlanInputs model, cm::ModelPlanInputsFromManifest(manifest, args.model));
  ZM_ASSIGN_OR_RETURN(cm::PoolSet pools, cm::ParsePoolSet(args.pools));
  if (args.byte_costs != "slot" && args.byte_costs != "stored") {
    return Status::InvalidArgument(fmt::format("--byte-costs '{}': expected slot or stored", args.byte_costs));
  }
  if (args.batch_size < 1) return Status::InvalidArgument(fmt::format("--batch-size {}: must be >= 1", args.batch_size));
  const int32_t n_workers = args.n_workers > 0
                                ? args.n_workers
                                : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()) - 1);

  // Costs: the profile when there is one, else the documented defaults.
  const std::string default_profile = JoinPath(args.model, cm::kProfileFileName);
  const std::string profile_path = !args.profile.empty() ? args.profile : default_profile;
  cm::CostModel cost;
  std::string cost_source = "defaults";
  std::string io_mode;
  if (!args.profile.empty() || FileExists(default_profile)) {
    ZM_ASSIGN_OR_RETURN(cm::StorageProfile profile, cm::ReadStorageProfile(profile_path));
    cost = cm::CostModelFromProfile(profile, model, n_workers);
    cost_source = profile_path;
    io_mode = profile.io_mode;
  } else {
    cost = cm::DefaultCostModel(model, n_workers);
  }
  if (args.expert_compute_us >= 0) cost.expert_compute_us = args.expert_compute_us;
  if (args.recovery_us >= 0) cost.recovery_us = args.recovery_us;

  // Workload: rank frequencies of the trace at this batch size, or uniform.
  std::vector<double> rank_freq;
  int32_t k = model.top_k;
  std::string workload;
  int64_t trace_records = 0;
  double mean_active = model.top_k;
  if (!args.trace.empty()) {
    ZM_ASSIGN_OR_RETURN(auto records, cm::ReadTrace(args.trace));
    ZM_ASSIGN_OR_RETURN(auto by_batch, cm::ComputeRankFrequencies(records, model.n_experts, model.top_k));
    auto it = by_batch.find(args.batch_size);
    if (it == by_batch.end()) {
      std::string have;
      for (const auto& [b, rf] : by_batch) have += fmt::format("{}{} ({} records)", have.empty() ? "" : ", ", b, rf.n_records);
      return Status::InvalidArgument(fmt::format("{}: no records with batch size {} (trace has: {})", args.trace,
                                                 args.batch_size, have));
    }
    rank_freq = it->second.rank_freq;
    k = it->second.active_k;
    trace_records = it->second.n_records;
    mean_active = it->second.mean_active_experts;
    workload = "trace";
  } else {
    // Distinct experts per step when each of B tokens picks k of N uniformly: N (1 - (1 - k/N)^B).
    const double n = model.n_experts;
    mean_active = n * (1.0 - std::pow(1.0 - model.top_k / n, args.batch_size));
    k = static_cast<int32_t>(std::clamp<double>(std::round(mean_active), 1, n));
    rank_freq = cm::UniformRankFrequencies(model.n_experts, k);
    workload = "uniform";
  }

  const uint64_t per_layer = budget / static_cast<uint64_t>(std::max(model.n_moe_layers, 1));
  const cm::PoolCosts& costs = args.byte_costs == "slot" ? model.slot_costs : model.pool_costs;
  cm::PlanOptions options;
  options.grid_step = args.grid_step;
  options.pools = pools;
  ZM_ASSIGN_OR_RETURN(cm::PoolPlan plan, cm::PlanPools(rank_freq, k, per_layer, costs, cost, options));
  cm::PlanOptions f_only = options;
  f_only.pools = {true, false, false, false};
  ZM_ASSIGN_OR_RETURN(cm::PoolPlan f_plan, cm::PlanPools(rank_freq, k, per_layer, costs, cost, f_only));

  if (args.json) {
    nlohmann::json j;
    j["model"] = args.model;
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
  cmd->add_option("--pools", args->pools, "enabled pools Λ, letters of FCSE")->capture_default_str();
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
