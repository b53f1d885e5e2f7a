// `zipmoe serve`: the OpenAI-compatible HTTP API (services/api/api_server.h) over the embedded
// executor. This file parses the flags and builds the embedded runtime; the serve loop is
// executor::RunServe (services/processes/executor_service.h), which the executor process of `zipmoe up` runs too.
//
//   zipmoe serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY | env ZIPMOE_API_KEY]
//                [--served-model-name NAME... | env ZIPMOE_SERVED_MODEL_NAME] [--threads N]
//                [--max-batch 8] [--http-threads N] [--http-read-timeout-ms 10000] [--cors-origin '*']
//                [--shutdown-grace-ms 2000] [--device cpu] [--memory-budget B [--policy P] ...]
//
// The server listens first, then loads the model (and, with --memory-budget, the ZipMoE runtime as in
// `zipmoe generate`); until then every route but /health and /metrics answers 503. GET /metrics on
// the same port exports the serving metrics and, with the embedded runtime, its cache, I/O and
// decompression counters. HTTP (services/api/http_server.h): one event thread reads every
// connection, so slow or idle clients cost a buffer; a request whose body has arrived runs on one of
// --http-threads workers (default 2 x max-batch + 32), /health and /metrics on workers of their own.
// SIGINT/SIGTERM: blocked in every thread (TerminationSignals) and taken by the main thread: new
// requests get 503, the running ones have --shutdown-grace-ms to finish, the rest end (503 / an error
// event), then the process exits 0.
// Torch-free: only the executor's .cc files include torch.
#include <CLI/CLI.hpp>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include <prometheus/registry.h>

#include "services/cli/cli_util.h"
#include "services/cli/commands.h"
#include "services/cli/runtime_flags.h"
#include "services/processes/executor_service.h"
#include "services/pipeline/offload_provider.h"
#include "services/service_base/service_metrics.h"
#include "services/service_base/service_util.h"

