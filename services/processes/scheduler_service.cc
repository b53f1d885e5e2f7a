#include "services/processes/scheduler_service.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/metrics_server.h"
#include "services/pipeline/cache_backend.h"
#include "services/pipeline/offload_provider.h"
#include "services/links/remote_cache_backend.h"
#include "services/links/remote_provider.h"
#include "services/pipeline/runtime_options.h"
#include "services/service_base/service_links.h"
#include "services/service_base/service_metrics.h"
#include "services/links/worker_dispatcher.h"

namespace zipmoe::scheduler {

using runtime::FailService;
using runtime::ServiceLog;
using std::chrono::milliseconds;

int RunSchedulerService(const runtime::ServiceConfig& c, runtime::TerminationSignals& signals) {
  const std::string name = "scheduler";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      runtime::StartMetrics(c, name, c.metrics_port_scheduler);
  if (!metrics_server.ok()) return FailService(name, metrics_server.status());
  metrics::SchedulerMetrics scheduler_metrics((*metrics_server)->registry());
  metrics::EmbeddedRuntimeMetrics runtime_metrics((*metrics_server)->registry());  // I/O, workers, prefetch
  metrics::MessageMetrics message_metrics((*metrics_server)->registry());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  metrics::LinkMetrics link_metrics((*metrics_server)->registry(), {c.endpoint_scheduler, c.endpoint_workers});
  if (c.model_dir.empty()) return FailService(name, Status::InvalidArgument("model_dir is not set"));
  Result<messaging::LinkSecurity> security = runtime::LinkSecurityOf(c, name, runtime::ServiceLogger(name));
  if (!security.ok()) return FailService(name, security.status());
  Result<runtime::OffloadConfig> offload = runtime::ToOffloadConfig(runtime::RuntimeFlagsOf(c), c.model_dir);
  if (!offload.ok()) return FailService(name, offload.status());
  // The executor recovers missed experts itself from their E/SM planes (ExpertReady carries the
  // plane offsets): the CPU executor inside its matmul, the GPU executor with the recovery kernel
  // reading the registered arena in place. No recovery op here; the cache-manager recovers BF16
  // only for F admissions.
  offload->fused_recovery = !c.separate_recovery;
  zmq::context_t context(1);
  // Before the servers bind, destroyed after they stop (declared after the context: destroyed before it).
  Result<std::unique_ptr<messaging::LinkGuard>> guard =
      runtime::StartLinkGuard(context, &*security, runtime::ServiceLogger(name));
  if (!guard.ok()) return FailService(name, guard.status());
  runtime::DispatcherConfig dispatch;
  dispatch.security = *security;
  dispatch.endpoint = c.endpoint_workers;
  dispatch.heartbeat_interval = milliseconds(c.heartbeat_ms);
  dispatch.liveness = static_cast<int>(c.liveness);
  dispatch.direct_io = !c.page_cache;
  dispatch.log = runtime::ServiceLogger(name);
  std::shared_ptr<runtime::WorkerDispatcher> dispatcher;
  offload->shm_name = c.shm_name;
  offload->engines = runtime::RemoteEngineFactory(context, dispatch, &dispatcher);
  runtime::RemoteCacheConfig cache_config;
  cache_config.endpoint = c.endpoint_cache_manager;
  cache_config.arena_name = c.shm_name;
  cache_config.timeout = milliseconds(c.timeout_ms);
  cache_config.heartbeat_interval = milliseconds(c.heartbeat_ms);
  cache_config.keep_waiting = [&signals] { return signals.Wait(milliseconds(0)) == 0; };
  cache_config.log = runtime::ServiceLogger(name);
  cache_config.pipe = c.shm_pipes;
  cache_config.security = *security;
  offload->cache = runtime::RemoteCacheBackendFactory(cache_config);
  offload->on_layer_end = [&scheduler_metrics](int32_t, double makespan_us, double bound_us) {
    scheduler_metrics.ObserveLayer(makespan_us * 1e-6, bound_us > 0 ? makespan_us / bound_us : 0.0);
  };
  Result<std::unique_ptr<runtime::OffloadExpertProvider>> created = runtime::OffloadExpertProvider::Create(*offload);
  if (!created.ok()) return FailService(name, created.status());
  std::unique_ptr<runtime::OffloadExpertProvider> provider = std::move(created).value();
  runtime::CacheBackend& cache = provider->cache_backend();
  const auto* remote_cache = dynamic_cast<const runtime::RemoteCacheBackend*>(&cache);
  runtime::ProviderServerConfig server_config;
  server_config.endpoint = c.endpoint_scheduler;
  server_config.log = runtime::ServiceLogger(name);
  server_config.security = *security;
  Result<std::unique_ptr<runtime::ProviderServer>> server = runtime::ProviderServer::Start(
      context, server_config, provider.get(), cache.arena_base(), cache.arena_bytes());
  if (!server.ok()) return FailService(name, server.status());
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
    if (*guard != nullptr) link_metrics.Set((*guard)->refusals());
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

}  // namespace zipmoe::scheduler
