// ApiServer: the OpenAI-compatible API of `zipmoe serve` and of the executor service under `zipmoe up`,
// over the executor's continuous batching (executor::BatchSession). Request semantics are in
// openai_protocol.h; the HTTP layer in http_server.h.
//
// Routes (every one answers CORS preflights; JSON errors are {"error": {message, type, param, code}}):
//   GET  /health                200 {"status":"ok"} | 503 {"status":"loading"|"stopping"} | 503
//                               {"status":"error","message"} while the last sequence to end failed
//                               with a server error (e.g. a corrupt expert chunk) until one succeeds
//                               (no API key)
//   GET  /metrics               Prometheus text format 0.0.4: the serving metrics
//                               (service_metrics.h ExecutorMetrics) and whatever else the owner
//                               registered on the same registry (the embedded runtime's cache,
//                               pool and decompressor metrics)  (no API key)
//   GET  /v1/models, /v1/models/{id}   the served model names (--served-model-name; default the
//                               directory's basename)
//   POST /v1/completions, /v1/chat/completions   openai_protocol.h; "model" is accepted as given and
//                               echoed. Non-streaming answers once every choice is done; streaming
//                               answers text/event-stream chunks ("data: {json}\n\n"), per choice a
//                               finish chunk, with stream_options.include_usage a last chunk with
//                               empty choices and the usage, then "data: [DONE]".
//   POST /tokenize {content, add_special=false, with_pieces=false} -> {tokens: [id] | [{id, piece}]}
//   POST /detokenize {tokens: [id]} -> {content}       (llama.cpp's server)
// Every route but /health and /metrics needs "Authorization: Bearer KEY" when an API key is set
// (401), and answers 503 until the model is loaded and once shutdown began.
//
// Batching: each choice (prompt x n) is one sequence. One batch-loop thread admits queued sequences
// (oldest first, or by request grouping: request_grouping.h) up to max_batch between decode steps (their prefill joins the next step) and ends a sequence at
// EOS, its token limit, the context length, a stop string, or when its request was cancelled: the
// streaming client's write failed or a non-streaming client closed its connection (probed every
// 200 ms while it waits). Handler threads only wait and write. With the deterministic CPU kernels a
// sequence's tokens do not depend on what else is in the batch.
//
// Shutdown: Drain(grace) refuses new requests (503) and waits up to `grace` for the running ones;
// StopBatching() then ends what is left (non-streaming: 503; streaming: an error event) and joins the
// loop, so the handlers return and the HTTP server can stop.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/expert_provider.h"
#include "common/tokenizer/tokenizer.h"
#include "services/api/http_server.h"
#include "services/api/json_constraint.h"
#include "services/api/openai_protocol.h"
#include "services/scheduler/request_grouping.h"
#include "services/executor/generator.h"

namespace prometheus {
class Registry;
}

namespace zipmoe::metrics {
class ExecutorMetrics;
}

namespace zipmoe::api {

// The scheduler's request grouping (CoServe), which the batch loop applies to its waiting queue.
using scheduler::ChooseAdmissions;
using scheduler::ExpertSets;
using scheduler::GroupingCandidate;
using scheduler::RequestGrouping;

struct ApiServerOptions {
  std::vector<std::string> served_model_names;  // non-empty; [0] is the id answers carry when a
                                                // request names no model
  std::string api_key;                          // "" = no authentication
  int max_batch = 8;                            // sequences decoded together, >= 1
  int max_waiting = 256;                        // sequences queued for a batch slot; a request that
                                                // would exceed it gets 429 (type rate_limit_error)
  // Which waiting sequence gets a free batch slot (request_grouping.h): first come, first served,
  // or CoServe's dependency-aware grouping over the first `group_window` (>= 1) waiting sequences.
  RequestGrouping grouping = RequestGrouping::kNone;
  int group_window = 8;
};

class ApiServer {
 public:
  explicit ApiServer(ApiServerOptions options);
  ~ApiServer();  // StopBatching()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Serving metrics (may be null) and the registry GET /metrics serializes (null = 404); `refresh`
  // runs before each scrape (e.g. copies the embedded runtime's counters into their families).
  // Call before the HTTP server starts; all must outlive this server.
  void SetMetrics(metrics::ExecutorMetrics* metrics, prometheus::Registry* registry, std::function<void()> refresh);

  // The model is loaded; starts the batch loop. Requests are served from now on.
  void SetLoaded(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<ExpertProvider> provider,
                 std::unique_ptr<executor::Generator> generator);

