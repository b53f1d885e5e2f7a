// The storage process (`zipmoe service storage`, one of `zipmoe up`'s): the I/O thread that reads
// E/SM-chunks into the shared arena for the scheduler (storage_worker.h), over the pull protocol on
// endpoints.workers; exports the zipmoe_storage_* metrics on metrics.port.storage.
// Threads: call from the process's main thread, after `signals` was constructed and before any other
// thread started (they inherit the signal mask); it blocks until SIGINT/SIGTERM.
// Errors: returns the exit code (0, or 1 after "error: storage: ..." on stderr).
#pragma once

#include "services/service_base/service_config.h"
#include "services/service_base/service_util.h"

namespace zipmoe::storage {

int RunStorageService(const runtime::ServiceConfig& config, runtime::TerminationSignals& signals);

}  // namespace zipmoe::storage
