// `zipmoe serve`: an OpenAI-compatible HTTP server (cpp-httplib) over the embedded executor.
//
//   zipmoe serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--threads N]
//                [--max-batch 8] [--device cpu] [--memory-budget B [--policy P] ...]  (services/cli/runtime_flags.h)
//
// The server listens first, then loads the model (and, with --memory-budget, the ZipMoE runtime as
// in `zipmoe generate`; `zipmoe service executor`: a RemoteExpertProvider). Until it is loaded every
// route but /health answers 503. Endpoints:
//   GET  /health               200 {"status":"ok"}, 503 {"status":"loading"} (never needs the API key)
//   GET  /v1/models            {"object":"list","data":[{"id":<basename of DIR>,"object":"model"}]}
//   POST /v1/completions       {"model" (optional; another id than GET /v1/models gives 404),
//                              "prompt": text | [token ids], "max_tokens" (16), "temperature" (1;
//                              0 = greedy), "top_p" (1), "seed" (0), "stop": text | [text], "stream",
//                              "ignore_eos" (false; vLLM's extension: generate max_tokens tokens)}
//   POST /v1/chat/completions  {"messages": [{"role","content"}], same sampling fields}; the prompt is
//                              the tokenizer_config.json chat template with a generation prompt.
// Text prompts are encoded as `zipmoe generate` does (add_special_tokens for /v1/completions, none
// after the chat template). finish_reason is "stop" for EOS or a stop string (the text is cut
// before it), else "length". "stream": true answers text/event-stream: one `data: {chunk}\n\n` per
// token that adds text, a last chunk with the finish_reason, then `data: [DONE]\n\n`.
// Errors are {"error":{"message","type"}}: 400 (invalid_request_error) for bad JSON or fields or a
// prompt longer than max_position_embeddings, 401 (authentication_error) for a missing/wrong
// "Authorization: Bearer KEY" when --api-key is set, 404 (not_found_error for an unknown path,
// invalid_request_error for an unknown model), 413 for a body over 32 MiB, 500 (server_error), 503 while loading or stopping.
//
// Concurrency: httplib accepts connections on a thread pool; each request becomes a Job in a FIFO
// queue. One batch-loop thread drives an executor::BatchSession (continuous batching): between
// decode steps it admits queued requests (up to --max-batch sequences), whose prefill joins the
// next step, and a sequence leaves the batch at EOS, max_tokens, a stop string or when its
// streaming client goes away. Handler threads only wait and write; a slow client never stalls the
// batch. Greedy tokens of a request alone equal `zipmoe generate`; in a batch they can differ in
// rare float near-ties (executor/generator.h, BatchSession).
// SIGINT/SIGTERM: blocked in every thread (TerminationSignals) and taken by the main thread, which
// stops the server; requests in flight finish first, then the process exits 0.
// Torch-free: only the executor's .cc files include torch.
#include <CLI/CLI.hpp>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/manifest.h"
#include "common/tokenizer.h"
#include "services/cli/commands.h"
#include "services/cli/runtime_flags.h"
#include "services/cli/service_config.h"
#include "services/cli/service_util.h"
#include "common/metrics_server.h"
#include "services/runtime/remote_provider.h"
#include "services/runtime/service_metrics.h"
#include "services/executor/generator.h"

namespace zipmoe::cli {
namespace {

using nlohmann::json;

constexpr int64_t kDefaultMaxTokens = 16;
// Request bodies above this answer 413 before they are read (a prompt this long exceeds any context).
constexpr size_t kMaxBodyBytes = size_t{32} << 20;
constexpr int kSignalPollMillis = 200;  // how often the main thread checks for signals and a dead listener

struct ServeArgs {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  int threads = 0;
  std::string device = "cpu";
  int max_batch = 8;  // sequences decoded together (continuous batching); 1 = one request at a time
  RuntimeFlags runtime;
};

// A client-visible error: HTTP status, OpenAI error type, message.
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
};

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(json{{"error", {{"message", e.message}, {"type", e.type}}}}.dump(), "application/json");
}

