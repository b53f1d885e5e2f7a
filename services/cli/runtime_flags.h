// Flags of the embedded runtime (services/pipeline/offload_provider.h) shared by `zipmoe generate`
// and `zipmoe replay`: memory budget, cache policy, pools, workers, staging, I/O mode, stats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/executor/generator.h"
#include "services/pipeline/offload_provider.h"
#include "services/pipeline/runtime_options.h"

namespace CLI {
class App;
}

namespace zipmoe::cli {

// The options themselves and their translation into an OffloadConfig live in
// services/pipeline/runtime_options.h (the service processes use them too).
using runtime::RuntimeFlags;
using runtime::DefaultPrefetch;
using runtime::ResolvePrefetch;
using runtime::ToOffloadConfig;

// --policy mmap: the benchmark baseline that serves experts from the memory map of the uncompressed
// checkpoint (services/pipeline/mmap_provider.h), not the runtime; only `zipmoe generate` accepts it.
inline bool UsesMmapBaseline(const RuntimeFlags& flags) { return flags.policy == "mmap"; }

// Registers the flags on `cmd`. `budget_required`: --memory-budget is mandatory (replay).
void AddRuntimeFlags(CLI::App* cmd, RuntimeFlags* flags, bool budget_required);

// The runtime for `model_dir` as the flags describe it, with its summary printed to stderr; nullptr
// when --memory-budget is not given (every expert resident). Errors: kInvalidArgument when the
// directory is not compressed (no manifest), ToOffloadConfig's and OffloadExpertProvider::Create's.
// `device`: the executor's ("cpu" | "cuda[:N]"); recovery is fused into the CPU kernels
// (OffloadConfig::fused_recovery) for "cpu" unless --separate-recovery. device_f_pool: the executor
// will be the GPU executor (no device assignment): on a CUDA device with a decoder-only model the
// cache's pool F then lives in its device slots (OffloadConfig::device_f_pool), sized by
// `device_memory_budget` (--device-memory-budget: "N%" of the expert bytes, a byte size; "" or
// "auto": on a discrete GPU 90 % of the free device memory less 2 GiB, on an integrated one F's share
// of --memory-budget). Errors: also ParseDeviceMemoryBudget's, LoadModelConfig's.
Result<std::unique_ptr<runtime::OffloadExpertProvider>> CreateRuntime(const RuntimeFlags& flags,
                                                                      const std::string& model_dir,
                                                                      const std::string& device = "cpu",
                                                                      bool device_f_pool = false,
                                                                      const std::string& device_memory_budget = "");

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

// --device-memory-budget (generate, serve; executor key device_memory_budget).
inline constexpr const char* kDeviceMemoryBudgetHelp =
    "auto | N% | SIZE: device memory for the GPU executor's recovered experts (device F slots, kept between layers "
    "and steps; the rest are recovered into staging slots per use). With --memory-budget it is pool F itself, whose "
    "experts the cache's policy chooses, and --memory-budget holds the other pools. auto: every expert that fits on "
    "a discrete GPU (with --memory-budget: 90 % of the free device memory less 2 GiB), none on an integrated one "
    "(Jetson; with --memory-budget: F's share of that one budget); N% of the routed-expert bytes; or a size such "
    "as 4GiB (0 = staging only). Only with --device cuda";

// --no-mmap / --mmap (generate, serve): LoadOptions::weights_memory kAnonymous / kMapped instead of the
// default kBackground (services/executor/weights_memory.h).
inline constexpr const char* kNoMmapHelp =
    "copy the weights into private anonymous memory in 2 MiB pages before serving (as llama.cpp's --no-mmap), "
    "instead of the default: serve them from the files' memory maps at once and copy them there in the background, "
    "on a thread that only runs when a core is idle. The CPU kernels stream anonymous 2 MiB pages faster than the "
    "page cache on some machines; loading takes longer and the memory is no longer shared or reclaimable; a file is "
    "copied only where it fits (memory headroom, cgroup limits included, less 1 GiB), on a CPU device";
inline constexpr const char* kMmapHelp =
    "keep serving the weights from the files' memory maps (page cache: shared with other processes, reclaimable "
    "under memory pressure) instead of copying them into anonymous memory in the background";
// Adds --no-mmap and --mmap (mutually exclusive) to `cmd`, setting *target (left as is, the default
// kBackground, when neither is given).
void AddWeightsMemoryFlags(CLI::App* cmd, executor::WeightsMemory* target);
// Adds --kv-cache-dtype f32|bf16 to `cmd` (GeneratorOptions::kv_cache_bf16; other values refused by CLI11),
// setting *bf16.
void AddKvCacheDtypeFlag(CLI::App* cmd, bool* bf16);
// Adds --swa-full to `cmd` (GeneratorOptions::kv_window_full), setting *full.
void AddSwaFullFlag(CLI::App* cmd, bool* full);
// Adds --prefill-chunk N >= 0 to `cmd` (GeneratorOptions::prefill_chunk), setting *chunk.
void AddPrefillChunkFlag(CLI::App* cmd, int64_t* chunk);

// One stderr line about the assignment: the cost model (`what` = "profiled") or what it decided so
// far (`what` = "decided"); says so when there is no accelerator.
std::string DeviceAssignmentLine(const executor::Generator& generator, const std::string& what);
// {"mode", "accelerator", "cost": {...µs}, "layers", "cpu_experts", "gpu_experts", "estimated_us",
//  "estimated_all_gpu_us"} for --json / stats.
nlohmann::json DeviceAssignmentJson(const executor::Generator& generator);

// The GPU executor's device F slots (Generator::device_expert_stats): {"capacity", "resident", "hits",
// "misses", "evictions", "staged", "slot_bytes", "bytes_in"} (bytes_in = misses x slot_bytes, what
// reached the device), or null when the device path does not run; and a one-line stderr summary
// ("" when it does not run).
nlohmann::json DeviceExpertsJson(const executor::Generator& generator);
std::string DeviceExpertsLine(const executor::Generator& generator);

}  // namespace zipmoe::cli
