#include "services/cli/runtime_flags.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/checkpoint/manifest.h"
#include "common/thread_priority.h"
#include "kernels/recovery.h"
#include "services/cache_manager/plan_trace.h"

namespace zipmoe::cli {

namespace cm = cache_manager;

void AddWeightsMemoryFlags(CLI::App* cmd, executor::WeightsMemory* target) {
  CLI::Option* no_mmap = cmd->add_flag_function(
      "--no-mmap", [target](int64_t) { *target = executor::WeightsMemory::kAnonymous; }, kNoMmapHelp);
  cmd->add_flag_function("--mmap", [target](int64_t) { *target = executor::WeightsMemory::kMapped; }, kMmapHelp)
      ->excludes(no_mmap);
}

void AddKvCacheDtypeFlag(CLI::App* cmd, bool* bf16) {
  cmd->add_option_function<std::string>(
         "--kv-cache-dtype",
         [bf16](const std::string& v) { *bf16 = v == "bf16"; },
         "keys and values cached as f32 (the default: the float32 reference's logits) or bf16 (half the memory per "
         "position and half the bytes a long context's decode reads; logits within BF16 rounding of f32's)")
      ->check(CLI::IsMember({"f32", "bf16"}));
}

void AddSwaFullFlag(CLI::App* cmd, bool* full) {
  cmd->add_flag("--swa-full", *full,
                "sliding-window layers (gpt-oss, Trinity, Mixtral's sliding_window) cache every position instead of "
                "their window's: more memory, and the prefix cache can reuse such a cache from any position");
}

void AddPrefillChunkFlag(CLI::App* cmd, int64_t* chunk) {
  cmd->add_option("--prefill-chunk", *chunk,
                  "prompt tokens fed a step (chunked prefill: other sequences decode between a long prompt's chunks, "
                  "a step's memory is bounded; the same logits); 0 = a prompt whole")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

void AddRuntimeFlags(CLI::App* cmd, RuntimeFlags* f, bool budget_required) {
  CLI::Option* budget = cmd->add_option(
      "--memory-budget", f->memory_budget,
      "memory for experts (cache pools + experts in flight), e.g. 512MiB, or 50% of the BF16 expert bytes; "
      "without it every expert is resident");
  if (budget_required) budget->required();
  cmd->add_option("--policy", f->policy, "zipmoe | lru | fifo | lfu | marking | dali | smoe | coserve | full-load (generate also: mmap, "
                  "the uncompressed checkpoint through the page cache)")->capture_default_str();
  cmd->add_option("--pools", f->pools,
                  "enabled pools Λ, letters of FCSE (default: zipmoe FCSE, the other policies one F pool); another "
                  "policy given more than F gets the planner's per-layer pools, admits by rank as zipmoe, and evicts "
                  "within each pool by its own rule");
  cmd->add_option("--pool-ratios", f->pool_ratios,
                  "planned pools: fixed byte shares, e.g. F=0.4,C=0.3,S=0.2,E=0.1 (default: planner, Alg. 4)");
  cmd->add_option("--plan-trace", f->plan_trace, "routing trace (generate --trace-out) the planner fits f_r to");
  cmd->add_option("--profile", f->profile, "profile JSON from `zipmoe profile` (default MODEL/profile.json)");
  cmd->add_option("--decompress-threads", f->decompress_threads, "L: decompression workers (0 = CPUs - 1)")
      ->capture_default_str();
  cmd->add_option("--staging-slots", f->staging_slots, "experts in flight at once (0 = auto: top-k within 1/4 budget)")
      ->capture_default_str();
  cmd->add_option("--tolerance", f->tolerance, "δ added to the rank thresholds τ_i")->capture_default_str();
  cmd->add_flag("--page-cache", f->page_cache, "buffered reads instead of O_DIRECT");
  cmd->add_flag("--fifo-dispatch", f->fifo_dispatch, "FIFO read/decode order instead of the cache-affinity scheduler");
  cmd->add_flag("--no-verify-recovery", f->no_verify_recovery, "skip the xxh64 check of recovered BF16 tensors");
  cmd->add_flag("--separate-recovery", f->separate_recovery,
                "recover each missed expert's BF16 before computing it (as for the GPU) instead of multiplying straight "
                "from its E/SM planes on the CPU");
  cmd->add_flag("--no-compression", f->no_compression,
                "ablation: zipmoe with full-tensor caching only, on a `compress --codec none` directory");
  cmd->add_flag("--preload", f->preload,
                "fill the cache to its plan before the first request: per MoE layer the experts --plan-trace selects "
                "most (without a trace: the lowest ids), as many as the layer's pools hold, read and placed by rank");
  cmd->add_option("--prefetch", f->prefetch,
                  "none | top-score (the next MoE layer's router on this layer's router input, SMoE) | residual "
                  "(DALI: plus the residual calibrated by `zipmoe profile --prefetch-residuals`): read and decode the "
                  "predicted misses of the next MoE layer while this one computes (default: the policy's: smoe "
                  "top-score, dali residual when calibrated else top-score, the others none)");
  cmd->add_option("--substitution-alpha", f->substitution_alpha,
                  "SMoE expert substitution threshold α in [0, 1): a selected expert scoring below (1+α)·S_k+1 that "
                  "is not cached is replaced by a cached one scoring at least (1-α)·S_k+1. Changes the model's "
                  "output; 0 (the default) computes the exact model")
      ->capture_default_str();
  cmd->add_option("--stats-json", f->stats_json, "write runtime statistics (requests per pool, misses, I/O, makespan)");
  cmd->add_option("--pipeline-priority", f->pipeline_priority,
                  "auto | realtime | slice | none: run the I/O thread and the decompression workers ahead of the "
                  "compute threads (realtime: SCHED_FIFO 1, needs CAP_SYS_NICE; slice: a 0.1 ms EEVDF time slice, "
                  "Linux >= 6.12; auto: realtime where permitted, else slice where available, else none)")
      ->capture_default_str();
}

Result<std::unique_ptr<runtime::OffloadExpertProvider>> CreateRuntime(const RuntimeFlags& flags,
                                                                      const std::string& model_dir,
                                                                      const std::string& device,
                                                                      bool device_f_pool,
                                                                      const std::string& device_memory_budget) {
  if (flags.memory_budget.empty()) return std::unique_ptr<runtime::OffloadExpertProvider>();
  if (!FileExists(JoinPath(model_dir, kManifestFileName))) {
    return Status::InvalidArgument(fmt::format(
        "--memory-budget needs a compressed directory (zipmoe compress); {} has no {}", model_dir, kManifestFileName));
  }
  ZM_ASSIGN_OR_RETURN(runtime::OffloadConfig config, ToOffloadConfig(flags, model_dir));
  ZM_ASSIGN_OR_RETURN(ThreadPriority priority, ParseThreadPriority(flags.pipeline_priority, "--pipeline-priority"));
  // Before the runtime starts its threads: they raise themselves to it (RaisePipelineThread).
  ZM_ASSIGN_OR_RETURN(ThreadPriority resolved, ResolveThreadPriority(priority));
  SetPipelineThreadPriority(resolved);
  // The executor recovers missed experts from their planes (unless --separate-recovery): the CPU
  // inside its matmul, the GPU executor with the recovery kernel reading the arena in place, for
  // which the arena is registered with CUDA.
  config.register_with_cuda = device != "cpu" && kernels::CudaDeviceCount() > 0;
  // The GPU executor (decoder-only, no device assignment) owns pool F's memory: the cache decides
  // what is in F, the executor's device slots hold it (issue 36 item 1), sized by
  // --device-memory-budget on a discrete GPU, one budget on an integrated GPU unless one is given.
  ZM_RETURN_IF_ERROR(
      runtime::ConfigureDeviceFPool(&config, device, device_f_pool, device_memory_budget, "--device-memory-budget")
          .status());
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::OffloadExpertProvider> provider,
                      runtime::OffloadExpertProvider::Create(config));
  PrintRuntimeSummary(*provider);
  ZM_RETURN_IF_ERROR(PreloadRuntime(flags, *provider));
  return provider;
}

Status PreloadRuntime(const RuntimeFlags& flags, runtime::OffloadExpertProvider& provider) {
  if (!flags.preload) return Status::Ok();
  ZM_ASSIGN_OR_RETURN(const auto counts, cm::ReadActivationCounts(flags.plan_trace));
  Result<runtime::OffloadExpertProvider::PreloadStats> done = provider.Preload(counts);
  if (!done.ok()) return Status(done.status().code(), fmt::format("--preload: {}", done.status().message()));
  std::fprintf(stderr, "I: preload: %s\n",
               done->Summary(flags.plan_trace.empty() ? "expert id (no --plan-trace)" : "--plan-trace counts").c_str());
  return Status::Ok();
}

void PrintRuntimeSummary(const runtime::OffloadExpertProvider& p) {
  const runtime::OffloadConfig& c = p.config();
  const cm::CacheManager& cache = p.cache();
  const cm::CacheCounters counters = cache.Counters();
  std::string pools;
  for (cm::Pool pool : cm::kPoolOrder) {
    const cm::PoolCounters& pc = counters.pools[cm::PoolIndex(pool)];
    if (pc.capacity_bytes == 0) continue;
    pools += fmt::format(" {}={:.1f}MiB{}", cm::PoolLetter(pool), pc.capacity_bytes / 1048576.0,
                         pool == cm::Pool::kF && c.device_f_pool ? " (on the device)" : "");
  }
  const runtime::RuntimeStats s = p.stats();
  std::fprintf(stderr, "%s",
               fmt::format("I: runtime: policy {}, budget {:.1f} MiB (min {:.1f} MiB), pools{}, {} staging slot(s) of "
                           "{:.1f} MiB, {} decompression worker(s), {} reads, {}, recovery {}, prefetch {}, pipeline threads {}\n",
                           cm::CachePolicyName(c.policy), c.memory_budget_bytes / 1048576.0,
                           p.minimum_budget_bytes() / 1048576.0, pools.empty() ? " none" : pools, c.staging_slots,
                           cache.staging_layout().slot_bytes / 1048576.0, c.n_workers,
                           s.direct_io ? "O_DIRECT" : "buffered",
                           c.scheduler ? "cache-affinity scheduler (Alg. 1)" : "FIFO dispatch",
                           !c.fused_recovery        ? "before compute"
                           : c.register_with_cuda ? "by the executor (GPU recovery kernel, arena read in place)"
                                                  : "by the executor (fused into the CPU matmul)",
                           PrefetchModeName(p.prefetch_mode()), ThreadPriorityName(PipelineThreadPriority()))
                   .c_str());
}

std::string DeviceAssignmentLine(const executor::Generator& generator, const std::string& what) {
  const scheduler::DeviceCostModel& c = generator.device_cost();
  if (!c.has_accelerator) {
    if (what != "profiled") return std::string();
    return "I: executor: --device-assignment greedy: no accelerator (the CPU computes every expert; DALI's "
           "assignment degenerates)\n";
  }
  if (what == "profiled") {
    return fmt::format("I: executor: DALI greedy assignment, cost model profiled: CPU {:.1f} + {:.1f}/token us, "
                       "accelerator {:.1f} + {:.1f}/token us, transfer {:.1f} us per expert\n",
                       c.cpu_expert_us, c.cpu_token_us, c.gpu_expert_us, c.gpu_token_us, c.transfer_us);
  }
  const scheduler::DeviceAssignmentStats st = generator.device_assignment_stats();
  return fmt::format("I: executor: DALI greedy assignment over {} MoE layer runs: {} experts on the CPU, {} on the "
                     "accelerator; estimated expert time {:.1f} ms ({:.1f} ms all on the accelerator)\n",
                     st.layers, st.cpu_experts, st.gpu_experts, st.estimated_us / 1e3,
                     st.estimated_all_gpu_us / 1e3);
}

nlohmann::json DeviceAssignmentJson(const executor::Generator& generator) {
  const scheduler::DeviceCostModel& c = generator.device_cost();
  const scheduler::DeviceAssignmentStats st = generator.device_assignment_stats();
  return {{"mode", "greedy"},
          {"accelerator", c.has_accelerator},
          {"cost", {{"cpu_expert_us", c.cpu_expert_us},
                    {"cpu_token_us", c.cpu_token_us},
                    {"gpu_expert_us", c.gpu_expert_us},
                    {"gpu_token_us", c.gpu_token_us},
                    {"transfer_us", c.transfer_us}}},
          {"layers", st.layers},
          {"cpu_experts", st.cpu_experts},
          {"gpu_experts", st.gpu_experts},
          {"estimated_us", st.estimated_us},
          {"estimated_all_gpu_us", st.estimated_all_gpu_us}};
}

nlohmann::json DeviceExpertsJson(const executor::Generator& generator) {
  const executor::DeviceExpertStats s = generator.device_expert_stats();
  if (!s.active) return nullptr;
  if (s.managed_slots >= 0)  // the runtime's pool F on the device: its cache decides
    return {{"pool_f_slots", s.managed_slots},
            {"allocated", s.managed_allocated},
            {"hits", s.managed_hits},
            {"fills", s.managed_fills},
            {"staged", s.misses},
            {"slot_bytes", s.slot_bytes},
            {"bytes_in", (s.managed_fills + s.misses) * s.slot_bytes}};  // written into the device
  return {{"capacity", s.capacity},   {"resident", s.resident},     {"hits", s.hits},
          {"misses", s.misses},       {"evictions", s.evictions},   {"staged", s.staged},
          {"slot_bytes", s.slot_bytes}, {"bytes_in", s.misses * s.slot_bytes}};
}

std::string DeviceExpertsLine(const executor::Generator& generator) {
  const executor::DeviceExpertStats s = generator.device_expert_stats();
  if (!s.active) return std::string();
  if (s.managed_slots >= 0)
    return fmt::format("I: executor: pool F on the device: {} slots ({:.1f} MiB each, {} allocated), the runtime's "
                       "cache decides; {} served from a slot, {} written into one, {} staged for one use\n",
                       s.managed_slots, s.slot_bytes / 1048576.0, s.managed_allocated, s.managed_hits,
                       s.managed_fills, s.misses);
  const uint64_t served = s.hits + s.misses;
  return fmt::format("I: executor: device F slots: {} experts kept ({:.1f} MiB each), {} resident; hit rate {:.1f} % "
                     "({} hits, {} delivered = {:.1f} MiB to the device), {} evicted, {} staged past capacity\n",
                     s.capacity, s.slot_bytes / 1048576.0, s.resident,
                     served == 0 ? 0.0 : 100.0 * static_cast<double>(s.hits) / static_cast<double>(served), s.hits,
                     s.misses, static_cast<double>(s.misses * s.slot_bytes) / 1048576.0, s.evictions, s.staged);
}

}  // namespace zipmoe::cli
