// `zipmoe serve`: the OpenAI-compatible HTTP API (services/api/api_server.h) over the embedded
// executor, or (`zipmoe service executor`, under `zipmoe up`) over a RemoteExpertProvider.
//
//   zipmoe serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY | env ZIPMOE_API_KEY]
//                [--served-model-name NAME... | env ZIPMOE_SERVED_MODEL_NAME] [--threads N]
//                [--max-batch 8] [--http-threads N] [--http-read-timeout-ms 10000] [--cors-origin '*']
//                [--shutdown-grace-ms 2000] [--device cpu] [--memory-budget B [--policy P] ...]
//
// The server listens first, then loads the model (and, with --memory-budget, the ZipMoE runtime as in
// `zipmoe generate`); until then every route but /health and /metrics answers 503. GET /metrics on
// the same port exports the serving metrics and, with the embedded runtime, its cache, I/O and
// decompression counters. The HTTP worker pool is --http-threads (default 2 x max-batch + 32) so
// /health and /metrics answer while every batch slot is busy and idle connections wait.
// SIGINT/SIGTERM: blocked in every thread (TerminationSignals) and taken by the main thread: new
// requests get 503, the running ones have --shutdown-grace-ms to finish, the rest end (503 / an error
// event), then the process exits 0.
// Torch-free: only the executor's .cc files include torch.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <prometheus/registry.h>

#include "common/build_info.h"
#include "common/file_util.h"
#include "common/metrics_server.h"
#include "common/tokenizer.h"
#include "services/api/api_server.h"
#include "services/api/http_server.h"
#include "services/cli/cli_util.h"
#include "services/cli/commands.h"
#include "services/cli/runtime_flags.h"
#include "services/cli/service_config.h"
#include "services/cli/service_util.h"
#include "services/executor/generator.h"
#include "services/runtime/remote_provider.h"
#include "services/runtime/service_metrics.h"

