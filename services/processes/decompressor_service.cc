#include "services/processes/decompressor_service.h"

#include <memory>
#include <string>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/metrics_server.h"
#include "common/ipc/shm_region.h"
#include "services/decompressor/decompressor_worker.h"
#include "services/service_base/service_links.h"
#include "services/service_base/service_metrics.h"

namespace zipmoe::decompressor {

using runtime::FailService;
using runtime::ServiceLog;

int RunDecompressorService(const runtime::ServiceConfig& c, runtime::TerminationSignals& signals) {
  const std::string name = "decompressor";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      runtime::StartMetrics(c, name, c.metrics_port_decompressor);
  if (!metrics_server.ok()) return FailService(name, metrics_server.status());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  metrics::ActivityMetrics activity_metrics((*metrics_server)->registry());
  Result<messaging::LinkSecurity> security = runtime::LinkSecurityOf(c, name, runtime::ServiceLogger(name));
  if (!security.ok()) return FailService(name, security.status());
  Result<ShmRegion> arena = runtime::AttachArena(name, c.shm_name, signals);
  if (!arena.ok()) return FailService(name, arena.status());
  zmq::context_t context(1);
  DecompressorWorkerOptions options;
  options.pull = runtime::PullConfig(c, name);
  options.pull.security = *security;
  options.n_threads = static_cast<int>(c.decompress_threads);
  options.queue_depth = static_cast<int>(c.decompress_queue_depth);
  metrics::DecompressorMetrics decompressor_metrics((*metrics_server)->registry(), options.pull.identity,
                                                    options.n_threads);
  options.on_op = [&decompressor_metrics](bool recover, double seconds) {
    decompressor_metrics.ObserveOp(recover, seconds);
  };
  Result<std::unique_ptr<DecompressorWorker>> worker = DecompressorWorker::Create(context, *arena, options);
  if (!worker.ok()) return FailService(name, worker.status());
  ServiceLog(name, fmt::format("{} threads on arena {}", options.n_threads, c.shm_name));
  DecompressorWorker* w = worker->get();
  return runtime::RunPullWorker(name, *w, signals, [&] {
    bad_metrics.Set(w->stats().bad_messages);
    activity_metrics.Update();
  });
}

}  // namespace zipmoe::decompressor