ApiError BadRequest(std::string message) { return ApiError{400, "invalid_request_error", std::move(message)}; }

// One parsed completion request.
struct CompletionRequest {
  std::vector<int32_t> prompt_ids;
  executor::GenerationParams params;
  std::vector<std::string> stop;
  bool stream = false;
  bool chat = false;
};

// Follows the generated text, cuts it at the first stop string and says how much of it is safe to
// emit (text that could still be the start of a stop string is held back).
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stop) : stop_(std::move(stop)) {
    for (const auto& s : stop_) hold_ = std::max(hold_, s.size() > 0 ? s.size() - 1 : 0);
  }
  // Appends `piece`; returns true once a stop string occurs (the text is then cut before it).
  bool Append(const std::string& piece) {
    if (stopped_) return true;
    const size_t from = text_.size() > hold_ ? text_.size() - hold_ : 0;
    text_ += piece;
    size_t cut = std::string::npos;
    for (const auto& s : stop_) {
      if (s.empty()) continue;
      const size_t pos = text_.find(s, from);
      if (pos != std::string::npos) cut = std::min(cut, pos);
    }
    if (cut == std::string::npos) return false;
    text_.resize(cut);
    stopped_ = true;
    return true;
  }
  // The text not emitted yet that can no longer turn into a stop string; `all` = the stream ended.
  std::string TakeSafe(bool all) {
    size_t end = text_.size();
    if (!all && !stopped_) {
      end = text_.size() > hold_ ? text_.size() - hold_ : 0;
      while (end > emitted_ && end < text_.size() && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;
    }
    if (end <= emitted_) return std::string();
    std::string out = text_.substr(emitted_, end - emitted_);
    emitted_ = end;
    return out;
  }
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  size_t hold_ = 0;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

class Server {
 public:
  explicit Server(const ServeArgs& args) : args_(args), model_id_(ModelId(args.model_dir)) {}
  ~Server() { StopBatching(); }

  // The model is loaded: requests are served from now on (before, everything but /health is 503).
  void SetLoaded(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<ExpertProvider> provider,
                 std::unique_ptr<executor::Generator> generator) {
    tokenizer_ = std::move(tokenizer);
    provider_ = std::move(provider);
    generator_ = std::move(generator);
    ready_.store(true, std::memory_order_release);
  }

  // Exports TTFT/TPOT, tokens, queue depth and HTTP requests from now on (must outlive the server).
  void SetMetrics(metrics::ExecutorMetrics* metrics) { metrics_ = metrics; }

  void Install(httplib::Server& svr) {
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (metrics_ != nullptr) metrics_->CountHttp(req.path, res.status);
    });
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      if (!ready_.load(std::memory_order_acquire)) {
        SendError(res, ApiError{503, "server_error", "the model is still loading; retry when GET /health is 200"});
        return httplib::Server::HandlerResponse::Handled;
      }
      if (args_.api_key.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + args_.api_key)
        return httplib::Server::HandlerResponse::Unhandled;
      SendError(res, ApiError{401, "authentication_error", "missing or invalid API key (Authorization: Bearer KEY)"});
      return httplib::Server::HandlerResponse::Handled;
    });
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404) {
        SendError(res, ApiError{404, "not_found_error", fmt::format("unknown path {} {}", req.method, req.path)});
      } else {
        SendError(res, ApiError{res.status, "invalid_request_error", fmt::format("HTTP {}", res.status)});
      }
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      SendError(res, ApiError{500, "server_error", what});
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (!ready_.load(std::memory_order_acquire)) {
        res.status = 503;
        res.set_content(json{{"status", "loading"}}.dump(), "application/json");
        return;
      }
      res.set_content(json{{"status", "ok"}}.dump(), "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json data = json::array({json{{"id", model_id_}, {"object", "model"}, {"owned_by", "zipmoe"}}});
      res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    });
    svr.Post("/v1/completions",
             [this](const httplib::Request& req, httplib::Response& res) { HandleCompletion(req, res, false); });
    svr.Post("/v1/chat/completions",
             [this](const httplib::Request& req, httplib::Response& res) { HandleCompletion(req, res, true); });
  }

 private:
  static std::string ModelId(std::string dir) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const size_t slash = dir.find_last_of('/');
    return slash == std::string::npos ? dir : dir.substr(slash + 1);
  }

  // Parses and validates a request body. Returns an error for anything the client got wrong.
  bool Parse(const std::string& body, bool chat, CompletionRequest* out, ApiError* err) const {
    const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      *err = BadRequest("request body is not a JSON object");
      return false;
    }
    out->chat = chat;
    try {
      const ModelConfig& c = generator_->config();
      if (j.contains("model") && !j["model"].is_null()) {  // optional here; OpenAI clients always send it
        if (!j["model"].is_string()) return *err = BadRequest("'model' must be a string"), false;
        if (j["model"].get<std::string>() != model_id_)
          return *err = ApiError{404, "invalid_request_error",
                                 fmt::format("the model '{}' does not exist; this server serves '{}' (GET /v1/models)",
                                             j["model"].get<std::string>(), model_id_)},
                 false;
      }
      if (chat) {
        if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
          return *err = BadRequest("'messages' must be a non-empty array"), false;
        if (!tokenizer_) return *err = BadRequest("the model directory has no tokenizer.json"), false;
        std::vector<ChatMessage> messages;
        for (const auto& m : j["messages"]) {
          if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
              !m["content"].is_string())
            return *err = BadRequest("each message needs string 'role' and 'content'"), false;
          messages.push_back(ChatMessage{m["role"].get<std::string>(), m["content"].get<std::string>()});
        }
        Result<std::string> text = tokenizer_->ApplyChatTemplate(messages, /*add_generation_prompt=*/true);
        if (!text.ok()) return *err = BadRequest(text.status().ToString()), false;
        Result<std::vector<int32_t>> ids = tokenizer_->Encode(*text, /*add_special_tokens=*/false);
        if (!ids.ok()) return *err = BadRequest(ids.status().ToString()), false;
        out->prompt_ids = std::move(ids).value();
      } else {
        if (!j.contains("prompt")) return *err = BadRequest("'prompt' is required"), false;
        const json& p = j["prompt"];
        if (p.is_string()) {
          if (!tokenizer_) return *err = BadRequest("text prompts need tokenizer.json in the model directory"), false;
          Result<std::vector<int32_t>> ids = tokenizer_->Encode(p.get<std::string>(), /*add_special_tokens=*/true);
          if (!ids.ok()) return *err = BadRequest(ids.status().ToString()), false;
          out->prompt_ids = std::move(ids).value();
        } else if (p.is_array()) {
          for (const auto& t : p) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= c.vocab_size)
              return *err = BadRequest(fmt::format("'prompt' token {} is not an id below {}", t.dump(), c.vocab_size)),
                     false;
            out->prompt_ids.push_back(t.get<int32_t>());
          }
        } else {
          return *err = BadRequest("'prompt' must be a string or an array of token ids"), false;
        }
      }
      if (out->prompt_ids.empty()) return *err = BadRequest("the prompt is empty"), false;
      if (static_cast<int64_t>(out->prompt_ids.size()) > c.max_position_embeddings)
        return *err = BadRequest(fmt::format("the prompt has {} tokens, longer than the context ({} tokens)",
                                             out->prompt_ids.size(), c.max_position_embeddings)),
               false;
      executor::GenerationParams& params = out->params;
      params.max_new_tokens = kDefaultMaxTokens;
      params.sampling.temperature = 1.0f;
      params.sampling.top_p = 1.0f;
      params.sampling.seed = 0;
      const char* tokens_key = chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
      if (j.contains(tokens_key) && !j[tokens_key].is_null()) {
        if (!j[tokens_key].is_number_integer() || j[tokens_key].get<int64_t>() < 0)
          return *err = BadRequest(fmt::format("'{}' must be an integer >= 0", tokens_key)), false;
        params.max_new_tokens = j[tokens_key].get<int64_t>();
      }
      if (j.contains("temperature") && !j["temperature"].is_null()) {
        if (!j["temperature"].is_number() || j["temperature"].get<double>() < 0)
          return *err = BadRequest("'temperature' must be a number >= 0"), false;
        params.sampling.temperature = j["temperature"].get<float>();
      }
      if (j.contains("top_p") && !j["top_p"].is_null()) {
        if (!j["top_p"].is_number() || j["top_p"].get<double>() <= 0 || j["top_p"].get<double>() > 1)
          return *err = BadRequest("'top_p' must be a number in (0, 1]"), false;
        params.sampling.top_p = j["top_p"].get<float>();
      }
      if (j.contains("seed") && !j["seed"].is_null()) {
        if (!j["seed"].is_number_integer()) return *err = BadRequest("'seed' must be an integer"), false;
        params.sampling.seed = static_cast<uint64_t>(j["seed"].get<int64_t>());
      }
      if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {  // vLLM's extension, for benchmarks
        if (!j["ignore_eos"].is_boolean()) return *err = BadRequest("'ignore_eos' must be true or false"), false;
        params.stop_on_eos = !j["ignore_eos"].get<bool>();
      }
      if (j.contains("stop") && !j["stop"].is_null()) {
        const json& s = j["stop"];
        if (s.is_string()) {
          out->stop.push_back(s.get<std::string>());
        } else if (s.is_array()) {
          for (const auto& x : s) {
            if (!x.is_string()) return *err = BadRequest("'stop' must be a string or an array of strings"), false;
            out->stop.push_back(x.get<std::string>());
          }
        } else {
          return *err = BadRequest("'stop' must be a string or an array of strings"), false;
        }
      }
      if (j.contains("stream") && !j["stream"].is_null()) {
        if (!j["stream"].is_boolean()) return *err = BadRequest("'stream' must be a boolean"), false;
        out->stream = j["stream"].get<bool>();
      }
    } catch (const json::exception& e) {  // e.g. a number out of range for its field
      *err = BadRequest(e.what());
      return false;
    }
    return true;
  }

  // The result of one request.
  struct Outcome {
    std::string text;
    int64_t completion_tokens = 0;
    std::string finish_reason = "length";
  };

  // One request in flight, shared by its HTTP handler thread and the batch loop. The handler waits
  // on `cv` for text (streaming) or the end; the batch loop fills it token by token.
  struct Job {
    Job(CompletionRequest r, bool streaming) : request(std::move(r)), stream(streaming), matcher(request.stop) {}
    const CompletionRequest request;
    const bool stream;
    const std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
    std::atomic<bool> client_gone{false};  // set by the handler when a write to the client fails

    std::mutex mu;  // guards the four fields below
    std::condition_variable cv;
    std::string pending;  // emit-safe text the handler has not sent yet (streaming)
    bool done = false;
    bool failed = false;
    ApiError error;
    Outcome outcome;  // valid once done && !failed

    // Batch-loop only.
    StopMatcher matcher;
    std::unique_ptr<StreamDecoder> decoder;
    int64_t count = 0;
    std::chrono::steady_clock::time_point last_token;
    size_t peak_batch = 0;  // most sequences in one step this request took part in
    std::string id;         // for the log line
  };

  // Called on the batch loop for every token of `job`; returns whether its sequence goes on.
  bool OnToken(Job& job, int32_t id) {
    ++job.count;
    if (metrics_ != nullptr) {
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - (job.count == 1 ? job.arrival : job.last_token)).count();
      if (job.count == 1) {
        metrics_->ObserveTtft(seconds);
      } else {
        metrics_->ObserveTpot(seconds);
      }
      job.last_token = now;
    }
    const bool stop = job.decoder ? job.matcher.Append(job.decoder->Step(id)) : false;
    if (job.stream) {
      const std::string piece = job.matcher.TakeSafe(/*all=*/false);
      if (!piece.empty()) {
        std::lock_guard<std::mutex> lock(job.mu);
        job.pending += piece;
        job.cv.notify_all();
      }
    }
    return !stop && !job.client_gone.load(std::memory_order_relaxed);
  }

  // Ends `job` (batch loop): success with the text so far, or an error.
  void Finish(Job& job, const Status& status, bool eos) {
    std::lock_guard<std::mutex> lock(job.mu);
    if (!status.ok()) {
      const bool client = status.code() == StatusCode::kInvalidArgument;
      job.failed = true;
      job.error = ApiError{client ? 400 : 500, client ? "invalid_request_error" : "server_error", status.ToString()};
    } else {
      if (job.decoder && !job.matcher.stopped()) job.matcher.Append(job.decoder->Flush());
      if (job.stream) job.pending += job.matcher.TakeSafe(/*all=*/true);
      job.outcome.text = job.matcher.text();
      job.outcome.completion_tokens = job.count;
      job.outcome.finish_reason = (eos || job.matcher.stopped()) ? "stop" : "length";
      if (metrics_ != nullptr) metrics_->AddTokens(static_cast<uint64_t>(job.count));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - job.arrival).count();
    const std::string how = !status.ok()                                         ? "error " + status.ToString()
                            : job.client_gone.load(std::memory_order_relaxed) ? "cancelled (client disconnected)"
                                                                              : job.outcome.finish_reason;
    std::fprintf(stderr, "%s",
                 fmt::format("I: serve: {} {}: {} prompt + {} completion tokens in {:.3f} s, batch of up to {}\n",
                             job.id, how,
                             job.request.prompt_ids.size(), job.count, seconds, job.peak_batch)
                     .c_str());
    job.done = true;
    job.cv.notify_all();
  }

  // Queues a parsed request for the batch loop.
  std::shared_ptr<Job> Submit(const CompletionRequest& request, bool stream, const std::string& id) {
    auto job = std::make_shared<Job>(request, stream);
    job->id = id;
    if (tokenizer_) job->decoder = std::make_unique<StreamDecoder>(*tokenizer_, /*skip_special_tokens=*/true);
    if (request.params.max_new_tokens == 0) {  // nothing to generate: no forward pass
      Finish(*job, Status::Ok(), false);
      return job;
    }
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(job);
    if (metrics_ != nullptr) metrics_->SetQueueDepth(static_cast<double>(queue_.size()));
    queue_cv_.notify_one();
    return job;
  }

 public:
  // The batch loop (continuous batching, executor::BatchSession): admits queued requests up to
  // max_batch running sequences, runs one step, hands out tokens, repeats. Runs on its own thread
  // from StartBatching() until StopBatching(); requests still queued or running then fail with 503.
  void StartBatching() {
    batch_thread_ = std::thread([this] { BatchLoop(); });
  }
  void StopBatching() {
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    if (batch_thread_.joinable()) batch_thread_.join();
  }

 private:
  void BatchLoop() {
    std::unique_ptr<executor::BatchSession> session = generator_->NewSession();
    std::map<executor::BatchSession::SequenceId, std::shared_ptr<Job>> running;
    const size_t max_batch = static_cast<size_t>(std::max(1, args_.max_batch));
    while (true) {
      std::vector<std::shared_ptr<Job>> admit;
      {
        std::unique_lock<std::mutex> lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !running.empty(); });
        if (stopping_) break;
        while (!queue_.empty() && running.size() + admit.size() < max_batch) {
          admit.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        if (metrics_ != nullptr) metrics_->SetQueueDepth(static_cast<double>(queue_.size()));
      }
      for (std::shared_ptr<Job>& job : admit) {
        Job* j = job.get();
        Result<executor::BatchSession::SequenceId> id = session->AddSequence(
            job->request.prompt_ids, job->request.params, /*sampler_stream=*/0,
            [this, j](const executor::SampledToken& token) { return OnToken(*j, token.id); });
        if (!id.ok()) {
          Finish(*job, id.status(), false);
        } else {
          running.emplace(*id, std::move(job));
        }
      }
      if (session->empty()) continue;
      for (auto& [id, job] : running) job->peak_batch = std::max(job->peak_batch, running.size());
      for (executor::BatchSession::Finished& f : session->Step()) {
        auto it = running.find(f.id);
        if (it == running.end()) continue;
        Finish(*it->second, f.status, f.result.stopped_on_eos);
        running.erase(it);
      }
    }
    const Status gone = Status::Unavailable("the server is shutting down");
    for (auto& [id, job] : running) Finish(*job, gone, false);
    std::lock_guard<std::mutex> lock(queue_mu_);
    for (auto& job : queue_) Finish(*job, gone, false);
    queue_.clear();
  }

  // Waits for `job` to end (non-streaming).
  static void Wait(Job& job) {
    std::unique_lock<std::mutex> lock(job.mu);
    job.cv.wait(lock, [&] { return job.done; });
  }

  json Envelope(bool chat, bool chunk, const std::string& id, int64_t created) const {
    return json{{"id", id},
                {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
                {"created", created},
                {"model", model_id_}};
  }

  static json Choice(bool chat, bool chunk, const std::string& text, const json& finish_reason) {
    json choice{{"index", 0}};
    if (!chat) {
      choice["text"] = text;
    } else if (chunk) {
      choice["delta"] = text.empty() ? json::object() : json{{"content", text}};
    } else {
      choice["message"] = json{{"role", "assistant"}, {"content", text}};
    }
    choice["finish_reason"] = finish_reason;
    if (!chat) choice["logprobs"] = nullptr;
    return choice;
  }

  void HandleCompletion(const httplib::Request& req, httplib::Response& res, bool chat) {
    auto request = std::make_shared<CompletionRequest>();
    ApiError err;
    if (!Parse(req.body, chat, request.get(), &err)) return SendError(res, err);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_.fetch_add(1));
    if (!request->stream) {
      std::shared_ptr<Job> job = Submit(*request, /*stream=*/false, id);
      Wait(*job);
      if (job->failed) return SendError(res, job->error);
      const Outcome& out = job->outcome;
      json body = Envelope(chat, false, id, created);
      body["choices"] = json::array({Choice(chat, false, out.text, out.finish_reason)});
      const int64_t prompt_tokens = static_cast<int64_t>(request->prompt_ids.size());
      body["usage"] = json{{"prompt_tokens", prompt_tokens},
                           {"completion_tokens", out.completion_tokens},
                           {"total_tokens", prompt_tokens + out.completion_tokens}};
      res.set_content(body.dump(), "application/json");
      return;
    }
    // Streaming: generation runs in the content provider, on this connection's worker thread.
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, request, chat, id, created](size_t,
                                                                                          httplib::DataSink& sink) {
      auto send = [&sink](const json& j) {
        const std::string event = "data: " + j.dump() + "\n\n";
        return sink.write(event.data(), event.size());
      };
      if (chat) {  // OpenAI sends the role first
        json first = Envelope(true, true, id, created);
        first["choices"] = json::array({json{{"index", 0}, {"delta", {{"role", "assistant"}}}, {"finish_reason", nullptr}}});
        send(first);
      }
      auto on_text = [&](const std::string& piece) {
        json j = Envelope(chat, true, id, created);
        j["choices"] = json::array({Choice(chat, true, piece, nullptr)});
        return send(j);
      };
      // The batch loop appends text to job->pending; this (the connection's) thread sends it, so a
      // slow client never stalls the other sequences of the batch.
      std::shared_ptr<Job> job = Submit(*request, /*stream=*/true, id);
      while (true) {
        std::string piece;
        bool done = false;
        {
          std::unique_lock<std::mutex> lock(job->mu);
          job->cv.wait(lock, [&] { return job->done || !job->pending.empty(); });
          piece.swap(job->pending);
          done = job->done;
        }
        if (!piece.empty() && !job->client_gone.load() && !on_text(piece)) job->client_gone.store(true);
        if (done) break;
      }
      if (job->failed) {
        send(json{{"error", {{"message", job->error.message}, {"type", job->error.type}}}});
      } else {
        const Outcome& out = job->outcome;
        json last = Envelope(chat, true, id, created);
        last["choices"] = json::array({Choice(chat, true, "", out.finish_reason)});
        const int64_t prompt_tokens = static_cast<int64_t>(request->prompt_ids.size());
        last["usage"] = json{{"prompt_tokens", prompt_tokens},
                             {"completion_tokens", out.completion_tokens},
                             {"total_tokens", prompt_tokens + out.completion_tokens}};
        send(last);
      }
      static const std::string kDone = "data: [DONE]\n\n";
      sink.write(kDone.data(), kDone.size());
      sink.done();
      return true;
    });
  }

  const ServeArgs& args_;
  // Set once by SetLoaded before ready_ becomes true; read-only afterwards.
  std::unique_ptr<Tokenizer> tokenizer_;  // null when DIR has no tokenizer.json
  std::unique_ptr<ExpertProvider> provider_;  // null = every expert resident
  std::unique_ptr<executor::Generator> generator_;  // driven by the batch loop only (after SetLoaded)
  std::atomic<bool> ready_{false};
  metrics::ExecutorMetrics* metrics_ = nullptr;
  std::mutex queue_mu_;  // guards queue_ and stopping_
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // submitted, not yet in the batch
  bool stopping_ = false;
  std::thread batch_thread_;
  const std::string model_id_;
  std::atomic<uint64_t> next_id_{1};
};

int Fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

// Creates the expert provider once the HTTP listener is up (nullptr = every expert resident).
using ProviderFactory = std::function<Result<std::unique_ptr<ExpertProvider>>()>;

// Listens first (GET /health answers 503 while loading), then loads tokenizer, provider and model,
// then serves until SIGINT/SIGTERM. `signals` must have been constructed before any thread started.
// `metrics`: optional executor metrics; `tick`: called about every 200 ms while serving (may be empty).
int RunServe(const ServeArgs& args, const ProviderFactory& make_provider, TerminationSignals& signals,
             metrics::ExecutorMetrics* metrics = nullptr, const std::function<void()>& tick = {}) {
  Server server(args);
  server.SetMetrics(metrics);
  httplib::Server svr;
  svr.set_payload_max_length(kMaxBodyBytes);
  server.Install(svr);
  if (!svr.bind_to_port(args.host, args.port)) {
    return Fail(Status::InvalidArgument(fmt::format("cannot listen on {}:{}", args.host, args.port)));
  }
  std::atomic<bool> listen_ok{true};
  std::thread listener([&svr, &listen_ok] { listen_ok.store(svr.listen_after_bind()); });
  std::fprintf(stderr, "I: serve: listening on http://%s:%d (model %s), loading\n", args.host.c_str(), args.port,
               args.model_dir.c_str());
  auto fail = [&](const Status& status) {
    svr.stop();
    listener.join();
    return Fail(status);
  };
  const std::string tokenizer_path = JoinPath(args.model_dir, "tokenizer.json");
  std::unique_ptr<Tokenizer> tokenizer;
  if (FileExists(tokenizer_path)) {
    Result<std::unique_ptr<Tokenizer>> loaded = Tokenizer::Load(tokenizer_path);
    if (!loaded.ok()) return fail(loaded.status());
    tokenizer = std::move(loaded).value();
  }
  executor::GeneratorOptions options;
  options.model_dir = args.model_dir;
  options.n_threads = args.threads;
  options.device = args.device;
  Result<std::unique_ptr<ExpertProvider>> created = make_provider();
  if (!created.ok()) return fail(created.status());
  std::unique_ptr<ExpertProvider> provider = std::move(created).value();
  options.expert_provider = provider.get();
  Result<std::unique_ptr<executor::Generator>> generator = executor::Generator::Create(options);
  if (!generator.ok()) return fail(generator.status());
  server.SetLoaded(std::move(tokenizer), std::move(provider), std::move(generator).value());
  server.StartBatching();
  std::fprintf(stderr, "I: serve: ready on http://%s:%d (up to %d sequences per batch)\n", args.host.c_str(),
               args.port, std::max(1, args.max_batch));
  while (signals.Wait(std::chrono::milliseconds(kSignalPollMillis)) == 0) {
    if (!svr.is_running() && !listen_ok.load()) break;
    if (tick) tick();
  }
  std::fprintf(stderr, "I: serve: stopping\n");
  svr.stop();
  listener.join();  // waits for the handlers, whose requests the batch loop still finishes
  server.StopBatching();
  std::fprintf(stderr, "I: serve: stopped\n");
  return listen_ok.load() ? 0 : 1;
}

