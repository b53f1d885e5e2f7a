#include "services/processes/storage_service.h"

#include <memory>
#include <string>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/checkpoint/expert_store.h"
#include "common/metrics_server.h"
#include "common/ipc/shm_region.h"
#include "services/service_base/service_links.h"
#include "services/service_base/service_metrics.h"
#include "services/storage/storage_worker.h"

namespace zipmoe::storage {

using runtime::FailService;
using runtime::ServiceLog;

int RunStorageService(const runtime::ServiceConfig& c, runtime::TerminationSignals& signals) {
  const std::string name = "storage";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      runtime::StartMetrics(c, name, c.metrics_port_storage);
  if (!metrics_server.ok()) return FailService(name, metrics_server.status());
  metrics::StorageMetrics storage_metrics((*metrics_server)->registry());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  Result<messaging::LinkSecurity> security = runtime::LinkSecurityOf(c, name, runtime::ServiceLogger(name));
  if (!security.ok()) return FailService(name, security.status());
  Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(c.model_dir);
  if (!store.ok()) return FailService(name, store.status());
  Result<ShmRegion> arena = runtime::AttachArena(name, c.shm_name, signals);
  if (!arena.ok()) return FailService(name, arena.status());
  zmq::context_t context(1);
  StorageWorkerOptions options;
  options.pull = runtime::PullConfig(c, name);
  options.pull.security = *security;
  options.experts_path = (*store)->experts_path();
  options.page_cache = c.page_cache;
  options.queue_depth = static_cast<int32_t>(c.storage_queue_depth);
  options.on_read = [&storage_metrics](ChunkKind kind, uint64_t bytes, double seconds, bool ok) {
    if (ok) storage_metrics.ObserveRead(kind == ChunkKind::kE, bytes, seconds);
  };
  Result<std::unique_ptr<StorageWorker>> worker = StorageWorker::Create(context, *arena, options);
  if (!worker.ok()) return FailService(name, worker.status());
  ServiceLog(name, fmt::format("reading {} ({}) into arena {}", options.experts_path,
                               (*worker)->direct_io() ? "O_DIRECT" : "page cache", c.shm_name));
  StorageWorker* w = worker->get();
  return runtime::RunPullWorker(name, *w, signals, [&] {
    storage_metrics.SetQueueDepth(static_cast<double>(w->queued()));
    bad_metrics.Set(w->stats().bad_messages);
    activity_metrics.Update();
  });
}

}  // namespace zipmoe::storage
