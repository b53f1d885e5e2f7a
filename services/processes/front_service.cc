#include "services/processes/front_service.h"

#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "common/metrics_server.h"
#include "services/api/api_server.h"
#include "services/api/http_server.h"
#include "services/front/front_server.h"
#include "services/processes/executor_service.h"

namespace zipmoe::front {

using runtime::FailService;
using runtime::ServiceLog;

int RunFrontService(const runtime::ServiceConfig& c, runtime::TerminationSignals& signals) {
  const std::string name = "front";
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server = runtime::StartMetrics(c, name, c.metrics_port_front);
  if (!metrics_server.ok()) return FailService(name, metrics_server.status());
  FrontOptions options;
  options.executor_address_file = runtime::ExecutorAddressFile(c);
  options.api_key = executor::ApiKeyOrEnvironment(c.http_api_key);  // the key the executor checks
  options.resume_timeout = std::chrono::milliseconds(c.http_resume_timeout_ms);
  FrontServer front(options, &(*metrics_server)->registry());
  api::HttpServerOptions http;
  http.host = c.http_host;
  http.port = static_cast<int>(c.http_port);
  http.threads = executor::DefaultHttpThreads(c.http_max_batch);
  http.error_body = &api::ApiServer::ErrorBody;
  http.priority = &api::ApiServer::IsProbe;
  http.on_head = [&front](const api::HttpRequest& head, api::HttpExchange& exchange) { front.CheckHead(head, exchange); };
  Result<std::unique_ptr<api::HttpServer>> listening = api::HttpServer::Start(
      http, [&front](const api::HttpRequest& request, api::HttpExchange& exchange) { front.Handle(request, exchange); });
  if (!listening.ok()) return FailService(name, listening.status());
  ServiceLog(name, fmt::format("listening on http://{}:{}; the executor's address comes from {}", c.http_host,
                               (*listening)->port(), options.executor_address_file));
  while (signals.Wait(std::chrono::milliseconds(500)) == 0) {
  }
  ServiceLog(name, "stopping (new requests get 503; 2000 ms for the running ones)");
  front.Drain(std::chrono::milliseconds(2000));
  front.Stop();
  (*listening)->Stop();
  const FrontCounters n = front.counters();
  ServiceLog(name, fmt::format("stopped: {} requests completed ({} re-issued after an executor died), {} failed",
                               n.completed, n.resumes, n.failed));
  return 0;
}

}  // namespace zipmoe::front
