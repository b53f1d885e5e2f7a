// `zipmoe service NAME [--config FILE] [--set key=value]...`: one zipmoe service as its own process
// (services issue; docs/services.md). NAME:
//   cache-manager the arena owner: plans the pools (planner), creates the shared arena (shm_name,
//                 0600, removed on clean exit, reclaimed after a crash) and serves the CacheManager on
//                 endpoints.cache_manager (cache_server.h); exports the zipmoe_cache_* metrics
//   scheduler     OffloadExpertProvider (Alg. 1) over the cache-manager (remote_cache_backend.h),
//                 whose reads and decodes go to storage/decompressor processes (worker_dispatcher.h),
//                 serving the executor over endpoints.scheduler (remote_provider.h)
//   storage       the I/O thread: chunk reads into the shared arena (storage_worker.h)
//   decompressor  L decode/recovery threads (decompressor_worker.h); run N replicas
//   executor      the model (libtorch) + the OpenAI-style HTTP API on http.host:http.port
// Configuration: service_config.h (file, then ZIPMOE_* environment, then --set).
// SIGINT/SIGTERM stop the service cleanly (a worker tells the scheduler, which re-issues its ops).
#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/expert_store.h"
#include "common/metrics_server.h"
#include "common/shm_region.h"
#include "services/cli/cli_util.h"
#include "services/cli/commands.h"
#include "services/cli/runtime_flags.h"
#include "services/cli/service_config.h"
#include "services/cli/service_util.h"
#include "services/decompressor/decompressor_worker.h"
#include "services/runtime/cache_backend.h"
#include "services/runtime/cache_server.h"
#include "services/runtime/offload_provider.h"
#include "services/runtime/remote_cache_backend.h"
#include "services/runtime/remote_provider.h"
#include "services/runtime/service_metrics.h"
#include "services/runtime/worker_dispatcher.h"
#include "services/storage/storage_worker.h"

extern char** environ;

