#include "services/front/front_server.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <cctype>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "common/file_util.h"
#include "services/api/api_server.h"
#include "services/api/front_protocol.h"
#include "services/api/openai_protocol.h"

namespace zipmoe::front {
namespace {

using api::HttpExchange;
using api::HttpRequest;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kProbePeriod = std::chrono::milliseconds(100);

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Framing and hop-by-hop headers (RFC 9110 §7.6.1) stay on their connection.
bool PassedOn(const std::string& name) {
  static const std::vector<std::string> kDropped = {"host",    "content-length", "transfer-encoding", "connection",
                                                    "keep-alive", "expect",     "te",                "trailer",
                                                    "upgrade", "proxy-connection", "proxy-authorization"};
  const std::string lower = Lower(name);
  return std::find(kDropped.begin(), kDropped.end(), lower) == kDropped.end() && lower != Lower(api::kFrontHeader);
}

// The path as a request target: bytes outside RFC 3986's unreserved set and '/' percent-encoded.
std::string Target(const HttpRequest& request) {
  std::string out;
  for (unsigned char c : request.path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", static_cast<unsigned>(c));
    }
  }
  if (!request.query.empty()) out += "?" + request.query;
  return out;
}

httplib::Request UpstreamRequest(const HttpRequest& request, const std::string& body, bool front_protocol) {
  httplib::Request req;
  req.method = request.method;
  req.path = Target(request);
  for (const auto& [name, value] : request.headers)
    if (PassedOn(name)) req.headers.emplace(name, value);
  if (front_protocol) req.headers.emplace(api::kFrontHeader, "1");
  req.body = body;
  if (!body.empty() && req.headers.find("Content-Type") == req.headers.end() &&
      req.headers.find("content-type") == req.headers.end())
    req.headers.emplace("Content-Type", "application/json");
  return req;
}

void SetTimeouts(httplib::Client& client, std::chrono::milliseconds read) {
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(read);
  client.set_write_timeout(std::chrono::seconds(30));
  client.set_keep_alive(false);
}

// GET `path` from the executor at `address` (the probes: /health, /metrics).
httplib::Result GetFromExecutor(const std::pair<std::string, int>& address, const std::string& path,
                                std::chrono::milliseconds timeout) {
  httplib::Client client(address.first, address.second);
  SetTimeouts(client, timeout);
  return client.Get(path.c_str());
}

std::string ErrorText(int status, const std::string& message) { return api::ApiServer::ErrorBody(status, message).second; }

// The response's "id" and "created" from the first "data: {...}" event of `payload`.
void TakeIdentity(const std::string& payload, api::ResumeState* state) {
  const size_t at = payload.find("data: {");
  if (at == std::string::npos) return;
  const size_t end = payload.find("\n\n", at);
  const json j = json::parse(payload.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6),
                             nullptr, false);
  if (j.is_object() && j.contains("id") && j["id"].is_string() && j.contains("created") &&
      j["created"].is_number_integer()) {
    state->id = j["id"].get<std::string>();
    state->created = j["created"].get<int64_t>();
  }
}