namespace zipmoe::cli {
namespace {

constexpr int kSignalPollMillis = 200;  // how often the main thread checks for signals and a dead listener

struct ServeArgs {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::vector<std::string> served_model_names;
  int threads = 0;
  std::string device = "cpu";
  std::string device_assignment = "none";
  std::string trace_events;  // "" = off
  int max_batch = 8;  // sequences decoded together (continuous batching); 1 = one at a time
  int max_waiting = 256;  // sequences queued beyond the batch before requests get 429
  int http_threads = 0;  // 0 = 2 x max_batch + 32
  int http_read_timeout_ms = 10000;
  std::string cors_origin = "*";
  int shutdown_grace_ms = 2000;
  std::string request_grouping = "none";  // RequestGrouping name
  int group_window = 8;
  RuntimeFlags runtime;
};

std::string BaseName(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.find_last_of('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

// Fills what the command line left to the environment (ZIPMOE_API_KEY, ZIPMOE_SERVED_MODEL_NAME:
// comma-separated) and the defaults that depend on other flags.
void ResolveServeArgs(ServeArgs* args) {
  if (args->api_key.empty()) {
    if (const char* key = std::getenv("ZIPMOE_API_KEY")) args->api_key = key;
  }
  if (args->served_model_names.empty()) {
    if (const char* names = std::getenv("ZIPMOE_SERVED_MODEL_NAME")) {
      std::string all = names;
      size_t from = 0;
      while (from <= all.size()) {
        const size_t comma = std::min(all.find(',', from), all.size());
        if (comma > from) args->served_model_names.push_back(all.substr(from, comma - from));
        from = comma + 1;
      }
    }
  }
  if (args->served_model_names.empty()) args->served_model_names.push_back(BaseName(args->model_dir));
  if (args->http_threads <= 0) args->http_threads = 2 * std::max(1, args->max_batch) + 32;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

// Creates the expert provider once the HTTP listener is up (nullptr = every expert resident).
using ProviderFactory = std::function<Result<std::unique_ptr<ExpertProvider>>()>;

// Listens first (GET /health answers 503 while loading), then loads tokenizer, provider and model,
// then serves until SIGINT/SIGTERM. `signals` must have been constructed before any thread started.
// `registry`/`metrics`: the registry GET /metrics serializes and the serving metrics on it;
// `refresh`: runs before each scrape; `tick`: about every 200 ms while serving (may be empty).
int RunServe(const ServeArgs& args, const ProviderFactory& make_provider, TerminationSignals& signals,
             prometheus::Registry* registry, metrics::ExecutorMetrics* metrics, std::function<void()> refresh,
             const std::function<void()>& tick = {}) {
  api::ApiServerOptions api_options;
  api_options.served_model_names = args.served_model_names;
  api_options.api_key = args.api_key;
  api_options.max_batch = args.max_batch;
  api_options.max_waiting = args.max_waiting;
  api_options.group_window = args.group_window;
  {
    Result<api::RequestGrouping> grouping = api::ParseRequestGrouping(args.request_grouping);
    if (!grouping.ok()) return Fail(grouping.status().WithContext("--request-grouping"));
    api_options.grouping = *grouping;
  }
  api::ApiServer server(api_options);
  server.SetMetrics(metrics, registry, std::move(refresh));
  api::HttpServerOptions http;
  http.host = args.host;
  http.port = args.port;
  http.threads = args.http_threads;
  http.read_timeout_ms = args.http_read_timeout_ms;
  http.cors_origin = args.cors_origin;
  http.error_body = &api::ApiServer::ErrorBody;
  Result<std::unique_ptr<api::HttpServer>> listening = api::HttpServer::Start(
      http, [&server](const api::HttpRequest& request, api::HttpExchange& exchange) { server.Handle(request, exchange); });
  if (!listening.ok()) return Fail(listening.status());
  std::unique_ptr<api::HttpServer> httpd = std::move(listening).value();
  std::fprintf(stderr, "%s",
               fmt::format("I: serve: listening on http://{}:{} (model {}, served as '{}', {} HTTP workers), loading\n",
                           args.host, httpd->port(), args.model_dir, args.served_model_names.front(), args.http_threads)
                   .c_str());
  auto fail = [&](const Status& status) {
    httpd->Stop();
    return Fail(status);
  };
  const std::string tokenizer_path = JoinPath(args.model_dir, "tokenizer.json");
  std::unique_ptr<Tokenizer> tokenizer;
  if (FileExists(tokenizer_path)) {
    Result<std::unique_ptr<Tokenizer>> loaded = Tokenizer::Load(tokenizer_path);
    if (!loaded.ok()) return fail(loaded.status());
    tokenizer = std::move(loaded).value();
  }
  executor::GeneratorOptions options;
  options.model_dir = args.model_dir;
  options.n_threads = args.threads;
  options.device = args.device;
  Result<scheduler::DeviceAssignmentMode> assignment = scheduler::ParseDeviceAssignmentMode(args.device_assignment);
  if (!assignment.ok()) return fail(assignment.status());
  options.device_assignment = *assignment;
  options.substitution_alpha = args.runtime.substitution_alpha;
  Result<std::unique_ptr<ExpertProvider>> created = make_provider();
  if (!created.ok()) return fail(created.status());
  std::unique_ptr<ExpertProvider> provider = std::move(created).value();
  options.expert_provider = provider.get();
  Result<std::unique_ptr<executor::Generator>> generator = executor::Generator::Create(options);
  if (!generator.ok()) return fail(generator.status());
  server.SetLoaded(std::move(tokenizer), std::move(provider), std::move(generator).value());
  std::fprintf(stderr, "%s",
               fmt::format("I: serve: ready on http://{}:{} (up to {} sequences per batch, request grouping {})\n",
                           args.host, httpd->port(), std::max(1, args.max_batch),
                           api_options.grouping == api::RequestGrouping::kNone
                               ? std::string("none")
                               : fmt::format("{} over {} waiting", api::RequestGroupingName(api_options.grouping),
                                             std::max(1, args.group_window)))
                   .c_str());
  while (signals.Wait(std::chrono::milliseconds(kSignalPollMillis)) == 0) {
    if (tick) tick();
  }
  std::fprintf(stderr, "I: serve: stopping (new requests get 503; %d ms for the running ones)\n",
               args.shutdown_grace_ms);
  server.Drain(std::chrono::milliseconds(args.shutdown_grace_ms));
  server.StopBatching();  // ends what is left, so every handler returns
  httpd->Stop();
  std::fprintf(stderr, "I: serve: stopped\n");
  return 0;
}

// The build_info gauge: version, commit, CUDA toolkit, libtorch.
void SetBuildInfo(metrics::ExecutorMetrics* metrics) {
  const BuildInfo& b = GetBuildInfo();
  metrics->SetBuildInfo(b.version, b.commit, b.cuda.empty() ? "none" : b.cuda, executor::TorchVersion());
}

int RunServeCommand(ServeArgs args) {
  TerminationSignals signals;  // before any thread exists (torch, runtime, civetweb inherit the mask)
  if (!args.runtime.stats_json.empty()) {
    return Fail(Status::InvalidArgument("--stats-json is not supported by serve"));
  }
  ResolveServeArgs(&args);
  const TraceToFile trace_file(args.trace_events, "zipmoe serve");
  prometheus::Registry registry;
  metrics::ExecutorMetrics serving(registry);
  SetBuildInfo(&serving);
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
  const int rc = RunServe(args, [&args, &runtime_provider]() -> Result<std::unique_ptr<ExpertProvider>> {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::OffloadExpertProvider> provider,
                        CreateRuntime(args.runtime, args.model_dir, args.device));
    runtime_provider.store(provider.get());
    return std::unique_ptr<ExpertProvider>(std::move(provider));
  }, signals, &registry, &serving, refresh);
  runtime_provider.store(nullptr);
  return rc;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServeArgs>();  // shared: outlives this function, owned by the callback
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  cmd->add_option("--model", args->model_dir, "model directory (Hugging Face checkpoint or compressed)")
      ->required();
  cmd->add_option("--host", args->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "TCP port")->capture_default_str()->check(CLI::Range(1, 65535));
  cmd->add_option("--api-key", args->api_key,
                  "require 'Authorization: Bearer KEY' (except /health, /metrics); default: env ZIPMOE_API_KEY");
  cmd->add_option("--served-model-name", args->served_model_names,
                  "model id(s) listed by /v1/models; default: env ZIPMOE_SERVED_MODEL_NAME (comma-separated), else "
                  "the directory's name");
  cmd->add_option("--threads", args->threads, "torch threads (0 = hardware concurrency)")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu, or cuda[:N] with a CUDA libtorch")->capture_default_str();
  cmd->add_option("--device-assignment", args->device_assignment, kDeviceAssignmentHelp)->capture_default_str();
  cmd->add_option("--trace-events", args->trace_events,
                  "record the server's timeline (layers, expert waits, reads, decodes) as Chrome trace JSON, written "
                  "to FILE when it stops (open it in ui.perfetto.dev)");
  cmd->add_option("--max-batch", args->max_batch, "requests decoded together (continuous batching)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--max-waiting", args->max_waiting, "sequences queued for a batch slot before requests get 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--request-grouping", args->request_grouping,
                  "which waiting request gets a free batch slot: none (first come, first served) or coserve "
                  "(those whose predicted experts are cached or in use first, CoServe §4.2; measured in docs/benchmarks.md "
                  "(q))")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "coserve"}));
  cmd->add_option("--group-window", args->group_window,
                  "request grouping looks at this many waiting sequences; none waits more than this many admissions "
                  "beyond its turn")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--http-threads", args->http_threads,
                  "HTTP worker threads, one connection each (0 = 2 x max-batch + 32)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--http-read-timeout-ms", args->http_read_timeout_ms,
                  "a connection whose read or write stalls this long is closed")
      ->capture_default_str()
      ->check(CLI::Range(100, 3600000));
  cmd->add_option("--cors-origin", args->cors_origin, "Access-Control-Allow-Origin ('' = no CORS)")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace-ms", args->shutdown_grace_ms,
                  "on SIGTERM, time the running requests get before they are ended")
      ->capture_default_str()
      ->check(CLI::Range(0, 600000));
  AddRuntimeFlags(cmd, &args->runtime, /*budget_required=*/false);
  cmd->callback([args, exit_code] { *exit_code = RunServeCommand(*args); });
}

