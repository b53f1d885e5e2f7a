// The scheduler process (`zipmoe service scheduler`, one of `zipmoe up`'s): the OffloadExpertProvider
// (Alg. 1) over the cache-manager's arena (services/links/remote_cache_backend.h), whose reads and
// decodes go to the storage / decompressor processes (services/links/worker_dispatcher.h), serving
// the executor on endpoints.scheduler (services/links/remote_provider.h); exports the
// zipmoe_scheduler_* metrics on metrics.port.scheduler. Exits 1 when the cache-manager drops its
// session, so that `zipmoe up` starts a fresh scheduler.
// Library zipmoe_scheduler_service, apart from zipmoe_scheduler: it composes services/pipeline and
// services/links, which link zipmoe_scheduler.
// Threads: call from the process's main thread, after `signals` was constructed and before any other
// thread started (they inherit the signal mask); it blocks until SIGINT/SIGTERM.
// Errors: returns the exit code (0, or 1 after "error: scheduler: ..." on stderr).
#pragma once

#include "services/service_base/service_config.h"
#include "services/service_base/service_util.h"

namespace zipmoe::scheduler {

int RunSchedulerService(const runtime::ServiceConfig& config, runtime::TerminationSignals& signals);

}  // namespace zipmoe::scheduler
