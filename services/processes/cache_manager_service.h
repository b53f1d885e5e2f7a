// The cache-manager process (`zipmoe service cache-manager`, one of `zipmoe up`'s): the arena owner.
// It plans the pools (planner.h), creates the shared arena (shm_name, 0600, removed on clean exit,
// reclaimed after a crash) and serves the CacheManager to the scheduler on endpoints.cache_manager
// (services/links/cache_server.h); exports the zipmoe_cache_* metrics on metrics.port.cache_manager.
// Library zipmoe_cache_manager_service, apart from zipmoe_cache_manager: it composes services/links
// (over services/pipeline), which itself links zipmoe_cache_manager.
// Threads: call from the process's main thread, after `signals` was constructed and before any other
// thread started (they inherit the signal mask); it blocks until SIGINT/SIGTERM.
// Errors: returns the exit code (0, or 1 after "error: cache-manager: ..." on stderr).
#pragma once

#include "services/service_base/service_config.h"
#include "services/service_base/service_util.h"

namespace zipmoe::cache_manager {

int RunCacheManagerService(const runtime::ServiceConfig& config, runtime::TerminationSignals& signals);

}  // namespace zipmoe::cache_manager
