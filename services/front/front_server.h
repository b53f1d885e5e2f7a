// FrontServer: the HTTP front of `zipmoe up` and compose (`zipmoe service front`; issue 43 item 1).
// Clients connect here; every request is passed to the executor's API on its loopback address (which
// the executor writes to RUN_DIR/executor.http when it listens), and when the executor dies with a
// request in flight, the front waits for `up` (or compose) to restart it and re-issues the request,
// so the client sees one uninterrupted answer with the tokens an uninterrupted run gives:
//   - a streaming completion continues where it stopped: the executor streams in units that list the
//     tokens behind each (services/api/front_protocol.h); the front forwards whole units only and
//     re-issues with "zipmoe_resume" (the token groups the client has), so nothing is sent twice or
//     lost;
//   - a non-streaming completion, /v1/models, /tokenize and /detokenize are simply sent again;
//   - a completion without "seed" gets one here, so a sampled answer is the same on every try.
// The front holds no model and runs no torch: it is small, starts at once and has little to crash
// on; with the executor behind it, the executor's death costs a restart's wait, not the connections.
//
// Routes: GET /health answers the executor's health, or 503 {"status":"loading"} while none answers;
// GET /metrics the executor's /metrics text followed by the front's own families
// (zipmoe_front_requests_total{outcome}, zipmoe_front_resumes_total); everything else is passed on
// (method, path, query, headers but hop-by-hop ones, body) and its answer passed back. The API key,
// when set, is checked from the headers before the body is read, as the executor does
// (ApiServer::CheckHeadWithKey). A request is tried at most `max_attempts` times; each try waits at
// most `resume_timeout` for an executor whose /health is 200. When tries run out: 503 (nothing sent
// yet) or, mid-stream, an error event and "data: [DONE]".
//
// Thread-safety: Handle and CheckHead run concurrently on the HTTP server's threads; Stop from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "services/api/http_server.h"

namespace prometheus {
class Registry;
class Counter;
}  // namespace prometheus

namespace zipmoe::front {

struct FrontOptions {
  std::string executor_address_file;  // "HOST:PORT\n", written by the executor (RUN_DIR/executor.http)
  std::string api_key;                // "" = none
  std::chrono::milliseconds resume_timeout{60000};   // per try: the longest wait for a healthy executor
  std::chrono::milliseconds read_timeout{600000};    // the longest silence of the executor mid-answer
  int max_attempts = 4;               // tries of one request (the first and up to 3 re-issues), >= 1
};

// What the front did (also exported on /metrics).
struct FrontCounters {
  uint64_t completed = 0;  // requests answered by an executor (any status)
  uint64_t resumes = 0;    // re-issues after the executor's connection broke
  uint64_t failed = 0;     // requests no executor answered within max_attempts tries
};

class FrontServer {
 public:
  // `registry` (may be null): the front's counters are registered there and appended to /metrics.
  FrontServer(FrontOptions options, prometheus::Registry* registry);
  ~FrontServer();
  FrontServer(const FrontServer&) = delete;
  FrontServer& operator=(const FrontServer&) = delete;

  void Handle(const api::HttpRequest& request, api::HttpExchange& exchange);  // the HttpServer's handler
  void CheckHead(const api::HttpRequest& head, api::HttpExchange& exchange);  // HttpServerOptions::on_head
  // Shutdown, before stopping the HTTP server: Drain refuses new requests (503; /health 503
  // "stopping") and waits up to `grace` for the running ones; Stop then ends the rest at once (their
  // executor connections are closed, so the executor cancels them; the clients get 503 or, mid-stream,
  // an error event). A request whose client goes away is likewise cancelled at the executor.
  void Drain(std::chrono::milliseconds grace);
  void Stop() { stopping_.store(true); }
  FrontCounters counters() const;

  // The executor's address from the address file: (host, port); nullopt when absent or unreadable.
  std::optional<std::pair<std::string, int>> ExecutorAddress() const;

 private:
  // Waits until the executor answers GET /health with 200 (or `deadline`, Stop, the client leaving).
  std::optional<std::pair<std::string, int>> WaitForExecutor(std::chrono::steady_clock::time_point deadline,
                                                             api::HttpExchange* exchange);
  void HandleHealth(api::HttpExchange& exchange);
  void HandleMetrics(api::HttpExchange& exchange);
  void Forward(const api::HttpRequest& request, api::HttpExchange& exchange);
  void ForwardStream(const api::HttpRequest& request, const std::string& body, api::HttpExchange& exchange);

  const FrontOptions options_;
  prometheus::Registry* registry_;
  void CountCompleted();
  void CountFailed();
  void CountResume();

  // The exported counters (null without a registry), resolved once at construction.
  prometheus::Counter* completed_metric_ = nullptr;
  prometheus::Counter* failed_metric_ = nullptr;
  prometheus::Counter* resumes_metric_ = nullptr;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};  // requests being passed on
  std::atomic<uint64_t> completed_{0}, resumes_count_{0}, failed_{0};
};

}  // namespace zipmoe::front