// While a handler waits on the executor (httplib's send blocks), a watcher thread closes the upstream
// connection when the front stops or, with `probe_client`, when the client has gone away (probed every
// 200 ms), so the executor cancels the request instead of generating for no one. httplib's
// Client::stop is its way to abort a request from another thread. The handler thread does not touch
// the exchange while send runs without a content receiver (the non-streaming case), so the watcher's
// ClientGone probes stand in for it; a stream's receiver writes to the client itself, so there the
// watcher only watches `stopping` (a failed write ends the transfer anyway).
class UpstreamWatch {
 public:
  UpstreamWatch(httplib::Client& client, HttpExchange& exchange, const std::atomic<bool>& stopping, bool probe_client)
      : thread_([this, &client, &exchange, &stopping, probe_client] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!done_) {
            cv_.wait_for(lock, std::chrono::milliseconds(200));
            if (done_) break;
            if (stopping.load() || (probe_client && exchange.ClientGone())) {
              client.stop();
              break;
            }
          }
        }) {}
  ~UpstreamWatch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  UpstreamWatch(const UpstreamWatch&) = delete;
  UpstreamWatch& operator=(const UpstreamWatch&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

FrontServer::FrontServer(FrontOptions options, prometheus::Registry* registry)
    : options_(std::move(options)), registry_(registry) {
  if (registry_ != nullptr) {
    auto& requests = prometheus::BuildCounter()
                         .Name("zipmoe_front_requests_total")
                         .Help("Requests the HTTP front passed to the executor, by outcome: completed (an executor "
                               "answered, after re-issues if it died) or failed (none answered in time).")
                         .Register(*registry_);
    completed_metric_ = &requests.Add({{"outcome", "completed"}});
    failed_metric_ = &requests.Add({{"outcome", "failed"}});
    resumes_metric_ = &prometheus::BuildCounter()
                    .Name("zipmoe_front_resumes_total")
                    .Help("Requests the HTTP front re-issued because the executor's connection broke (it died).")
                    .Register(*registry_)
                    .Add({});
  }
}

FrontServer::~FrontServer() = default;

void FrontServer::Drain(std::chrono::milliseconds grace) {
  draining_.store(true);
  const auto deadline = Clock::now() + grace;
  while (active_.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void FrontServer::CountCompleted() {
  ++completed_;
  if (completed_metric_ != nullptr) completed_metric_->Increment();
}

void FrontServer::CountFailed() {
  ++failed_;
  if (failed_metric_ != nullptr) failed_metric_->Increment();
}

void FrontServer::CountResume() {
  ++resumes_count_;
  if (resumes_metric_ != nullptr) resumes_metric_->Increment();
}

FrontCounters FrontServer::counters() const { return FrontCounters{completed_.load(), resumes_count_.load(), failed_.load()}; }

std::optional<std::pair<std::string, int>> FrontServer::ExecutorAddress() const {
  Result<std::string> text = ReadFileToString(options_.executor_address_file);
  if (!text.ok()) return std::nullopt;
  std::string s = *text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  int port = 0;
  for (size_t i = colon + 1; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i])) || port > 65535) return std::nullopt;
    port = port * 10 + (s[i] - '0');
  }
  if (port < 1 || port > 65535) return std::nullopt;
  return std::make_pair(s.substr(0, colon), port);
}