int RunServeCommand(const ServeArgs& args) {
  TerminationSignals signals;  // before any thread exists (torch, runtime, httplib inherit the mask)
  if (!args.runtime.stats_json.empty()) {
    return Fail(Status::InvalidArgument("--stats-json is not supported by serve"));
  }
  return RunServe(args, [&args]() -> Result<std::unique_ptr<ExpertProvider>> {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<runtime::OffloadExpertProvider> provider,
                        CreateRuntime(args.runtime, args.model_dir, args.device));
    return std::unique_ptr<ExpertProvider>(std::move(provider));
  }, signals);
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServeArgs>();  // shared: outlives this function, owned by the callback
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  cmd->add_option("--model", args->model_dir, "model directory (Hugging Face checkpoint or compressed)")
      ->required();
  cmd->add_option("--host", args->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "TCP port")->capture_default_str()->check(CLI::Range(1, 65535));
  cmd->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' (except /health)");
  cmd->add_option("--threads", args->threads, "torch threads (0 = hardware concurrency)")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu, or cuda[:N] with a CUDA libtorch")->capture_default_str();
  cmd->add_option("--max-batch", args->max_batch, "requests decoded together (continuous batching)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  AddRuntimeFlags(cmd, &args->runtime, /*budget_required=*/false);
  cmd->callback([args, exit_code] { *exit_code = RunServeCommand(*args); });
}

