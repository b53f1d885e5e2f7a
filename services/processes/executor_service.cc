#include "services/processes/executor_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <prometheus/registry.h>

#include "common/build_info.h"
#include "common/checkpoint/manifest.h"
#include "common/file_util.h"
#include "common/metrics_server.h"
#include "common/thread_priority.h"
#include "common/tokenizer/tokenizer.h"
#include "services/api/api_server.h"
#include "services/api/http_server.h"
#include "services/executor/generator.h"
#include "services/links/remote_provider.h"
#include "services/pipeline/runtime_options.h"
#include "services/service_base/service_links.h"
#include "services/service_base/service_metrics.h"

namespace zipmoe::executor {
namespace {

}  // namespace

namespace {

constexpr int kSignalPollMillis = 200;  // how often the main thread checks for signals and a dead listener

int Fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

std::string BaseName(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.find_last_of('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

}  // namespace

std::string ApiKeyOrEnvironment(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* key = std::getenv("ZIPMOE_API_KEY");
  return key != nullptr ? key : "";
}

int DefaultHttpThreads(int64_t max_batch) { return 2 * static_cast<int>(std::max<int64_t>(1, max_batch)) + 32; }

void ResolveServeOptions(ServeOptions* args) {
  args->api_key = ApiKeyOrEnvironment(args->api_key);
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
  if (args->http_threads <= 0) args->http_threads = DefaultHttpThreads(args->max_batch);
}

int RunServe(const ServeOptions& args, const ProviderFactory& make_provider, runtime::TerminationSignals& signals,
             prometheus::Registry* registry, metrics::ExecutorMetrics* metrics, std::function<void()> refresh,
             const std::function<void()>& tick) {
  api::ApiServerOptions api_options;
  api_options.served_model_names = args.served_model_names;
  api_options.api_key = args.api_key;
  api_options.max_batch = args.max_batch;
  api_options.max_waiting = args.max_waiting;
  api_options.group_window = args.group_window;
  {
    Result<scheduler::RequestGrouping> grouping = scheduler::ParseRequestGrouping(args.request_grouping);
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
  http.priority = &api::ApiServer::IsProbe;
  http.on_head = [&server](const api::HttpRequest& head, api::HttpExchange& exchange) {
    server.CheckHead(head, exchange);
  };
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
  if (!args.address_file.empty()) {
    if (Status st = WriteFileAtomic(args.address_file, fmt::format("{}:{}\n", args.host, httpd->port())); !st.ok())
      return fail(st);
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (Tokenizer::DirHasTokenizer(args.model_dir)) {
    Result<std::unique_ptr<Tokenizer>> loaded = Tokenizer::LoadDir(args.model_dir);
    if (!loaded.ok()) return fail(loaded.status());
    tokenizer = std::move(loaded).value();
  }
  GeneratorOptions options;
  options.model_dir = args.model_dir;
  options.n_threads = args.threads;
  options.weights_memory = args.weights_memory;
  options.device = args.device;
  Result<scheduler::DeviceAssignmentMode> assignment = scheduler::ParseDeviceAssignmentMode(args.device_assignment);
  if (!assignment.ok()) return fail(assignment.status());
  options.device_assignment = *assignment;
  if (Status st = runtime::ParseDeviceMemoryBudget(args.device_memory_budget, "device memory budget",
                                                   &options.device_memory_budget_bytes,
                                                   &options.device_memory_budget_percent);
      !st.ok())
    return fail(st);
  options.substitution_alpha = args.substitution_alpha;
  options.prefix_cache_bytes = args.prefix_cache_mib << 20;
  // The KV budget is sized after the model is loaded (what is left then is what caches can use).
  options.kv_budget_bytes = args.kv_budget_mib > 0 ? args.kv_budget_mib << 20 : 0;
  options.kv_cache_bf16 = args.kv_cache_bf16;
  options.kv_window_full = args.kv_window_full;
  options.prefill_chunk = args.prefill_chunk;
  Result<std::unique_ptr<ExpertProvider>> created = make_provider();
  if (!created.ok()) return fail(created.status());
  std::unique_ptr<ExpertProvider> provider = std::move(created).value();
  options.expert_provider = provider.get();
  Result<std::unique_ptr<Generator>> generator = Generator::Create(options);
  if (!generator.ok()) return fail(generator.status());
  if (args.kv_budget_mib < 0) {
    // Auto, measured now that the weights are loaded: half of MemAvailable less the weights still
    // served from file mappings (page cache MemAvailable counts as available; anonymous copies are out
    // of it already), less the prefix cache; at least 256 MiB.
    const int64_t left =
        std::max<int64_t>(0, MemAvailableBytes() - (*generator)->weights_memory().mapped_bytes);
    if (Status st = (*generator)->set_kv_budget_bytes(
            std::max<int64_t>(int64_t{256} << 20, left / 2 - options.prefix_cache_bytes));
        !st.ok())
      return fail(st);
  }
  const int64_t kv_budget_bytes = (*generator)->kv_budget_stats().budget_bytes;
  if (const std::string unused = (*generator)->config().UnusedParts(); !unused.empty())
    std::fprintf(stderr, "I: serve: the checkpoint's %s: not used for decoding, not loaded\n", unused.c_str());
  if (args.weights_memory != WeightsMemory::kMapped)
    std::fprintf(stderr, "%s", WeightsMemoryLine((*generator)->weights_memory()).c_str());
  server.SetLoaded(std::move(tokenizer), std::move(provider), std::move(generator).value());
  std::fprintf(stderr, "%s",
               fmt::format("I: serve: ready on http://{}:{} (up to {} sequences per batch, KV budget {}, prefix cache "
                           "{}, request grouping {})\n",
                           args.host, httpd->port(), std::max(1, args.max_batch),
                           kv_budget_bytes > 0 ? fmt::format("{} MiB", kv_budget_bytes >> 20) : std::string("none"),
                           args.prefix_cache_mib > 0 ? fmt::format("{} MiB", args.prefix_cache_mib) : std::string("off"),
                           api_options.grouping == scheduler::RequestGrouping::kNone
                               ? std::string("none")
                               : fmt::format("{} over {} waiting", scheduler::RequestGroupingName(api_options.grouping),
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

void SetBuildInfo(metrics::ExecutorMetrics* metrics) {
  const BuildInfo& b = GetBuildInfo();
  metrics->SetBuildInfo(b.version, b.commit, b.cuda.empty() ? "none" : b.cuda, TorchVersion());
}

int RunExecutorService(const runtime::ServiceConfig& config, runtime::TerminationSignals& signals) {
  ServeOptions args;
  args.model_dir = config.model_dir;
  args.host = config.http_host;
  args.port = static_cast<int>(config.http_port);
  if (config.http_front) {  // clients talk to the HTTP front, which finds this address in the run dir
    args.host = "127.0.0.1";
    args.port = 0;
    args.address_file = runtime::ExecutorAddressFile(config);
  }
  args.api_key = config.http_api_key;
  args.threads = static_cast<int>(config.threads);
  args.device = config.device;
  args.device_assignment = config.device_assignment;
  args.device_memory_budget = config.device_memory_budget;
  Result<WeightsMemory> weights_memory = ParseWeightsMemory(config.weights_memory, "weights_memory");
  if (!weights_memory.ok()) return Fail(weights_memory.status());
  args.weights_memory = *weights_memory;
  args.max_batch = static_cast<int>(config.http_max_batch);
  args.prefix_cache_mib = config.http_prefix_cache_mib;
  args.kv_budget_mib = config.http_kv_budget_mib;
  Result<bool> kv_bf16 = executor::ParseKvCacheDtype(config.http_kv_cache_dtype, "http.kv_cache_dtype");
  if (!kv_bf16.ok()) return Fail(kv_bf16.status());
  args.kv_cache_bf16 = *kv_bf16;
  args.kv_window_full = config.http_swa_full;
  args.prefill_chunk = config.http_prefill_chunk;
  args.request_grouping = config.http_request_grouping;
  args.group_window = static_cast<int>(config.http_group_window);
  ResolveServeOptions(&args);  // ZIPMOE_API_KEY / ZIPMOE_SERVED_MODEL_NAME when the config sets none
  if (args.max_batch < 1) return Fail(Status::InvalidArgument("executor: http.max_batch must be >= 1"));
  if (args.kv_budget_mib < -1)
    return Fail(Status::InvalidArgument("executor: http.kv_budget_mib must be -1 (auto), 0 (none) or a size in MiB"));
  if (args.prefix_cache_mib < 0)
    return Fail(Status::InvalidArgument("executor: http.prefix_cache_mib must be >= 0 (0 turns prefix reuse off)"));
  if (args.model_dir.empty()) return Fail(Status::InvalidArgument("executor: model_dir is not set"));
  Result<messaging::LinkSecurity> security = runtime::LinkSecurityOf(config, "executor", runtime::ServiceLogger("executor"));
  if (!security.ok()) return Fail(security.status().WithContext("executor"));
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server = runtime::StartMetrics(config, "executor",
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
  return RunServe(args, [&config, &signals, &connected, &security]() -> Result<std::unique_ptr<ExpertProvider>> {
    runtime::RemoteProviderConfig remote;
    remote.endpoint = config.endpoint_scheduler;
    remote.security = *security;
    remote.arena_name = config.shm_name;
    remote.timeout = std::chrono::milliseconds(config.timeout_ms);
    remote.register_with_cuda = true;  // kept only when built with CUDA and a device answers
    ZM_ASSIGN_OR_RETURN(remote.prefetch, runtime::ResolvePrefetch(config.prefetch, config.policy, config.model_dir));
    bool told = false;
    while (true) {  // the arena appears when the cache-manager has planned the cache
      Result<std::unique_ptr<runtime::RemoteExpertProvider>> provider = runtime::RemoteExpertProvider::Connect(remote);
      if (provider.ok()) {
        // Ready (and /health 200) only once the scheduler answers: it has its cache-manager session.
        bool told_scheduler = false;
        while (true) {
          const Status ping = (*provider)->Ping(std::chrono::milliseconds(500));
          if (ping.ok()) break;
          if (!told_scheduler) runtime::ServiceLog("executor", "waiting for the scheduler: " + ping.ToString());
          told_scheduler = true;
          if (signals.Wait(std::chrono::milliseconds(100)) != 0) return Status::Unavailable("stopped while loading");
        }
        std::string link = "ZeroMQ";
        if (config.shm_pipes) {
          const Status piped = (*provider)->OpenPipe(std::chrono::milliseconds(2000));
          if (piped.ok()) {
            link = "a shared-memory pipe";
          } else {
            runtime::ServiceLog("executor", "W: the link to the scheduler stays on ZeroMQ: " + piped.ToString());
          }
        }
        runtime::ServiceLog("executor", fmt::format("connected to the scheduler at {} over {} (arena {})",
                                                    remote.endpoint, link, remote.arena_name));
        // The messages to and from the scheduler pass through ZeroMQ's I/O threads: they run ahead of
        // the compute threads as the pipeline services do (common/thread_priority.h).
        ZM_ASSIGN_OR_RETURN(ThreadPriority want, ParseThreadPriority(config.pipeline_priority, "pipeline_priority"));
        ZM_ASSIGN_OR_RETURN(ThreadPriority level, ResolveThreadPriority(want));
        if (const int raised = RaiseZmqIoThreads(level); raised > 0) {
          runtime::ServiceLog("executor", fmt::format("{} ZeroMQ I/O thread(s) at pipeline priority {}", raised,
                                                      ThreadPriorityName(level)));
        }
        connected.store(provider->get());
        return std::unique_ptr<ExpertProvider>(std::move(provider).value());
      }
      const StatusCode code = provider.status().code();
      if (code != StatusCode::kNotFound && code != StatusCode::kUnavailable) return provider.status();
      if (!told) runtime::ServiceLog("executor", fmt::format("waiting for the arena {}", remote.arena_name));
      told = true;
      if (signals.Wait(std::chrono::milliseconds(200)) != 0) return Status::Unavailable("stopped while loading");
    }
  }, signals, &(*metrics_server)->registry(), &executor_metrics, nullptr, tick);
}

}  // namespace zipmoe::executor
