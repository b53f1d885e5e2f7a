#include "services/processes/cache_manager_service.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/checkpoint/expert_store.h"
#include "common/metrics_server.h"
#include "services/cache_manager/plan_trace.h"
#include "services/pipeline/cache_backend.h"
#include "services/pipeline/offload_provider.h"
#include "services/links/cache_server.h"
#include "services/pipeline/runtime_options.h"
#include "services/service_base/service_links.h"
#include "services/service_base/service_metrics.h"

namespace zipmoe::cache_manager {
namespace {

using runtime::FailService;
using runtime::ServiceLog;
using std::chrono::milliseconds;

// One line: the cache-manager's plan (pools and capacities, staging) and its arena.
std::string CacheSummary(const runtime::OffloadConfig& o, runtime::LocalCacheBackend& backend) {
  const CacheCounters counters = backend.manager().Counters();
  std::string pools;
  for (Pool pool : kPoolOrder) {
    const PoolCounters& pc = counters.pools[PoolIndex(pool)];
    if (pc.capacity_bytes > 0) {
      pools += fmt::format(" {}={:.1f}MiB{}", PoolLetter(pool), pc.capacity_bytes / 1048576.0,
                           pool == Pool::kF && o.device_f_pool ? " (on the executor's device)" : "");
    }
  }
  return fmt::format("policy {}, budget {:.1f} MiB, pools{}, {} staging slot(s) of {:.1f} MiB, arena {} ({} bytes)",
                     CachePolicyName(o.policy), o.memory_budget_bytes / 1048576.0, pools.empty() ? " none" : pools,
                     backend.staging_slots(), backend.staging_layout().slot_bytes / 1048576.0, backend.arena_name(),
                     backend.arena_bytes());
}

// The cache this process serves, planned from *offload (its resolved fields written back). With
// `preload`, filled first as embedded mode's --preload fills it: the experts the plan_trace counts
// rank first (by expert id without a trace) are read, decoded and admitted by a runtime of this
// process (OffloadExpertProvider::CreatePreloadedCache), before the server binds.
Result<std::unique_ptr<runtime::LocalCacheBackend>> CreateCache(const std::string& name,
                                                                const runtime::ServiceConfig& c,
                                                                runtime::OffloadConfig* offload) {
  if (!c.preload) {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store, ExpertStore::Open(c.model_dir));
    return runtime::LocalCacheBackend::Create(offload, store->manifest());
  }
  Result<std::map<int32_t, std::map<int32_t, uint64_t>>> counts = ReadActivationCounts(c.plan_trace);
  if (!counts.ok()) return counts.status().WithContext("preload: plan_trace");
  ServiceLog(name, "preloading the cache before serving");
  Result<runtime::OffloadExpertProvider::PreloadedCache> preloaded =
      runtime::OffloadExpertProvider::CreatePreloadedCache(*offload, *counts);
  if (!preloaded.ok()) return preloaded.status().WithContext("preload");
  ServiceLog(name, "preload: " + preloaded->stats.Summary(c.plan_trace.empty() ? "expert id (no plan_trace)"
                                                                                : "plan_trace counts"));
  *offload = std::move(preloaded->config);
  return std::move(preloaded->cache);
}

}  // namespace

int RunCacheManagerService(const runtime::ServiceConfig& c, runtime::TerminationSignals& signals) {
  const std::string name = "cache-manager";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      runtime::StartMetrics(c, name, c.metrics_port_cache_manager);
  if (!metrics_server.ok()) return FailService(name, metrics_server.status());
  metrics::CacheMetrics cache_metrics((*metrics_server)->registry());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  metrics::LinkMetrics link_metrics((*metrics_server)->registry(), {c.endpoint_cache_manager});
  if (c.model_dir.empty()) return FailService(name, Status::InvalidArgument("model_dir is not set"));
  Result<messaging::LinkSecurity> security = runtime::LinkSecurityOf(c, name, runtime::ServiceLogger(name));
  if (!security.ok()) return FailService(name, security.status());
  Result<runtime::OffloadConfig> offload = runtime::ToOffloadConfig(runtime::RuntimeFlagsOf(c), c.model_dir);
  if (!offload.ok()) return FailService(name, offload.status());
  offload->shm_name = c.shm_name;
  // Pool F in the GPU executor's device memory (issue 36 item 1), decided here as in embedded mode: the
  // executor learns the slot count from the scheduler and owns the memory.
  Result<bool> device_f = runtime::ConfigureDeviceFPool(&*offload, c.device, c.device_assignment == "none",
                                                        c.device_memory_budget, "device_memory_budget");
  if (!device_f.ok()) return FailService(name, device_f.status());
  if (!*device_f && c.device != "cpu" && c.device_assignment == "none") {
    ServiceLog(name, fmt::format("pool F stays in the arena, the executor ({}) keeps its own device tier: no CUDA device "
                                 "is visible to this process, or the model is encoder-decoder",
                                 c.device));
  }
  Result<std::unique_ptr<runtime::LocalCacheBackend>> created = CreateCache(name, c, &*offload);
  if (!created.ok()) return FailService(name, created.status());
  std::unique_ptr<runtime::LocalCacheBackend> backend = std::move(created).value();
  zmq::context_t context(1);
  // Before the server binds, destroyed after it stops (declared after the context: destroyed before it).
  Result<std::unique_ptr<messaging::LinkGuard>> guard =
      runtime::StartLinkGuard(context, &*security, runtime::ServiceLogger(name));
  if (!guard.ok()) return FailService(name, guard.status());
  runtime::CacheServerConfig server_config;
  server_config.security = *security;
  server_config.endpoint = c.endpoint_cache_manager;
  server_config.heartbeat_interval = milliseconds(c.heartbeat_ms);
  server_config.liveness = static_cast<int>(c.liveness);
  server_config.log = runtime::ServiceLogger(name);
  Result<std::unique_ptr<runtime::CacheServer>> server =
      runtime::CacheServer::Start(context, server_config, backend.get());
  if (!server.ok()) return FailService(name, server.status());
  ServiceLog(name, fmt::format("ready: {}; scheduler at {}", CacheSummary(*offload, *backend), (*server)->endpoint()));
  do {
    cache_metrics.Update(backend->manager().Counters());
    bad_metrics.Set((*server)->stats().bad_messages);
    if (*guard != nullptr) link_metrics.Set((*guard)->refusals());
    activity_metrics.Update();
  } while (signals.Wait(milliseconds(1000)) == 0);
  ServiceLog(name, "stopping");
  (*server)->Stop();
  server->reset();
  backend.reset();  // unmaps and removes the arena
  return 0;
}

}  // namespace zipmoe::cache_manager
