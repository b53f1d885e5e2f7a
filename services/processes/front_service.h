// The HTTP front process (`zipmoe service front`, started by `zipmoe up` and compose when http.front
// is true): listens on http.host:http.port and passes every request to the executor, whose loopback
// address it reads from RUN_DIR/executor.http, re-issuing requests in flight when the executor dies
// (services/front/front_server.h). Exports zipmoe_front_* on metrics.port.front and on its own
// /metrics after the executor's.
// Threads: call from the process's main thread, after `signals` was constructed and before any other
// thread started; it blocks until SIGINT/SIGTERM.
// Errors: returns the exit code (0, or 1 after "error: front: ..." on stderr: the port cannot be bound).
#pragma once

#include "services/service_base/service_config.h"
#include "services/service_base/service_util.h"

namespace zipmoe::front {

int RunFrontService(const runtime::ServiceConfig& config, runtime::TerminationSignals& signals);

}  // namespace zipmoe::front