  // Routes one HTTP request (the HttpServer's handler).
  void Handle(const HttpRequest& request, HttpExchange& exchange);
  // The request's head before its body is read (HttpServerOptions::on_head): 401 for an API path
  // without a valid key, 413 for a /tokenize or /detokenize body above kTokenizeMaxBodyBytes; the
  // body is then never read. Sends nothing otherwise.
  void CheckHead(const HttpRequest& head, HttpExchange& exchange);
  // The same check for a server that holds only the key (the HTTP front, services/front/).
  static void CheckHeadWithKey(const std::string& api_key, const HttpRequest& head, HttpExchange& exchange);
  // Whether `http` carries "Authorization: Bearer api_key" (always true for an empty key), compared in
  // constant time.
  static bool KeyMatches(const std::string& api_key, const HttpRequest& http);

  // The largest /tokenize and /detokenize request body (413 above it): bounds the memory of one
  // such request (the text, its ids and, with with_pieces, their JSON) to tens of MiB.
  static constexpr size_t kTokenizeMaxBodyBytes = size_t{1} << 20;

  // GET/HEAD /health and /metrics (HttpServerOptions::priority): quick and never waiting on
  // generation, so they run on workers of their own and answer while every other worker is busy.
  static bool IsProbe(const HttpRequest& head);

  // Body of HTTP-layer errors as the OpenAI error object (HttpServerOptions::error_body).
  static std::pair<std::string, std::string> ErrorBody(int status, const std::string& message);

  // Refuses new requests and waits up to `grace` for queued and running sequences to end.
  void Drain(std::chrono::milliseconds grace);
  // Ends every sequence left and joins the batch loop. Idempotent.
  void StopBatching();

  // Sequences queued / running now (for tests and logs).
  size_t waiting() const;
  size_t running() const;

 private:
  struct Request;
  struct Job;
  void BatchLoop();
  // Under queue_mu_: takes up to `slots` sequences off queue_ (FIFO, or by options_.grouping); may
  // release queue_mu_ while it predicts experts (only this thread takes sequences off the queue).
  std::vector<Job*> TakeAdmissionsLocked(size_t slots) ZM_REQUIRES(queue_mu_);
  bool OnToken(Job& job, const executor::SampledToken& token);
  void Finish(Job& job, const Status& status, bool eos);
  // Queues the request's sequences; false (nothing queued) when the queue would exceed max_waiting.
  bool Submit(const std::shared_ptr<Request>& request);
  void HandleCompletion(const HttpRequest& http, HttpExchange& exchange, Endpoint endpoint);
  void HandleTokenize(const HttpRequest& http, HttpExchange& exchange);
  void HandleDetokenize(const HttpRequest& http, HttpExchange& exchange);
  void HandleModels(const HttpRequest& http, HttpExchange& exchange);
  static void SendJson(HttpExchange& exchange, int status, const nlohmann::json& body);
  // Whether the request carries the API key (always true without one), compared in constant time.
  bool Authorized(const HttpRequest& http) const;
  static void SendError(HttpExchange& exchange, const ApiError& error);
  // 405 with an Allow header naming `allow` (e.g. "GET, HEAD").
  static void MethodNotAllowed(HttpExchange& exchange, const char* allow, const std::string& message);
  std::string TokenText(int32_t id) const;
  std::string TokenBytes(int32_t id) const;  // its raw bytes (Tokenizer::DecodeBytes)

  const ApiServerOptions options_;
  const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
  metrics::ExecutorMetrics* metrics_ = nullptr;
  prometheus::Registry* registry_ = nullptr;
  std::function<void()> refresh_;
  Mutex refresh_mu_;  // one scrape refresh at a time

  // Set once by SetLoaded before ready_ becomes true; read-only afterwards.
  std::unique_ptr<Tokenizer> tokenizer_;            // null when the directory has no tokenizer.json
  std::unique_ptr<ExpertProvider> provider_;        // null = every expert resident
  std::unique_ptr<executor::Generator> generator_;  // driven by the batch loop only
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  mutable Mutex health_mu_;
  std::string last_error_ ZM_GUARDED_BY(health_mu_);  // the failure of the last sequence to end; "" = it succeeded

  mutable Mutex queue_mu_;
  CondVar queue_cv_;
  std::deque<Job*> queue_ ZM_GUARDED_BY(queue_mu_);  // admitted by the batch loop in order; owned by their Request
  size_t running_count_ ZM_GUARDED_BY(queue_mu_) = 0;
  bool stopping_ ZM_GUARDED_BY(queue_mu_) = false;
  std::thread batch_thread_;
  std::atomic<uint64_t> next_id_{1};
  // Random per process: response ids (and the tool-call ids made from them) do not repeat after a
  // restart, where a client's conversation may still hold the earlier process's ids.
  const std::string id_prefix_;
  // The vocabulary as structured outputs see it (json_constraint.h), built at the first request that
  // asks for response_format json_object / json_schema.
  std::once_flag constraint_vocab_once_;
  std::shared_ptr<const ConstraintVocabulary> constraint_vocab_;
};

}  // namespace zipmoe::api