int RunExecutorService(const ServiceConfig& config, TerminationSignals& signals) {
  ServeArgs args;
  args.model_dir = config.model_dir;
  args.host = config.http_host;
  args.port = static_cast<int>(config.http_port);
  args.api_key = config.http_api_key;
  args.threads = static_cast<int>(config.threads);
  args.device = config.device;
  args.max_batch = static_cast<int>(config.http_max_batch);
  if (args.max_batch < 1) return Fail(Status::InvalidArgument("executor: http.max_batch must be >= 1"));
  if (args.model_dir.empty()) return Fail(Status::InvalidArgument("executor: model_dir is not set"));
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server = StartMetrics(config, "executor",
                                                                               config.metrics_port_executor);
  if (!metrics_server.ok()) return Fail(metrics_server.status());
  metrics::ExecutorMetrics executor_metrics((*metrics_server)->registry());
  metrics::BadMessageMetrics bad_metrics((*metrics_server)->registry());
  std::atomic<runtime::RemoteExpertProvider*> connected{nullptr};
  auto tick = [&connected, &bad_metrics] {
    if (runtime::RemoteExpertProvider* r = connected.load()) bad_metrics.Set(r->bad_messages());
  };
  return RunServe(args, [&config, &signals, &connected]() -> Result<std::unique_ptr<ExpertProvider>> {
    runtime::RemoteProviderConfig remote;
    remote.endpoint = config.endpoint_scheduler;
    remote.arena_name = config.shm_name;
    remote.timeout = std::chrono::milliseconds(config.timeout_ms);
    remote.register_with_cuda = true;  // kept only when built with CUDA and a device answers
    bool told = false;
    while (true) {  // the arena appears when the cache-manager has planned the cache
      Result<std::unique_ptr<runtime::RemoteExpertProvider>> provider = runtime::RemoteExpertProvider::Connect(remote);
      if (provider.ok()) {
        ServiceLog("executor", fmt::format("connected to the scheduler at {} (arena {})", remote.endpoint,
                                           remote.arena_name));
        connected.store(provider->get());
        return std::unique_ptr<ExpertProvider>(std::move(provider).value());
      }
      const StatusCode code = provider.status().code();
      if (code != StatusCode::kNotFound && code != StatusCode::kUnavailable) return provider.status();
      if (!told) ServiceLog("executor", fmt::format("waiting for the arena {}", remote.arena_name));
      told = true;
      if (signals.Wait(std::chrono::milliseconds(200)) != 0) return Status::Unavailable("stopped while loading");
    }
  }, signals, &executor_metrics, tick);
}

}  // namespace zipmoe::cli
