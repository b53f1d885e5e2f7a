// Flags of the embedded runtime (services/runtime/offload_provider.h) shared by `zipmoe generate`
// and `zipmoe replay`: memory budget, cache policy, pools, workers, staging, I/O mode, stats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/executor/generator.h"
#include "services/runtime/offload_provider.h"

namespace CLI {
class App;
}

namespace zipmoe::cli {

struct RuntimeFlags {
  std::string memory_budget;     // "" = every expert resident (no runtime)
  std::string policy = "zipmoe";
  std::string pools;  // Λ; "" = the policy's own (zipmoe FCSE, the others F)
  std::string pool_ratios;       // "" = planner
  std::string plan_trace;        // planner workload
  std::string profile;
  int decompress_threads = 0;
  uint32_t staging_slots = 0;
  int32_t tolerance = 0;
  bool page_cache = false;
  bool fifo_dispatch = false;    // FIFO order instead of Alg. 1
  bool no_verify_recovery = false;
  bool no_compression = false;
  bool separate_recovery = false;  // recover BF16 before compute even for a CPU executor
  std::string prefetch;          // PrefetchMode name; "" = the policy's default (DefaultPrefetch)
  double substitution_alpha = 0;  // SMoE expert substitution α (executor); 0 = exact
  std::string stats_json;
  bool preload = false;          // fill the cache before the first request (OffloadExpertProvider::Preload)
};

// --policy mmap: the benchmark baseline that serves experts from the memory map of the uncompressed
// checkpoint (services/runtime/mmap_provider.h), not the runtime; only `zipmoe generate` accepts it.
inline bool UsesMmapBaseline(const RuntimeFlags& flags) { return flags.policy == "mmap"; }

// The predictor a policy uses when --prefetch is not given: smoe → top-score (SMoE's own); dali →
// residual when `model_dir` holds its calibration (prefetch_residuals.safetensors), else top-score;
// every other policy → none.
PrefetchMode DefaultPrefetch(const std::string& policy, const std::string& model_dir);
// `prefetch` parsed, or DefaultPrefetch when it is "" (the flag / service key not given).
// Errors: ParsePrefetchMode's.
Result<PrefetchMode> ResolvePrefetch(const std::string& prefetch, const std::string& policy,
                                     const std::string& model_dir);

// Registers the flags on `cmd`. `budget_required`: --memory-budget is mandatory (replay).
void AddRuntimeFlags(CLI::App* cmd, RuntimeFlags* flags, bool budget_required);

// Errors: kInvalidArgument for an unparsable budget / policy. "N%" budgets are resolved by
// OffloadExpertProvider::Create (OffloadConfig::memory_budget_percent).
Result<runtime::OffloadConfig> ToOffloadConfig(const RuntimeFlags& flags, const std::string& model_dir);

// The runtime for `model_dir` as the flags describe it, with its summary printed to stderr; nullptr
// when --memory-budget is not given (every expert resident). Errors: kInvalidArgument when the
// directory is not compressed (no manifest), ToOffloadConfig's and OffloadExpertProvider::Create's.
// `device`: the executor's ("cpu" | "cuda[:N]"); recovery is fused into the CPU kernels
// (OffloadConfig::fused_recovery) for "cpu" unless --separate-recovery.
Result<std::unique_ptr<runtime::OffloadExpertProvider>> CreateRuntime(const RuntimeFlags& flags,
                                                                      const std::string& model_dir,
                                                                      const std::string& device = "cpu");

// With --preload, the runtime's OffloadExpertProvider::Preload seeded from --plan-trace's counts
// (every expert 0 without one), and one stderr line with what it read. Errors: ReadTrace's, Preload's.
Status PreloadRuntime(const RuntimeFlags& flags, runtime::OffloadExpertProvider& provider);

// One stderr line: policy, budget, pools and their capacities, staging slots, workers, I/O mode.
void PrintRuntimeSummary(const runtime::OffloadExpertProvider& provider);

// --device-assignment (generate, serve): DALI's Greedy Assignment of each MoE layer's experts
// between the CPU and an accelerator (GeneratorOptions::device_assignment).
inline constexpr const char* kDeviceAssignmentHelp =
    "none | greedy: DALI's Greedy Assignment (Alg. 1) runs each MoE layer's experts partly on the CPU, partly on "
    "--device, by a warm-up-profiled cost model (CPU experts compute in float32: logits differ from an all-GPU run "
    "by rounding); with --device cpu there is no accelerator and nothing changes";

// One stderr line about the assignment: the cost model (`what` = "profiled") or what it decided so
// far (`what` = "decided"); says so when there is no accelerator.
std::string DeviceAssignmentLine(const executor::Generator& generator, const std::string& what);
// {"mode", "accelerator", "cost": {...µs}, "layers", "cpu_experts", "gpu_experts", "estimated_us",
//  "estimated_all_gpu_us"} for --json / stats.
nlohmann::json DeviceAssignmentJson(const executor::Generator& generator);

}  // namespace zipmoe::cli