int RunExecutorService(const ServiceConfig& config, TerminationSignals& signals) {
  ServeArgs args;
  args.model_dir = config.model_dir;
  args.host = config.http_host;
  args.port = static_cast<int>(config.http_port);
  args.api_key = config.http_api_key;
  args.threads = static_cast<int>(config.threads);
  args.device = config.device;
  args.device_assignment = config.device_assignment;
  args.max_batch = static_cast<int>(config.http_max_batch);
  args.request_grouping = config.http_request_grouping;
  args.group_window = static_cast<int>(config.http_group_window);
  ResolveServeArgs(&args);  // ZIPMOE_API_KEY / ZIPMOE_SERVED_MODEL_NAME when the config sets none
  if (args.max_batch < 1) return Fail(Status::InvalidArgument("executor: http.max_batch must be >= 1"));
  if (args.model_dir.empty()) return Fail(Status::InvalidArgument("executor: model_dir is not set"));
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server = StartMetrics(config, "executor",
                                                                               config.metrics_port_executor);
  if (!metrics_server.ok()) return Fail(metrics_server.status());
  metrics::ExecutorMetrics executor_metrics((*metrics_server)->registry());
  SetBuildInfo(&executor_metrics);
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::MessageMetrics message_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  std::atomic<runtime::RemoteExpertProvider*> connected{nullptr};
  auto tick = [&connected, &bad_metrics, &message_metrics, &activity_metrics] {
    activity_metrics.Update();
    if (runtime::RemoteExpertProvider* r = connected.load()) {
      bad_metrics.Set(r->bad_messages());
      const messaging::ChannelStats st = r->channel_stats();
      message_metrics.Set("scheduler", st.sent, st.received);
    }
  };
  return RunServe(args, [&config, &signals, &connected]() -> Result<std::unique_ptr<ExpertProvider>> {
    runtime::RemoteProviderConfig remote;
    remote.endpoint = config.endpoint_scheduler;
    remote.arena_name = config.shm_name;
    remote.timeout = std::chrono::milliseconds(config.timeout_ms);
    remote.register_with_cuda = true;  // kept only when built with CUDA and a device answers
    ZM_ASSIGN_OR_RETURN(remote.prefetch, ResolvePrefetch(config.prefetch, config.policy, config.model_dir));
    bool told = false;
    while (true) {  // the arena appears when the cache-manager has planned the cache
      Result<std::unique_ptr<runtime::RemoteExpertProvider>> provider = runtime::RemoteExpertProvider::Connect(remote);
      if (provider.ok()) {
        // Ready (and /health 200) only once the scheduler answers: it has its cache-manager session.
        bool told_scheduler = false;
        while (true) {
          const Status ping = (*provider)->Ping(std::chrono::milliseconds(500));
          if (ping.ok()) break;
          if (!told_scheduler) ServiceLog("executor", "waiting for the scheduler: " + ping.ToString());
          told_scheduler = true;
          if (signals.Wait(std::chrono::milliseconds(100)) != 0) return Status::Unavailable("stopped while loading");
        }
        ServiceLog("executor", fmt::format("connected to the scheduler at {} (arena {})", remote.endpoint,
                                           remote.arena_name));
        connected.store(provider->get());
        return std::unique_ptr<ExpertProvider>(std::move(provider).value());
      }
      const StatusCode code = provider.status().code();
      if (code != StatusCode::kNotFound && code != StatusCode::kUnavailable) return provider.status();
      if (!told) ServiceLog("executor", fmt::format("waiting for the arena {}", remote.arena_name));
      told = true;
      if (signals.Wait(std::chrono::milliseconds(200)) != 0) return Status::Unavailable("stopped while loading");
    }
  }, signals, &(*metrics_server)->registry(), &executor_metrics, nullptr, tick);
}

}  // namespace zipmoe::cli