namespace zipmoe::cli {
namespace {

using std::chrono::milliseconds;

int Fail(const std::string& service, const Status& status) {
  std::fprintf(stderr, "error: %s: %s\n", service.c_str(), status.ToString().c_str());
  return 1;
}

RuntimeFlags FlagsOf(const ServiceConfig& c) {
  RuntimeFlags f;
  f.memory_budget = c.memory_budget;
  f.policy = c.policy;
  f.prefetch = c.prefetch;
  f.pools = c.pools;
  f.pool_ratios = c.pool_ratios;
  f.plan_trace = c.plan_trace;
  f.profile = c.profile;
  f.decompress_threads = static_cast<int>(c.decompress_threads);
  f.staging_slots = static_cast<uint32_t>(c.staging_slots);
  f.page_cache = c.page_cache;
  f.fifo_dispatch = c.fifo_dispatch;
  f.no_verify_recovery = !c.verify_recovery;
  f.separate_recovery = c.separate_recovery;
  return f;
}

}  // namespace

Result<std::unique_ptr<metrics::MetricsServer>> StartMetrics(const ServiceConfig& c, const std::string& service,
                                                             int64_t port) {
  metrics::MetricsServerConfig m;
  m.service = service;
  m.host = c.metrics_host;
  m.port = static_cast<int>(port);
  m.sd_dir = c.metrics_sd_dir;
  Result<std::unique_ptr<metrics::MetricsServer>> server = metrics::MetricsServer::Start(m);
  if (!server.ok() && m.port > 0) {
    // A service without its /metrics endpoint still serves: log it and keep the registry only.
    ServiceLog(service, "E: no /metrics endpoint: " + server.status().ToString());
    m.port = 0;
    server = metrics::MetricsServer::Start(m);
  }
  if (server.ok() && (*server)->port() > 0) ServiceLog(service, "metrics at " + (*server)->url());
  return server;
}

namespace {

// One line: the cache-manager's plan (pools and capacities, staging) and its arena.
std::string CacheSummary(const runtime::OffloadConfig& o, runtime::LocalCacheBackend& backend) {
  namespace cm = cache_manager;
  const cm::CacheCounters counters = backend.manager().Counters();
  std::string pools;
  for (cm::Pool pool : cm::kPoolOrder) {
    const cm::PoolCounters& pc = counters.pools[cm::PoolIndex(pool)];
    if (pc.capacity_bytes > 0) pools += fmt::format(" {}={:.1f}MiB", cm::PoolLetter(pool), pc.capacity_bytes / 1048576.0);
  }
  return fmt::format("policy {}, budget {:.1f} MiB, pools{}, {} staging slot(s) of {:.1f} MiB, arena {} ({} bytes)",
                     cm::CachePolicyName(o.policy), o.memory_budget_bytes / 1048576.0, pools.empty() ? " none" : pools,
                     backend.staging_slots(), backend.staging_layout().slot_bytes / 1048576.0, backend.arena_name(),
                     backend.arena_bytes());
}

int RunCacheManager(const ServiceConfig& c, TerminationSignals& signals) {
  const std::string name = "cache-manager";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      StartMetrics(c, name, c.metrics_port_cache_manager);
  if (!metrics_server.ok()) return Fail(name, metrics_server.status());
  metrics::CacheMetrics cache_metrics((*metrics_server)->registry());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  if (c.model_dir.empty()) return Fail(name, Status::InvalidArgument("model_dir is not set"));
  Result<runtime::OffloadConfig> offload = ToOffloadConfig(FlagsOf(c), c.model_dir);
  if (!offload.ok()) return Fail(name, offload.status());
  offload->shm_name = c.shm_name;
  Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(c.model_dir);
  if (!store.ok()) return Fail(name, store.status());
  Result<std::unique_ptr<runtime::LocalCacheBackend>> created =
      runtime::LocalCacheBackend::Create(&*offload, (*store)->manifest());
  if (!created.ok()) return Fail(name, created.status());
  std::unique_ptr<runtime::LocalCacheBackend> backend = std::move(created).value();
  zmq::context_t context(1);
  runtime::CacheServerConfig server_config;
  server_config.endpoint = c.endpoint_cache_manager;
  server_config.heartbeat_interval = milliseconds(c.heartbeat_ms);
  server_config.liveness = static_cast<int>(c.liveness);
  server_config.log = ServiceLogger(name);
  Result<std::unique_ptr<runtime::CacheServer>> server =
      runtime::CacheServer::Start(context, server_config, backend.get());
  if (!server.ok()) return Fail(name, server.status());
  ServiceLog(name, fmt::format("ready: {}; scheduler at {}", CacheSummary(*offload, *backend), (*server)->endpoint()));
  do {
    cache_metrics.Update(backend->manager().Counters());
    bad_metrics.Set((*server)->stats().bad_messages);
    activity_metrics.Update();
  } while (signals.Wait(milliseconds(1000)) == 0);
  ServiceLog(name, "stopping");
  (*server)->Stop();
  server->reset();
  backend.reset();  // unmaps and removes the arena
  return 0;
}

int RunScheduler(const ServiceConfig& c, TerminationSignals& signals) {
  const std::string name = "scheduler";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server = StartMetrics(c, name, c.metrics_port_scheduler);
  if (!metrics_server.ok()) return Fail(name, metrics_server.status());
  metrics::SchedulerMetrics scheduler_metrics((*metrics_server)->registry());
  metrics::EmbeddedRuntimeMetrics runtime_metrics((*metrics_server)->registry());  // I/O, workers, prefetch
  metrics::MessageMetrics message_metrics((*metrics_server)->registry());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  if (c.model_dir.empty()) return Fail(name, Status::InvalidArgument("model_dir is not set"));
  Result<runtime::OffloadConfig> offload = ToOffloadConfig(FlagsOf(c), c.model_dir);
  if (!offload.ok()) return Fail(name, offload.status());
  // A CPU executor multiplies missed experts straight from their E/SM planes (ExpertReady carries
  // the plane offsets): no recovery op, and the cache-manager recovers BF16 only for F admissions.
  offload->fused_recovery = !c.separate_recovery && c.device == "cpu";
  zmq::context_t context(1);
  runtime::DispatcherConfig dispatch;
  dispatch.endpoint = c.endpoint_workers;
  dispatch.heartbeat_interval = milliseconds(c.heartbeat_ms);
  dispatch.liveness = static_cast<int>(c.liveness);
  dispatch.direct_io = !c.page_cache;
  dispatch.log = ServiceLogger(name);
  std::shared_ptr<runtime::WorkerDispatcher> dispatcher;
  offload->shm_name = c.shm_name;
  offload->engines = runtime::RemoteEngineFactory(context, dispatch, &dispatcher);
  runtime::RemoteCacheConfig cache_config;
  cache_config.endpoint = c.endpoint_cache_manager;
  cache_config.arena_name = c.shm_name;
  cache_config.timeout = milliseconds(c.timeout_ms);
  cache_config.heartbeat_interval = milliseconds(c.heartbeat_ms);
  cache_config.keep_waiting = [&signals] { return signals.Wait(milliseconds(0)) == 0; };
  cache_config.log = ServiceLogger(name);
  offload->cache = runtime::RemoteCacheBackendFactory(cache_config);
  offload->on_layer_end = [&scheduler_metrics](int32_t, double makespan_us, double bound_us) {
    scheduler_metrics.ObserveLayer(makespan_us * 1e-6, bound_us > 0 ? makespan_us / bound_us : 0.0);
  };
  Result<std::unique_ptr<runtime::OffloadExpertProvider>> created = runtime::OffloadExpertProvider::Create(*offload);
  if (!created.ok()) return Fail(name, created.status());
  std::unique_ptr<runtime::OffloadExpertProvider> provider = std::move(created).value();
  runtime::CacheBackend& cache = provider->cache_backend();
  const auto* remote_cache = dynamic_cast<const runtime::RemoteCacheBackend*>(&cache);
  runtime::ProviderServerConfig server_config;
  server_config.endpoint = c.endpoint_scheduler;
  server_config.log = ServiceLogger(name);
  Result<std::unique_ptr<runtime::ProviderServer>> server = runtime::ProviderServer::Start(
      context, server_config, provider.get(), cache.arena_base(), cache.arena_bytes());
  if (!server.ok()) return Fail(name, server.status());
  ServiceLog(name, fmt::format("ready: arena {} ({} bytes, {} staging slots) of the cache-manager at {}, {} "
                               "decompression thread(s) planned, {}, workers at {}, executor at {}",
                               cache.arena_name(), cache.arena_bytes(), cache.staging_slots(),
                               c.endpoint_cache_manager, provider->config().n_workers,
                               provider->config().scheduler ? "Alg. 1" : "FIFO dispatch", dispatcher->endpoint(),
                               (*server)->endpoint()));
  do {
    const runtime::DispatcherStats d = dispatcher->stats();
    scheduler_metrics.SetDecompressors(d.decompressors);
    scheduler_metrics.SetQueueDepth("read", static_cast<double>(d.reads_waiting + d.reads_in_flight));
    scheduler_metrics.SetQueueDepth("decode", static_cast<double>(d.decodes_waiting + d.decodes_in_flight));
    runtime_metrics.Update(provider->local_stats(), cache_manager::CachePolicyName(provider->config().policy));
    activity_metrics.Update();
    if (remote_cache != nullptr) {
      const messaging::ChannelStats st = remote_cache->channel_stats();
      message_metrics.Set("cache-manager", st.sent, st.received);
    }
    bad_metrics.Set(d.bad_messages + (*server)->stats().bad_messages +
                    (remote_cache != nullptr ? remote_cache->bad_messages() : 0));
    if (remote_cache != nullptr && remote_cache->session_lost()) {
      // Leases and staging slots are gone with the session: exit, and `zipmoe up` starts a fresh
      // scheduler that says hello again (the executor and the workers reconnect to it).
      ServiceLog(name, "E: the cache-manager dropped this scheduler's session (missed heartbeats?): exiting");
      provider->Shutdown();
      (*server)->Stop();
      return 1;
    }
  } while (signals.Wait(milliseconds(200)) == 0);
  const runtime::PrefetchTotals pf = provider->local_stats().prefetch;
  ServiceLog(name, fmt::format("stopping (prefetch {}: {} predicted, {} issued, {} used, {} wasted)",
                               PrefetchModeName(provider->config().prefetch), pf.predicted, pf.issued, pf.used,
                               pf.wasted));
  provider->Shutdown();
  (*server)->Stop();
  server->reset();
  provider.reset();
  return 0;
}

// Attaches the shared arena, waiting for its creator (the cache-manager) until a signal arrives.
Result<ShmRegion> AttachArena(const std::string& service, const std::string& shm_name, TerminationSignals& signals) {
  bool told = false;
  while (true) {
    Result<ShmRegion> arena = ShmRegion::Attach(shm_name);
    if (arena.ok()) return arena;
    const StatusCode code = arena.status().code();
    if (code != StatusCode::kNotFound && code != StatusCode::kUnavailable) return arena.status();
    if (!told) ServiceLog(service, fmt::format("waiting for the arena {} ({})", shm_name, arena.status().message()));
    told = true;
    if (signals.Wait(milliseconds(200)) != 0) return Status::Unavailable("stopped while waiting for the arena");
  }
}

template <typename Worker>
int RunWorker(const std::string& name, Worker& worker, TerminationSignals& signals,
              const std::function<void()>& every_second) {
  Status result;
  std::thread loop([&] { result = worker.Run(); });
  do {
    every_second();
  } while (signals.Wait(milliseconds(1000)) == 0);
  ServiceLog(name, "stopping");
  worker.RequestStop();
  loop.join();
  if (!result.ok()) return Fail(name, result);
  return 0;
}

messaging::PullWorkerConfig PullConfig(const ServiceConfig& c, const std::string& role) {
  messaging::PullWorkerConfig pull;
  pull.endpoint = c.endpoint_workers;
  pull.identity = fmt::format("{}-{}-{}", role, HostName(), static_cast<long>(::getpid()));
  pull.heartbeat_interval = milliseconds(c.heartbeat_ms);
  pull.liveness = static_cast<int>(c.liveness);
  pull.log = ServiceLogger(role);
  return pull;
}

int RunStorage(const ServiceConfig& c, TerminationSignals& signals) {
  const std::string name = "storage";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server = StartMetrics(c, name, c.metrics_port_storage);
  if (!metrics_server.ok()) return Fail(name, metrics_server.status());
  metrics::StorageMetrics storage_metrics((*metrics_server)->registry());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(c.model_dir);
  if (!store.ok()) return Fail(name, store.status());
  Result<ShmRegion> arena = AttachArena(name, c.shm_name, signals);
  if (!arena.ok()) return Fail(name, arena.status());
  zmq::context_t context(1);
  storage::StorageWorkerOptions options;
  options.pull = PullConfig(c, name);
  options.experts_path = (*store)->experts_path();
  options.page_cache = c.page_cache;
  options.queue_depth = static_cast<int32_t>(c.storage_queue_depth);
  options.on_read = [&storage_metrics](ChunkKind kind, uint64_t bytes, double seconds, bool ok) {
    if (ok) storage_metrics.ObserveRead(kind == ChunkKind::kE, bytes, seconds);
  };
  Result<std::unique_ptr<storage::StorageWorker>> worker = storage::StorageWorker::Create(context, *arena, options);
  if (!worker.ok()) return Fail(name, worker.status());
  ServiceLog(name, fmt::format("reading {} ({}) into arena {}", options.experts_path,
                               (*worker)->direct_io() ? "O_DIRECT" : "page cache", c.shm_name));
  storage::StorageWorker* w = worker->get();
  return RunWorker(name, *w, signals, [&] {
    storage_metrics.SetQueueDepth(static_cast<double>(w->queued()));
    bad_metrics.Set(w->stats().bad_messages);
    activity_metrics.Update();
  });
}

int RunDecompressor(const ServiceConfig& c, TerminationSignals& signals) {
  const std::string name = "decompressor";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      StartMetrics(c, name, c.metrics_port_decompressor);
  if (!metrics_server.ok()) return Fail(name, metrics_server.status());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  Result<ShmRegion> arena = AttachArena(name, c.shm_name, signals);
  if (!arena.ok()) return Fail(name, arena.status());
  zmq::context_t context(1);
  decompressor::DecompressorWorkerOptions options;
  options.pull = PullConfig(c, name);
  options.n_threads = static_cast<int>(c.decompress_threads);
  options.queue_depth = static_cast<int>(c.decompress_queue_depth);
  metrics::DecompressorMetrics decompressor_metrics((*metrics_server)->registry(), options.pull.identity,
                                                    options.n_threads);
  options.on_op = [&decompressor_metrics](bool recover, double seconds) {
    decompressor_metrics.ObserveOp(recover, seconds);
  };
  Result<std::unique_ptr<decompressor::DecompressorWorker>> worker =
      decompressor::DecompressorWorker::Create(context, *arena, options);
  if (!worker.ok()) return Fail(name, worker.status());
  ServiceLog(name, fmt::format("{} threads on arena {}", options.n_threads, c.shm_name));
  decompressor::DecompressorWorker* w = worker->get();
  return RunWorker(name, *w, signals, [&] {
    bad_metrics.Set(w->stats().bad_messages);
    activity_metrics.Update();
  });
}

struct ServiceArgs {
  std::string name;
  std::string config_file;
  std::vector<std::string> sets;
};

int RunService(const ServiceArgs& args) {
  TerminationSignals signals;  // blocks SIGINT/SIGTERM before any thread starts
  Result<ServiceConfig> config = LoadServiceConfig(args.config_file, args.sets, environ);
  if (!config.ok()) return Fail(args.name, config.status());
  if (const std::string& cpus = CpuAffinityOf(*config, args.name); !cpus.empty()) {
    // Before any thread starts, so every thread of the service inherits it.
    if (Status st = PinToCpus(cpus, args.name); !st.ok()) return Fail(args.name, st);
  }
  using Runner = int (*)(const ServiceConfig&, TerminationSignals&);
  Runner run = nullptr;
  if (args.name == "cache-manager") {
    run = RunCacheManager;
  } else if (args.name == "scheduler") {
    run = RunScheduler;
  } else if (args.name == "storage") {
    run = RunStorage;
  } else if (args.name == "decompressor") {
    run = RunDecompressor;
  } else if (args.name == "executor") {
    run = RunExecutorService;
  } else {
    return Fail(args.name, Status::InvalidArgument("unknown service"));
  }
  const std::string& prefix = config->trace_events;
  const TraceToFile trace_file(prefix.empty() ? std::string() : TraceFileOf(prefix, args.name, ::getpid()), args.name);
  return run(*config, signals);
}

}  // namespace

void AddServiceCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServiceArgs>();
  CLI::App* cmd = app.add_subcommand("service", "run one zipmoe service as its own process (zipmoe up, compose)");
  cmd->add_option("name", args->name, "cache-manager | scheduler | storage | decompressor | executor")
      ->required()
      ->check(CLI::IsMember({"cache-manager", "scheduler", "storage", "decompressor", "executor"}));
  cmd->add_option("--config", args->config_file, "JSON config file (docs/services.md); ZIPMOE_* variables override it");
  cmd->add_option("--set", args->sets, "key=value, overrides file and environment (repeatable)");
  cmd->callback([args, exit_code] { *exit_code = RunService(*args); });
}

}  // namespace zipmoe::cli