std::optional<std::pair<std::string, int>> FrontServer::WaitForExecutor(Clock::time_point deadline,
                                                                        HttpExchange* exchange) {
  while (!stopping_.load()) {
    if (std::optional<std::pair<std::string, int>> address = ExecutorAddress()) {
      httplib::Result health = GetFromExecutor(*address, "/health", std::chrono::seconds(2));
      // Serving: 200, or 503 "error" (loaded; its last sequence failed, the next may not).
      if (health && (health->status == 200 ||
                     (health->status == 503 && health->body.find("\"error\"") != std::string::npos)))
        return address;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    if (exchange != nullptr && exchange->ClientGone()) return std::nullopt;
    std::this_thread::sleep_for(kProbePeriod);
  }
  return std::nullopt;
}

void FrontServer::CheckHead(const HttpRequest& head, HttpExchange& exchange) {
  api::ApiServer::CheckHeadWithKey(options_.api_key, head, exchange);
}

void FrontServer::Handle(const HttpRequest& request, HttpExchange& exchange) {
  const bool get = request.method == "GET" || request.method == "HEAD";
  if (request.path == "/health" && get) {
    if (draining_.load()) {
      exchange.Send(503, "application/json", json{{"status", "stopping"}}.dump());
      return;
    }
    return HandleHealth(exchange);
  }
  if (request.path == "/metrics" && get) return HandleMetrics(exchange);
  if (draining_.load()) {
    exchange.Send(503, "application/json", ErrorText(503, "the server is shutting down"));
    return;
  }
  active_.fetch_add(1);
  struct Done {
    std::atomic<int>* n;
    ~Done() { n->fetch_sub(1); }
  } done{&active_};
  if (request.method == "POST" && (request.path == "/v1/completions" || request.path == "/v1/chat/completions")) {
    // A seed of the front's when the client gave none: every try samples the same tokens.
    json j = json::parse(request.body, nullptr, false);
    if (j.is_object()) {
      j.erase(api::kResumeField);  // only the front says what a client already has
      if (!j.contains("seed")) {
        static thread_local std::mt19937_64 rng{std::random_device{}()};
        j["seed"] = rng() >> 1;
      }
      const std::string body = j.dump(-1, ' ', false, json::error_handler_t::replace);
      if (j.contains("stream") && j["stream"].is_boolean() && j["stream"].get<bool>())
        return ForwardStream(request, body, exchange);
      HttpRequest seeded = request;
      seeded.body = body;
      return Forward(seeded, exchange);
    }
  }
  Forward(request, exchange);
}

void FrontServer::HandleHealth(HttpExchange& exchange) {
  if (std::optional<std::pair<std::string, int>> address = ExecutorAddress()) {
    if (httplib::Result health = GetFromExecutor(*address, "/health", std::chrono::seconds(2))) {
      exchange.Send(health->status, "application/json", health->body);
      return;
    }
  }
  exchange.Send(503, "application/json",
                json{{"status", "loading"}, {"message", "the executor is not answering (starting or restarting)"}}.dump());
}

void FrontServer::HandleMetrics(HttpExchange& exchange) {
  std::string text;
  if (std::optional<std::pair<std::string, int>> address = ExecutorAddress()) {
    httplib::Result metrics = GetFromExecutor(*address, "/metrics", std::chrono::seconds(5));
    if (metrics && metrics->status == 200) text = metrics->body;
  }
  if (registry_ != nullptr) text += prometheus::TextSerializer().Serialize(registry_->Collect());
  exchange.Send(200, "text/plain; version=0.0.4; charset=utf-8", text);
}

void FrontServer::Forward(const HttpRequest& request, HttpExchange& exchange) {
  for (int attempt = 1; attempt <= std::max(1, options_.max_attempts); ++attempt) {
    std::optional<std::pair<std::string, int>> address = WaitForExecutor(Clock::now() + options_.resume_timeout, &exchange);
    if (!address) break;
    httplib::Client client(address->first, address->second);
    SetTimeouts(client, options_.read_timeout);
    std::optional<UpstreamWatch> watch(std::in_place, client, exchange, stopping_, /*probe_client=*/true);
    httplib::Result answer = client.send(UpstreamRequest(request, request.body, /*front_protocol=*/false));
    watch.reset();
    if (answer) {
      CountCompleted();
      const std::string type = answer->get_header_value("Content-Type");
      if (answer->has_header("Allow")) exchange.AddHeader("Allow", answer->get_header_value("Allow"));  // a 405's
      exchange.Send(answer->status, type.empty() ? "application/json" : type, answer->body);
      return;
    }
    if (exchange.ClientGone()) return;  // nothing to answer; the executor cancelled the request
    if (stopping_.load()) break;
    if (attempt < options_.max_attempts) {
      CountResume();
      std::fprintf(stderr, "%s",
                   fmt::format("I: front: {} {}: the executor's connection broke ({}); sending it again\n", request.method,
                               request.path, httplib::to_string(answer.error()))
                       .c_str());
    }
  }
  CountFailed();
  exchange.Send(503, "application/json",
                ErrorText(503, "the executor did not answer (it is restarting or stopped); retry when GET /health is 200"));
}

void FrontServer::ForwardStream(const HttpRequest& request, const std::string& body, HttpExchange& exchange) {
  api::ResumeState state;
  bool any_unit = false;     // state holds something the client has
  bool began = false;        // the client's 200 text/event-stream is under way
  bool client_ok = true;
  for (int attempt = 1; attempt <= std::max(1, options_.max_attempts); ++attempt) {
    std::optional<std::pair<std::string, int>> address = WaitForExecutor(Clock::now() + options_.resume_timeout, &exchange);
    if (!address) break;
    std::string sent = body;
    if (any_unit) {
      json j = json::parse(body);
      j[api::kResumeField] = api::ResumeToJson(state);
      sent = j.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    httplib::Request req = UpstreamRequest(request, sent, /*front_protocol=*/true);
    int status = 0;
    std::string type;
    bool buffered = false;  // not an event stream (an error answer): passed back whole
    bool tail = false;
    bool broken_protocol = false;
    std::string buffer, whole;
    req.response_handler = [&](const httplib::Response& response) {
      status = response.status;
      type = response.get_header_value("Content-Type");
      buffered = !(status == 200 && type.rfind("text/event-stream", 0) == 0);
      if (!buffered && !began) {
        began = true;
        client_ok = exchange.BeginStream(200, "text/event-stream");
      }
      return client_ok;
    };
    // Applies the complete units at the front of `buffer`; false stops the transfer.
    auto apply_units = [&]() {
      const std::string_view prefix = api::kUnitPrefix;
      while (!buffer.empty()) {
        const size_t n = std::min(buffer.size(), prefix.size());
        if (std::string_view(buffer).substr(0, n) != prefix.substr(0, n)) {
          broken_protocol = true;  // an executor that does not speak front_protocol.h
          return false;
        }
        const size_t newline = buffer.find('\n');
        if (newline == std::string::npos) return true;
        const json meta = json::parse(buffer.substr(prefix.size(), newline - prefix.size()), nullptr, false);
        if (!meta.is_object() || !meta.contains("bytes") || !meta["bytes"].is_number_unsigned()) {
          broken_protocol = true;
          return false;
        }
        const size_t bytes = meta["bytes"].get<size_t>();
        if (buffer.size() < newline + 1 + bytes) return true;
        const std::string payload = buffer.substr(newline + 1, bytes);
        buffer.erase(0, newline + 1 + bytes);
        const std::string kind = meta.value("k", "");
        if (kind == "head") {
          state.head_sent = true;
        } else if (kind == "tok" && meta.contains("i") && meta["i"].is_number_unsigned()) {
          const size_t index = meta["i"].get<size_t>();
          auto it = std::find_if(state.choices.begin(), state.choices.end(),
                                 [&](const api::ChoiceResume& c) { return c.index == index; });
          if (it == state.choices.end()) {
            state.choices.push_back(api::ChoiceResume{index, {}, false});
            it = state.choices.end() - 1;
          }
          if (meta.contains("t") && meta["t"].is_array() && !meta["t"].empty())
            it->groups.push_back(meta["t"].get<std::vector<int32_t>>());
          if (meta.value("f", false)) it->finished = true;
        } else if (kind == "tail") {
          tail = true;
        }
        if (state.id.empty()) TakeIdentity(payload, &state);
        any_unit = true;
        if (!payload.empty() && !(client_ok = exchange.Write(payload))) return false;
      }
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (buffered) {
        whole.append(data, n);
        return true;
      }
      buffer.append(data, n);
      return apply_units();
    };
    httplib::Client client(address->first, address->second);
    SetTimeouts(client, options_.read_timeout);
    std::optional<UpstreamWatch> watch(std::in_place, client, exchange, stopping_, /*probe_client=*/false);
    httplib::Result answer = client.send(req);
    watch.reset();
    if (answer && buffered) {
      CountCompleted();
      if (!began) {
        exchange.Send(status, type.empty() ? "application/json" : type, whole);
      } else {  // a re-issue refused mid-stream: the client learns it as the stream's error event
        exchange.Write("data: " + whole + "\n\n" + "data: [DONE]\n\n");
        exchange.EndStream();
      }
      return;
    }
    if (tail) {
      CountCompleted();
      exchange.EndStream();
      return;
    }
    if (!client_ok) return;  // the client went away: the transfer was stopped, the executor cancels
    if (broken_protocol || exchange.ClientGone() || stopping_.load()) break;
    if (attempt < options_.max_attempts) {
      CountResume();
      size_t tokens = 0;
      for (const api::ChoiceResume& c : state.choices)
        for (const auto& g : c.groups) tokens += g.size();
      std::fprintf(stderr, "%s",
                   fmt::format("I: front: {} stream: the executor's connection broke ({}); resuming after {} token(s)\n",
                               request.path, answer ? "ended early" : httplib::to_string(answer.error()), tokens)
                       .c_str());
    }
  }
  CountFailed();
  const std::string message = "the executor did not answer (it is restarting or stopped); retry when GET /health is 200";
  if (!began) {
    exchange.Send(503, "application/json", ErrorText(503, message));
  } else if (client_ok) {
    exchange.Write("data: " + ErrorText(503, message) + "\n\n" + "data: [DONE]\n\n");
    exchange.EndStream();
  }
}

}  // namespace zipmoe::front
