// The embedded runtime's options as the `zipmoe generate / replay / serve` flags (services/cli/
// runtime_flags.h) and the service config (service_config.h, RuntimeFlagsOf) give them, and their
// translation into an OffloadConfig (offload_provider.h). Shared by the CLI and the cache-manager,
// scheduler and executor processes, so it lives here rather than in services/cli.
// Threads: plain data and pure functions (DefaultPrefetch reads the model directory), any thread.
// Errors: kInvalidArgument naming the flag and the text.
#pragma once

#include <cstdint>
#include <string>

#include "common/expert_provider.h"
#include "common/status.h"
#include "services/pipeline/offload_provider.h"

namespace zipmoe::runtime {

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
  // Scheduling priority of the I/O thread and decompression workers over the executor's compute
  // threads (common/thread_priority.h): auto | realtime | slice | none.
  std::string pipeline_priority = "auto";
};

// "512MiB", "1.5GB", "4096", "64k": B, K/KB = 1e3, KiB = 2^10, M/MB, MiB, G/GB, GiB, T/TB, TiB.
// Errors: kInvalidArgument naming `flag` and the text.
Result<uint64_t> ParseByteSize(const std::string& text, const std::string& flag);

// "N%" (--memory-budget): N, a share of the model's expert bytes (Manifest::expert_raw_bytes), in
// (0, 1000]. Errors: kInvalidArgument naming `flag` and the text.
Result<double> ParseBudgetPercent(const std::string& text, const std::string& flag);

// The GPU executor's device budget (--device-memory-budget, executor key device_memory_budget;
// executor::GeneratorOptions::device_memory_budget_*): "" or "auto" -> bytes -1, percent 0; "N%"
// (0 < N <= 100) -> percent N; a size (ParseByteSize) -> bytes. Errors: kInvalidArgument naming
// `flag` and the text.
Status ParseDeviceMemoryBudget(const std::string& text, const std::string& flag, int64_t* bytes, double* percent);
// Pool F on the GPU executor's device (issue 36 item 1; docs/architecture.md "GPU executor"), for the
// runtime of `config->model_dir` whose executor computes on `device` ("cpu", "cuda", "cuda:N"):
// when `gpu_executor` (the executor will run the GPU MoE block: no DALI device assignment), the device
// is not "cpu", a CUDA device answers (kernels::CudaDeviceCount) and the model is decoder-only, sets
// config->device_f_pool and sizes F from `device_memory_budget` (ParseDeviceMemoryBudget's text):
// "N%" of the expert bytes or a size, on its own budget apart from the host's; "auto" on a discrete
// GPU: kernels::UsableExpertBytes of the device's free memory now; "auto" on an integrated GPU (a
// Jetson): F stays the planner's share of the one memory budget. Used by `zipmoe generate / serve`
// and by the cache-manager service (`zipmoe up`), so both decide alike. Returns whether F is on the
// device. Errors: ParseDeviceMemoryBudget's (naming `flag`), LoadModelConfig's.
Result<bool> ConfigureDeviceFPool(OffloadConfig* config, const std::string& device, bool gpu_executor,
                                  const std::string& device_memory_budget, const std::string& flag);

// The predictor a policy uses when --prefetch is not given: smoe → top-score (SMoE's own); dali →
// residual when `model_dir` holds its calibration (prefetch_residuals.safetensors), else top-score;
// every other policy → none.
PrefetchMode DefaultPrefetch(const std::string& policy, const std::string& model_dir);
// `prefetch` parsed, or DefaultPrefetch when it is "" (the flag / service key not given).
// Errors: ParsePrefetchMode's.
Result<PrefetchMode> ResolvePrefetch(const std::string& prefetch, const std::string& policy,
                                     const std::string& model_dir);

// Errors: kInvalidArgument for an unparsable budget / policy. "N%" budgets are resolved by
// OffloadExpertProvider::Create (OffloadConfig::memory_budget_percent).
Result<OffloadConfig> ToOffloadConfig(const RuntimeFlags& flags, const std::string& model_dir);

}  // namespace zipmoe::runtime
