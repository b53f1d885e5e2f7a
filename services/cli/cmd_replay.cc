// `zipmoe replay`: drives storage + cache + scheduler + recovery from a routing trace, without the
// model's attention or expert math (fast cache/scheduler studies; ZipMoE §3.3-3.4).
//
//   zipmoe replay --model COMPRESSED_DIR --trace FILE --memory-budget B [--policy P] [--pools FCSE]
//                 [--compute-us P] [--repeat N] [--stats-json FILE] [runtime flags]
//
// For every trace record (docs/planner.md "Trace format", e.g. from `zipmoe generate --trace-out`):
// BeginLayer(experts, tokens) → NextReady for each expert, holding each lease for --compute-us
// microseconds (a stand-in for the expert's computation; 0 = release at once) → EndLayer. Records
// with tokens_per_expert empty count one token per expert. Prints one summary line; --stats-json
// writes the runtime statistics with replay_seconds and the mean step time.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "services/cache_manager/plan_trace.h"
#include "services/cli/commands.h"
#include "services/cli/runtime_flags.h"

namespace zipmoe::cli {
namespace {

struct ReplayArgs {
  std::string model;
  std::string trace;
  double compute_us = 0;
  int repeat = 1;
  RuntimeFlags runtime;
};

Status RunReplay(const ReplayArgs& args) {
  if (args.repeat < 1) return Status::InvalidArgument(fmt::format("--repeat {}: must be >= 1", args.repeat));
  if (!(args.compute_us >= 0)) return Status::InvalidArgument("--compute-us must be >= 0");
  if (args.runtime.substitution_alpha != 0) {
    return Status::InvalidArgument(fmt::format(
        "--substitution-alpha {}: replay replays recorded routing, it has no router scores to substitute with; "
        "substitution runs in generate and serve",
        args.runtime.substitution_alpha));
  }
  if (!args.runtime.prefetch.empty() && args.runtime.prefetch != "none") {
    ZM_RETURN_IF_ERROR(ParsePrefetchMode(args.runtime.prefetch).status());
    return Status::InvalidArgument(fmt::format(
        "--prefetch {}: replay has no router inputs to predict from (it replays recorded routing); prefetching "
        "runs in generate and serve",
        args.runtime.prefetch));
  }
  ZM_ASSIGN_OR_RETURN(std::vector<cache_manager::ActivationRecord> records, cache_manager::ReadTrace(args.trace));
  RuntimeFlags flags = args.runtime;
  flags.prefetch = "none";  // not the policy's default either: nothing to predict from
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::OffloadExpertProvider> provider, CreateRuntime(flags, args.model));
  const runtime::OffloadConfig& config = provider->config();

  const auto start = std::chrono::steady_clock::now();
  int64_t steps = 0;
  for (int rep = 0; rep < args.repeat; ++rep) {
    int64_t last_step = -1;
    for (size_t i = 0; i < records.size(); ++i) {
      const cache_manager::ActivationRecord& rec = records[i];
      LayerRouting routing;
      routing.layer_id = rec.layer_id;
      routing.expert_ids = rec.expert_ids;
      routing.tokens_per_expert = rec.tokens_per_expert;
      if (routing.tokens_per_expert.empty()) routing.tokens_per_expert.assign(rec.expert_ids.size(), 1);
      Status st = provider->BeginLayer(routing);
      if (!st.ok()) return Status(st.code(), fmt::format("{} record {}: {}", args.trace, i + 1, st.message()));
      for (size_t e = 0; e < routing.expert_ids.size(); ++e) {
        Result<std::unique_ptr<ExpertLease>> lease = provider->NextReady();
        if (!lease.ok()) return Status(lease.status().code(), fmt::format("{} record {}: {}", args.trace, i + 1,
                                                                           lease.status().message()));
        if (args.compute_us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(args.compute_us));
      }
      ZM_RETURN_IF_ERROR(provider->EndLayer(rec.layer_id));
      if (rec.step != last_step) ++steps;
      last_step = rec.step;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const runtime::RuntimeStats s = provider->stats();
  const double step_s = steps > 0 ? seconds / static_cast<double>(steps) : 0.0;
  fmt::print("replay {}: {} records x {} ({} steps) in {:.3f} s = {:.2f} ms/step; {} requests, {} misses "
             "(hit rate {:.1f}%), read {:.1f} MiB, {} decodes, mean makespan {:.0f} us, makespan/bound {:.2f}\n",
             args.trace, records.size(), args.repeat, steps, seconds, step_s * 1e3, s.cache.lookups, s.cache.misses,
             s.cache.lookups ? 100.0 * s.cache.HitsTotal() / s.cache.lookups : 0.0,
             (s.io_bytes_e + s.io_bytes_sm) / 1048576.0, s.decode_ops, runtime::MeanMakespanUs(s),
             runtime::MeanMakespanOverBound(s));
  if (!args.runtime.stats_json.empty()) {
    nlohmann::json j = runtime::RuntimeStatsToJson(s);
    j["model"] = args.model;
    j["trace"] = args.trace;
    j["policy"] = cache_manager::CachePolicyName(config.policy);
    j["pools_enabled"] = config.pools;
    j["decompress_threads"] = config.n_workers;
    j["replay_seconds"] = seconds;
    j["steps"] = steps;
    j["step_seconds"] = step_s;
    j["compute_us"] = args.compute_us;
    ZM_RETURN_IF_ERROR(WriteFileAtomic(args.runtime.stats_json, j.dump(2) + "\n"));
  }
  return Status::Ok();
}

}  // namespace

void AddReplayCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand("replay", "Drive the runtime (storage, cache, scheduler, recovery) from a routing trace");
  cmd->add_option("--model", args->model, "compressed model directory")->required();
  cmd->add_option("--trace", args->trace, "routing trace (JSON lines, `zipmoe generate --trace-out`)")->required();
  cmd->add_option("--compute-us", args->compute_us, "hold each expert's lease this long (stand-in for its compute)")
      ->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "replay the trace this many times")->capture_default_str();
  AddRuntimeFlags(cmd, &args->runtime, /*budget_required=*/true);
  cmd->callback([args, exit_code] {
    Status st = RunReplay(*args);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace zipmoe::cli
