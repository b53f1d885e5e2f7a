// The decompressor process (`zipmoe service decompressor`; `zipmoe up` runs N replicas): L
// decode/recovery threads on the shared arena (decompressor_worker.h), fed by the scheduler over the
// pull protocol on endpoints.workers; exports the zipmoe_decompressor_* metrics on
// metrics.port.decompressor.
// Threads: call from the process's main thread, after `signals` was constructed and before any other
// thread started (they inherit the signal mask); it blocks until SIGINT/SIGTERM.
// Errors: returns the exit code (0, or 1 after "error: decompressor: ..." on stderr).
#pragma once

#include "services/service_base/service_config.h"
#include "services/service_base/service_util.h"

namespace zipmoe::decompressor {

int RunDecompressorService(const runtime::ServiceConfig& config, runtime::TerminationSignals& signals);

}  // namespace zipmoe::decompressor