namespace zipmoe::cli {
namespace {

struct ServeArgs {
  executor::ServeOptions serve;
  std::string trace_events;  // "" = off
  RuntimeFlags runtime;
};

int Fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

int RunServeCommand(ServeArgs args) {
  runtime::TerminationSignals signals;  // before any thread exists (torch, runtime, civetweb inherit the mask)
  if (!args.runtime.stats_json.empty()) {
    return Fail(Status::InvalidArgument("--stats-json is not supported by serve"));
  }
  args.serve.substitution_alpha = args.runtime.substitution_alpha;
  executor::ResolveServeOptions(&args.serve);
  const TraceToFile trace_file(args.trace_events, "zipmoe serve");
  if (!trace_file.status().ok()) return Fail(trace_file.status());
  prometheus::Registry registry;
  metrics::ExecutorMetrics serving(registry);
  executor::SetBuildInfo(&serving);
  metrics::CacheMetrics cache_metrics(registry);
  metrics::EmbeddedRuntimeMetrics runtime_metrics(registry);
  metrics::ActivityMetrics activity_metrics(registry);
  std::atomic<runtime::OffloadExpertProvider*> runtime_provider{nullptr};
  auto refresh = [&runtime_provider, &cache_metrics, &runtime_metrics, &activity_metrics] {
    activity_metrics.Update();
    runtime::OffloadExpertProvider* p = runtime_provider.load();
    if (p == nullptr) return;
    const runtime::RuntimeStats st = p->stats();
    cache_metrics.Update(st.cache);
    runtime_metrics.Update(st, cache_manager::CachePolicyName(p->config().policy));
  };
  auto make_provider = [&args, &runtime_provider]() -> Result<std::unique_ptr<ExpertProvider>> {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::OffloadExpertProvider> provider,
                        CreateRuntime(args.runtime, args.serve.model_dir, args.serve.device,
                                      args.serve.device_assignment == "none", args.serve.device_memory_budget));
    runtime_provider.store(provider.get());
    return std::unique_ptr<ExpertProvider>(std::move(provider));
  };
  const int rc = executor::RunServe(args.serve, make_provider, signals, &registry, &serving, refresh);
  runtime_provider.store(nullptr);
  return rc;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServeArgs>();  // shared: outlives this function, owned by the callback
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  cmd->add_option("--model", args->serve.model_dir, "model directory (Hugging Face checkpoint or compressed)")
      ->required();
  cmd->add_option("--host", args->serve.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->serve.port, "TCP port")->capture_default_str()->check(CLI::Range(1, 65535));
  cmd->add_option("--api-key", args->serve.api_key,
                  "require 'Authorization: Bearer KEY' (except /health, /metrics); default: env ZIPMOE_API_KEY");
  cmd->add_option("--served-model-name", args->serve.served_model_names,
                  "model id(s) listed by /v1/models; default: env ZIPMOE_SERVED_MODEL_NAME (comma-separated), else "
                  "the directory's name");
  cmd->add_option("--threads", args->serve.threads, "compute threads (0 = the physical cores this process may run on)")->capture_default_str();
  AddWeightsMemoryFlags(cmd, &args->serve.weights_memory);
  cmd->add_option("--device", args->serve.device, "cpu, or cuda[:N] with a CUDA libtorch")->capture_default_str();
  cmd->add_option("--device-assignment", args->serve.device_assignment, kDeviceAssignmentHelp)->capture_default_str();
  cmd->add_option("--device-memory-budget", args->serve.device_memory_budget, kDeviceMemoryBudgetHelp);
  cmd->add_option("--trace-events", args->trace_events,
                  "record the server's timeline (layers, expert waits, reads, decodes) as Chrome trace JSON, written "
                  "to FILE when it stops (open it in ui.perfetto.dev)");
  cmd->add_option("--max-batch", args->serve.max_batch, "requests decoded together (continuous batching)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--prefix-cache", args->serve.prefix_cache_mib,
                  "MiB of finished requests' KV caches kept so that a prompt starting with their tokens (a chat's "
                  "history) is not prefilled again; 0 = off")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--kv-budget", args->serve.kv_budget_mib,
                  "MiB the running requests' KV caches may use: prompts wait while it is full, a request that needs "
                  "room preempts the latest admitted one (resumed exactly later), a prompt larger than all of it is a "
                  "400; -1 = auto (half the memory available once the model is loaded, at least 256), 0 = none")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
  AddKvCacheDtypeFlag(cmd, &args->serve.kv_cache_bf16);
  AddSwaFullFlag(cmd, &args->serve.kv_window_full);
  AddPrefillChunkFlag(cmd, &args->serve.prefill_chunk);
  cmd->add_option("--max-waiting", args->serve.max_waiting, "sequences queued for a batch slot before requests get 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--request-grouping", args->serve.request_grouping,
                  "which waiting request gets a free batch slot: none (first come, first served) or coserve "
                  "(those whose predicted experts are cached or in use first, CoServe §4.2; measured in docs/benchmarks.md "
                  "(q))")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "coserve"}));
  cmd->add_option("--group-window", args->serve.group_window,
                  "request grouping looks at this many waiting sequences; none waits more than this many admissions "
                  "beyond its turn")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--http-threads", args->serve.http_threads,
                  "HTTP handler threads: requests handled at once (0 = 2 x max-batch + 32)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--http-read-timeout-ms", args->serve.http_read_timeout_ms,
                  "a connection that moves no byte this long is closed")
      ->capture_default_str()
      ->check(CLI::Range(100, 3600000));
  cmd->add_option("--cors-origin", args->serve.cors_origin, "Access-Control-Allow-Origin ('' = no CORS)")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace-ms", args->serve.shutdown_grace_ms,
                  "on SIGTERM, time the running requests get before they are ended")
      ->capture_default_str()
      ->check(CLI::Range(0, 600000));
  AddRuntimeFlags(cmd, &args->runtime, /*budget_required=*/false);
  cmd->callback([args, exit_code] { *exit_code = RunServeCommand(*args); });
}

}  // namespace zipmoe::cli
