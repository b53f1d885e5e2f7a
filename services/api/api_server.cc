// ApiServer's HTTP side (api_server.h): routing, authentication, the models / tokenize / detokenize
// routes and the completion handlers (parse, submit, wait or stream, answer). The batch loop is
// api_batcher.cc.
#include "services/api/api_server.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <ctime>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "common/thread_name.h"
#include "common/tokenizer/tokenizer_unicode.h"
#include "services/api/api_server_jobs.h"
#include "services/api/chat_output_parser.h"
#include "services/api/front_protocol.h"
#include "services/service_base/service_metrics.h"

namespace zipmoe::api {
namespace {

using nlohmann::json;

constexpr auto kClientProbe = std::chrono::milliseconds(200);  // how often a waiting handler probes its client

// JSON text of a response: invalid UTF-8 (a partial multi-byte token, bytes echoed in an error)
// becomes U+FFFD instead of throwing.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The API's own routes, "/v1/models/{id}" included: they need the key; any other path is a 404
// (/health and /metrics are answered before, without a key).
bool IsApiPath(const std::string& path) {
  static const std::vector<std::string> kRoutes = {"/v1/models", "/v1/completions", "/v1/chat/completions",
                                                   "/tokenize", "/detokenize"};
  return std::find(kRoutes.begin(), kRoutes.end(), path) != kRoutes.end() || path.rfind("/v1/models/", 0) == 0;
}

ApiError Unauthorized() {
  return ApiError{401, "authentication_error", "missing or invalid API key (Authorization: Bearer KEY)", "",
                  "invalid_api_key"};
}

// A /tokenize or /detokenize body of `bytes` above ApiServer::kTokenizeMaxBodyBytes.
ApiError TokenizeBodyTooLarge(const std::string& path, size_t bytes) {
  return ApiError{413, "invalid_request_error",
                  fmt::format("the {} body ({} bytes) is larger than {} bytes", path, bytes,
                              ApiServer::kTokenizeMaxBodyBytes),
                  "", ""};
}

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

namespace {
std::string RandomIdPrefix() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}
}  // namespace

ApiServer::ApiServer(ApiServerOptions options) : options_(std::move(options)), id_prefix_(RandomIdPrefix()) {}

ApiServer::~ApiServer() { StopBatching(); }

void ApiServer::SetMetrics(metrics::ExecutorMetrics* metrics, prometheus::Registry* registry,
                           std::function<void()> refresh) {
  metrics_ = metrics;
  registry_ = registry;
  refresh_ = std::move(refresh);
}

void ApiServer::SetLoaded(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<ExpertProvider> provider,
                          std::unique_ptr<executor::Generator> generator) {
  tokenizer_ = std::move(tokenizer);
  provider_ = std::move(provider);
  generator_ = std::move(generator);
  batch_thread_ = std::thread([this] {
    SetCurrentThreadName("zm-batch");
    BatchLoop();
  });
  ready_.store(true, std::memory_order_release);
}

size_t ApiServer::waiting() const {
  MutexLock lock(&queue_mu_);
  return queue_.size();
}

size_t ApiServer::running() const {
  MutexLock lock(&queue_mu_);
  return running_count_;
}

bool ApiServer::IsProbe(const HttpRequest& head) {
  return (head.method == "GET" || head.method == "HEAD") && (head.path == "/health" || head.path == "/metrics");
}

std::pair<std::string, std::string> ApiServer::ErrorBody(int status, const std::string& message) {
  ApiError e;
  e.http_status = status;
  e.type = status >= 500 ? "server_error" : "invalid_request_error";
  e.message = message;
  return {"application/json", Dump(ErrorJson(e))};
}

void ApiServer::SendJson(HttpExchange& exchange, int status, const json& body) {
  exchange.Send(status, "application/json", Dump(body));
}

void ApiServer::SendError(HttpExchange& exchange, const ApiError& error) {
  SendJson(exchange, error.http_status, ErrorJson(error));
}

void ApiServer::MethodNotAllowed(HttpExchange& exchange, const char* allow, const std::string& message) {
  exchange.AddHeader("Allow", allow);  // RFC 9110 §15.5.6: a 405 lists the methods the resource takes
  SendError(exchange, ApiError{405, "invalid_request_error", message, "", ""});
}

std::string ApiServer::TokenText(int32_t id) const {
  return tokenizer_ ? tokenizer_->Decode({id}) : std::to_string(id);
}

std::string ApiServer::TokenBytes(int32_t id) const {
  return tokenizer_ ? tokenizer_->DecodeBytes({id}) : std::to_string(id);
}

// ---------------------------------------------------------------------------------------------
// Routing

void ApiServer::Handle(const HttpRequest& http, HttpExchange& exchange) {
  const std::string& path = http.path;
  std::string route = path;
  if (path.rfind("/v1/models/", 0) == 0) route = "/v1/models/{id}";
  struct CountOnExit {
    ApiServer* self;
    const std::string& route;
    HttpExchange& exchange;
    ~CountOnExit() {
      if (self->metrics_ != nullptr) self->metrics_->CountHttp(route, exchange.status());
    }
  } count{this, route, exchange};
  const bool get = http.method == "GET" || http.method == "HEAD";
  const bool post = http.method == "POST";
  if (path == "/health") {
    if (!get) return MethodNotAllowed(exchange, "GET, HEAD", "use GET /health");
    const char* state = !ready_.load(std::memory_order_acquire) ? "loading"
                        : draining_.load()                       ? "stopping"
                                                                 : "ok";
    json body{{"status", state}};
    if (std::string(state) == "ok") {
      MutexLock lock(&health_mu_);
      if (!last_error_.empty()) body = json{{"status", "error"}, {"message", last_error_}};
    }
    return SendJson(exchange, body["status"] == "ok" ? 200 : 503, body);
  }
  if (path == "/metrics") {
    if (!get) return MethodNotAllowed(exchange, "GET, HEAD", "use GET /metrics");
    if (registry_ == nullptr) return SendError(exchange, ApiError{404, "not_found_error", "no metrics", "", ""});
    {
      MutexLock lock(&refresh_mu_);
      if (refresh_) refresh_();
    }
    const std::string text = prometheus::TextSerializer().Serialize(registry_->Collect());
    exchange.Send(200, "text/plain; version=0.0.4; charset=utf-8", text);
    return;
  }
  if (!IsApiPath(path))
    return SendError(exchange, ApiError{404, "not_found_error", fmt::format("unknown path {} {}", http.method, path),
                                        "", ""});
  if (!Authorized(http)) return SendError(exchange, Unauthorized());
  if (!ready_.load(std::memory_order_acquire))
    return SendError(exchange, ApiError{503, "server_error",
                                        "the model is still loading; retry when GET /health is 200", "", ""});
  if (draining_.load()) return SendError(exchange, ApiError{503, "server_error", "the server is shutting down", "", ""});
  if (path == "/v1/models" || route == "/v1/models/{id}") {
    if (!get) return MethodNotAllowed(exchange, "GET, HEAD", "use GET");
    return HandleModels(http, exchange);
  }
  if (!post)
    return MethodNotAllowed(exchange, "POST", fmt::format("use POST {}", path));
  if (path == "/v1/completions") return HandleCompletion(http, exchange, Endpoint::kCompletions);
  if (path == "/v1/chat/completions") return HandleCompletion(http, exchange, Endpoint::kChat);
  if (path == "/tokenize") return HandleTokenize(http, exchange);
  return HandleDetokenize(http, exchange);
}

bool ApiServer::Authorized(const HttpRequest& http) const { return KeyMatches(options_.api_key, http); }

bool ApiServer::KeyMatches(const std::string& api_key, const HttpRequest& http) {
  if (api_key.empty()) return true;
  const std::string auth = http.Header("Authorization");
  const std::string want = "Bearer " + api_key;
  bool same = auth.size() == want.size();
  unsigned char diff = 0;
  for (size_t i = 0; same && i < want.size(); ++i) diff |= static_cast<unsigned char>(auth[i] ^ want[i]);
  return same && diff == 0;
}

void ApiServer::CheckHead(const HttpRequest& head, HttpExchange& exchange) {
  CheckHeadWithKey(options_.api_key, head, exchange);
}

void ApiServer::CheckHeadWithKey(const std::string& api_key, const HttpRequest& head, HttpExchange& exchange) {
  const std::string& path = head.path;
  if (!IsApiPath(path)) return;  // Handle answers 404 (or /health, /metrics, which need no key)
  if (!KeyMatches(api_key, head)) return SendError(exchange, Unauthorized());
  if (path == "/tokenize" || path == "/detokenize") {
    // The HTTP layer has checked the header (decimal digits, at most 18 of them); stoull stays in range.
    const std::string length = head.Header("Content-Length");
    if (!length.empty() && length.size() < 19 && std::stoull(length) > kTokenizeMaxBodyBytes)
      return SendError(exchange, TokenizeBodyTooLarge(path, std::stoull(length)));
  }
}

void ApiServer::HandleModels(const HttpRequest& http, HttpExchange& exchange) {
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(started_.time_since_epoch()).count();
  auto entry = [&](const std::string& name) {
    return json{{"id", name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "zipmoe"},
                {"max_model_len", generator_->config().max_position_embeddings}};
  };
  if (http.path == "/v1/models") {
    json data = json::array();
    for (const std::string& name : options_.served_model_names) data.push_back(entry(name));
    return SendJson(exchange, 200, json{{"object", "list"}, {"data", data}});
  }
  const std::string id = http.path.substr(std::string("/v1/models/").size());
  for (const std::string& name : options_.served_model_names)
    if (name == id) return SendJson(exchange, 200, entry(name));
  SendError(exchange, ApiError{404, "invalid_request_error", fmt::format("the model '{}' does not exist", id), "model",
                               "model_not_found"});
}

void ApiServer::HandleTokenize(const HttpRequest& http, HttpExchange& exchange) {
  if (http.body.size() > kTokenizeMaxBodyBytes)  // a chunked body (no Content-Length for CheckHead)
    return SendError(exchange, TokenizeBodyTooLarge(http.path, http.body.size()));
  json j;
  if (ApiError bad; !ParseJsonObject(http.body, &j, &bad)) return SendError(exchange, bad);
  if (!tokenizer_) return SendError(exchange, BadRequest("the model directory has no tokenizer (tokenizer.json or tiktoken.model)"));
  if (!j.contains("content") || !j["content"].is_string())
    return SendError(exchange, BadRequest("'content' must be a string", "content"));
  bool add_special = false, with_pieces = false;
  if (j.contains("add_special") && !j["add_special"].is_null()) {
    if (!j["add_special"].is_boolean()) return SendError(exchange, BadRequest("'add_special' must be a boolean", "add_special"));
    add_special = j["add_special"].get<bool>();
  }
  if (j.contains("with_pieces") && !j["with_pieces"].is_null()) {
    if (!j["with_pieces"].is_boolean()) return SendError(exchange, BadRequest("'with_pieces' must be a boolean", "with_pieces"));
    with_pieces = j["with_pieces"].get<bool>();
  }
  Result<std::vector<int32_t>> ids = tokenizer_->Encode(j["content"].get<std::string>(), add_special);
  if (!ids.ok()) return SendError(exchange, BadRequest(ids.status().ToString(), "content"));
  json tokens = json::array();
  for (int32_t id : *ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    // The piece as text when it is valid UTF-8 on its own, else its bytes (llama.cpp's format).
    const std::string piece = tokenizer_->DecodeBytes({id});
    if (tokenizer::IsValidUtf8(piece)) {
      tokens.push_back(json{{"id", id}, {"piece", piece}});
    } else {
      tokens.push_back(json{{"id", id}, {"piece", Bytes(piece)}});
    }
  }
  SendJson(exchange, 200, json{{"tokens", tokens}});
}

void ApiServer::HandleDetokenize(const HttpRequest& http, HttpExchange& exchange) {
  if (http.body.size() > kTokenizeMaxBodyBytes)
    return SendError(exchange, TokenizeBodyTooLarge(http.path, http.body.size()));
  json j;
  if (ApiError bad; !ParseJsonObject(http.body, &j, &bad)) return SendError(exchange, bad);
  if (!tokenizer_) return SendError(exchange, BadRequest("the model directory has no tokenizer (tokenizer.json or tiktoken.model)"));
  if (!j.contains("tokens") || !j["tokens"].is_array())
    return SendError(exchange, BadRequest("'tokens' must be an array of token ids", "tokens"));
  std::vector<int32_t> ids;
  const int64_t vocab = generator_->config().vocab_size;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      return SendError(exchange, BadRequest(fmt::format("'tokens': {} is not an id in [0, {})", t.dump(), vocab), "tokens"));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  SendJson(exchange, 200, json{{"content", tokenizer_->Decode(ids)}});
}

// ---------------------------------------------------------------------------------------------
// Completions

namespace {

// OpenAI's tool_calls array; `first`: the index of the first call within its choice (streamed
// chunks carry it, as the SDK merges deltas by index).
json ToolCallsJson(const std::vector<ParsedToolCall>& calls, int first, bool with_index) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c{{"id", calls[i].id},
           {"type", "function"},
           {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = first + static_cast<int>(i);
    out.push_back(std::move(c));
  }
  return out;
}

void AppendDelta(ChatDelta more, ChatDelta* d) {
  d->content += more.content;
  d->reasoning += more.reasoning;
  for (ParsedToolCall& c : more.tool_calls) d->tool_calls.push_back(std::move(c));
}


// `bytes`: the token's own bytes, which may be part of a UTF-8 sequence (the text shows U+FFFD).
json ChatLogprobEntry(const std::string& token, const std::string& raw, float logprob) {
  return json{{"token", token}, {"logprob", logprob}, {"bytes", Bytes(raw)}};
}

}  // namespace

void ApiServer::HandleCompletion(const HttpRequest& http, HttpExchange& exchange, Endpoint endpoint) {
  const bool chat = endpoint == Endpoint::kChat;
  auto request = std::make_shared<Request>();
  ApiError err;
  const ProtocolContext ctx{tokenizer_.get(), &generator_->config()};
  // Sent by the HTTP front (front_protocol.h): streamed in units; a re-issued request names what the
  // client already has in "zipmoe_resume", which the OpenAI parser never sees.
  request->front = http.Header(kFrontHeader) == "1";
  std::optional<ResumeState> resume;
  std::string stripped;
  const std::string* body = &http.body;
  if (request->front && http.body.find(kResumeField) != std::string::npos) {
    json j = json::parse(http.body, nullptr, false);
    if (j.is_object() && j.contains(kResumeField)) {
      std::string why;
      resume.emplace();
      if (!ResumeFromJson(j[kResumeField], &*resume, &why)) return SendError(exchange, BadRequest(why, kResumeField));
      j.erase(kResumeField);
      stripped = j.dump();
      body = &stripped;
    }
  }
  if (!ParseCompletionRequest(*body, endpoint, ctx, &request->request, &err)) return SendError(exchange, err);
  const CompletionRequest& r = request->request;
  if (resume && !r.stream) return SendError(exchange, BadRequest("only a streaming request is resumed", kResumeField));
  if (!r.ignored.empty()) {
    std::string list;
    for (const std::string& f : r.ignored) list += (list.empty() ? "" : ", ") + f;
    std::fprintf(stderr, "%s", fmt::format("I: serve: fields without effect here, ignored: {}\n", list).c_str());
  }
  request->id = fmt::format("{}-{}{}", chat ? "chatcmpl" : "cmpl", id_prefix_, next_id_.fetch_add(1));
  request->model = r.model.empty() ? options_.served_model_names.front() : r.model;
  request->created = static_cast<int64_t>(std::time(nullptr));
  const int64_t context = generator_->config().max_position_embeddings;
  // Every choice's detokenizer skips special tokens, but for the chat syntax's markers where the
  // tokenizer makes them special (Mistral's [TOOL_CALLS], GLM's </think>, ...): the output parser reads those.
  std::vector<int32_t> keep_special;
  if (tokenizer_ && chat && r.chat_syntax.active()) {
    for (const std::string& marker : ChatSyntaxMarkers(r.chat_syntax)) {
      const std::optional<int32_t> id = tokenizer_->TokenToId(marker);
      if (id && tokenizer_->IsSpecialToken(*id)) keep_special.push_back(*id);
    }
  }
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    for (int k = 0; k < r.n; ++k) {
      auto job = std::make_unique<Job>();
      job->owner = request.get();
      job->index = p * static_cast<size_t>(r.n) + static_cast<size_t>(k);
      job->prompt = p;
      job->params.max_new_tokens = r.MaxNewTokens(p, context, generator_->config().is_encoder_decoder());
      job->params.sampling = r.sampling;
      job->params.stop_on_eos = !r.ignore_eos;
      job->params.stop_token_ids = r.stop_token_ids;
      job->params.min_new_tokens = std::min(r.min_tokens, job->params.max_new_tokens);
      job->params.logprobs = r.logprobs;
      job->sampler_stream = static_cast<uint64_t>(k);
      job->matcher = std::make_unique<StopMatcher>(r.stop);
      if (r.grammar != nullptr && tokenizer_) {
        std::call_once(constraint_vocab_once_, [&] {
          constraint_vocab_ = ConstraintVocabulary::Build(*tokenizer_, generator_->config().vocab_size,
                                                          generator_->config().eos_token_ids);
        });
        job->params.constraint = std::make_shared<JsonConstraint>(r.grammar, constraint_vocab_);
      }
      if (tokenizer_) {
        job->decoder = keep_special.empty() ? std::make_unique<StreamDecoder>(*tokenizer_, /*skip_special_tokens=*/true)
                                            : std::make_unique<StreamDecoder>(*tokenizer_, keep_special);
      }
      request->jobs.push_back(std::move(job));
    }
  }
  if (resume) {  // replay what the client has (front_protocol.h "Resuming")
    request->id = resume->id;
    request->created = resume->created;
    request->head_sent = resume->head_sent;
    const int64_t vocab = generator_->config().vocab_size;
    for (const ChoiceResume& c : resume->choices) {
      if (c.index >= request->jobs.size())
        return SendError(exchange, BadRequest(fmt::format("{}: choice {} does not exist", kResumeField, c.index),
                                              kResumeField));
      Job& job = *request->jobs[c.index];
      for (const std::vector<int32_t>& group : c.groups) {
        for (int32_t t : group) {
          if (t >= vocab)
            return SendError(exchange, BadRequest(fmt::format("{}: token {} is outside the vocabulary", kResumeField, t),
                                                  kResumeField));
          job.resume_tokens.push_back(t);
          ++job.count;
          job.FeedText(t);
          if ((job.params.stop_on_eos && generator_->config().IsEos(t)) || job.params.IsStopToken(t))
            job.eos_in_replay = true;
        }
        job.replayed_texts.push_back(job.matcher->TakeSafe(/*all=*/false));
      }
      job.resumed_finished = c.finished;
      job.ended_in_replay = !c.finished && (job.matcher->stopped() || job.eos_in_replay ||
                                            job.count >= job.params.max_new_tokens);
      if (job.resumed_finished) {
        job.done = true;
        job.text = job.matcher->text();
        job.completion_tokens = job.count;
        MutexLock lock(&request->mu);
        ++request->done_jobs;
      }
    }
  }
  const auto envelope = [&](bool chunk) {
    return json{{"id", request->id},
                {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
                {"created", request->created},
                {"model", request->model}};
  };
  // Log-probabilities of `tokens` in the endpoint's format; `offsets`: text offsets (completions).
  const auto logprobs_json = [&](const std::vector<executor::SampledToken>& tokens, const std::vector<size_t>& offsets) {
    if (chat) {
      json content = json::array();
      for (const executor::SampledToken& t : tokens) {
        json e = ChatLogprobEntry(TokenText(t.id), TokenBytes(t.id), t.logprob);
        json top = json::array();
        for (const executor::TokenLogprob& alt : t.top) top.push_back(ChatLogprobEntry(TokenText(alt.id), TokenBytes(alt.id), alt.logprob));
        e["top_logprobs"] = top;
        content.push_back(e);
      }
      return json{{"content", content}};
    }
    json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    for (size_t i = 0; i < tokens.size(); ++i) {
      toks.push_back(TokenText(tokens[i].id));
      lps.push_back(tokens[i].logprob);
      json top = json::object();
      for (const executor::TokenLogprob& alt : tokens[i].top) top[TokenText(alt.id)] = alt.logprob;
      // The chosen token is always among them (OpenAI: up to logprobs + 1 entries; vLLM likewise).
      const std::string chosen = TokenText(tokens[i].id);
      if (!top.contains(chosen) && std::isfinite(tokens[i].logprob)) top[chosen] = tokens[i].logprob;
      tops.push_back(top);
      offs.push_back(i < offsets.size() ? offsets[i] : 0);
    }
    return json{{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
  };
  const auto usage = [&] {
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    for (const PromptInput& p : r.prompts) prompt_tokens += static_cast<int64_t>(p.ids.size());
    std::vector<int64_t> cached(r.prompts.size(), 0);  // per prompt: what its choices found cached
    for (const auto& job : request->jobs) {
      completion_tokens += job->completion_tokens;
      if (job->prompt < cached.size()) cached[job->prompt] = std::max(cached[job->prompt], job->cached_tokens);
    }
    for (int64_t c : cached) cached_tokens += c;
    return json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  };
  const auto all_done = [&]() ZM_REQUIRES(request->mu) { return request->done_jobs == request->jobs.size(); };

  // A request with more sequences than the queue holds at all can never be queued: 400, not "retry later".
  if (request->jobs.size() > static_cast<size_t>(std::max(1, options_.max_waiting)))
    return SendError(exchange, BadRequest(fmt::format("the request asks for {} sequences (prompts x n); at most {} can "
                                                      "wait for a batch slot (--max-waiting)",
                                                      request->jobs.size(), std::max(1, options_.max_waiting)),
                                          "n"));
  if (!Submit(request))
    return SendError(exchange, ApiError{429, "rate_limit_error",
                                        fmt::format("{} sequences are already waiting for a batch slot (--max-waiting); "
                                                    "retry later",
                                                    waiting()),
                                        "", "queue_full"});
  if (!r.stream) {
    MutexLock lock(&request->mu);
    while (!all_done()) {
      if (request->cv.WaitFor(&lock, kClientProbe, all_done)) break;
      if (!request->cancelled.load() && exchange.ClientGone()) {
        request->cancelled.store(true);
        queue_cv_.NotifyAll();
      }
    }
    lock.Unlock();
    for (const auto& job : request->jobs)
      if (job->failed) return SendError(exchange, job->error);
    if (request->cancelled.load()) return SendError(exchange, ApiError{499, "invalid_request_error",
                                                                         "the client closed the connection", "", ""});
    json choices = json::array();
    for (const auto& job : request->jobs) {
      json choice{{"index", job->index}};
      std::string finish_reason = job->finish_reason;
      if (chat && r.chat_syntax.active()) {  // reasoning and tool calls apart from the answer
        ChatOutputParser parser(r.chat_syntax, fmt::format("call_{}_{}_", request->id, job->index));
        ChatDelta d = parser.Push(job->text);
        AppendDelta(parser.Finish(), &d);
        json message{{"role", "assistant"}, {"content", d.content}};
        if (!d.reasoning.empty()) message["reasoning_content"] = d.reasoning;
        if (!d.tool_calls.empty()) {
          message["tool_calls"] = ToolCallsJson(d.tool_calls, 0, /*with_index=*/false);
          if (IsBlank(d.content)) message["content"] = nullptr;
          if (finish_reason == "stop") finish_reason = "tool_calls";
        }
        choice["message"] = message;
      } else if (chat) {
        choice["message"] = json{{"role", "assistant"}, {"content", job->text}};
      } else {
        choice["text"] = r.echo ? r.prompts[job->prompt].text + job->text : job->text;
      }
      choice["logprobs"] = r.logprobs >= 0 ? logprobs_json(job->logprobs, job->offsets) : json(nullptr);
      choice["finish_reason"] = finish_reason;
      choices.push_back(choice);
    }
    json body = envelope(false);
    body["choices"] = choices;
    body["usage"] = usage();
    SendJson(exchange, 200, body);
    return;
  }
  // Streaming: this (the connection's) thread writes what the batch loop produced, so a slow client
  // never stalls the other sequences of the batch.
  exchange.BeginStream(200, "text/event-stream");
  bool client_ok = true;
  auto write = [&](const std::string& bytes) {
    if (!client_ok) return false;
    client_ok = exchange.Write(bytes);
    if (!client_ok && !request->cancelled.exchange(true)) queue_cv_.NotifyAll();
    return client_ok;
  };
  // For the front the events go out in units (front_protocol.h): `unit` collects them until flush.
  const bool front = request->front;
  std::string unit;
  auto send = [&](const json& j) {
    const std::string event = "data: " + Dump(j) + "\n\n";
    if (front) {
      unit += event;
      return client_ok;
    }
    return write(event);
  };
  auto flush = [&](const json& meta) {
    if (!front) return;
    const std::string header = UnitHeader(meta, unit.size());
    write(header + unit);
    unit.clear();
  };
  // Chat with reasoning / tool-call markers: one parser per choice, on this thread only.
  std::vector<std::unique_ptr<ChatOutputParser>> parsers(request->jobs.size());
  if (chat && r.chat_syntax.active()) {
    for (size_t i = 0; i < parsers.size(); ++i) {
      parsers[i] = std::make_unique<ChatOutputParser>(
          r.chat_syntax, fmt::format("call_{}_{}_", request->id, request->jobs[i]->index));
      // A resumed choice: the parser sees the text of each unit the client got, as it was cut.
      for (const std::string& text : request->jobs[i]->replayed_texts) (void)parsers[i]->Push(text);
    }
  }
  auto delta_json = [&](const ChatDelta& d, int first_call) {
    json delta = json::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) delta["tool_calls"] = ToolCallsJson(d.tool_calls, first_call, /*with_index=*/true);
    return delta;
  };
  auto chunk_choice = [&](const Job& job, const std::string& text, const json& finish_reason) {
    json c{{"index", job.index}};
    if (chat) {
      c["delta"] = text.empty() ? json::object() : json{{"content", text}};
    } else {
      c["text"] = text;
    }
    c["logprobs"] = nullptr;
    c["finish_reason"] = finish_reason;
    return c;
  };
  if (chat && !request->head_sent) {  // OpenAI sends the role first, one chunk per choice
    for (const auto& job : request->jobs) {
      json first = envelope(true);
      first["choices"] = json::array({json{{"index", job->index},
                                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                                           {"logprobs", nullptr},
                                           {"finish_reason", nullptr}}});
      send(first);
    }
  }
  if (r.echo && !request->head_sent) {  // the prompt first, as its own chunk per choice
    for (const auto& job : request->jobs) {
      json c = envelope(true);
      c["choices"] = json::array({chunk_choice(*job, r.prompts[job->prompt].text, nullptr)});
      send(c);
    }
  }
  if (!request->head_sent) flush(json{{"k", "head"}});
  std::vector<bool> finished_sent(request->jobs.size(), false);
  for (size_t i = 0; i < request->jobs.size(); ++i) finished_sent[i] = request->jobs[i]->resumed_finished;
  while (true) {
    struct Out {
      size_t job;
      std::string text;
      std::vector<executor::SampledToken> logprobs;
      std::vector<size_t> offsets;
      bool finish;
      std::vector<int32_t> tokens;
    };
    std::vector<Out> outs;
    bool done = false;
    {
      MutexLock lock(&request->mu);
      auto ready = [&]() ZM_REQUIRES(request->mu) {
        if (all_done()) return true;
        for (size_t i = 0; i < request->jobs.size(); ++i) {
          const Job& j = *request->jobs[i];
          if (!j.pending.empty() || !j.pending_logprobs.empty() || !j.pending_tokens.empty() ||
              (j.done && !finished_sent[i]))
            return true;
        }
        return false;
      };
      // Probe the client while nothing is ready to write (e.g. queued behind a full batch): a client
      // that left is cancelled then, not when its first token fails to go out after a whole prefill.
      while (!request->cv.WaitFor(&lock, kClientProbe, ready)) {
        if (!request->cancelled.load() && exchange.ClientGone()) {
          request->cancelled.store(true);
          queue_cv_.NotifyAll();
        }
      }
      for (size_t i = 0; i < request->jobs.size(); ++i) {
        Job& j = *request->jobs[i];
        const bool finish = j.done && !finished_sent[i];
        if (j.pending.empty() && j.pending_logprobs.empty() && j.pending_tokens.empty() && !finish) continue;
        outs.push_back(Out{i, std::move(j.pending), std::move(j.pending_logprobs), std::move(j.pending_offsets), finish,
                           std::move(j.pending_tokens)});
        j.pending.clear();
        j.pending_logprobs.clear();
        j.pending_offsets.clear();
        j.pending_tokens.clear();
        if (finish) finished_sent[i] = true;
      }
      done = all_done() && std::all_of(finished_sent.begin(), finished_sent.end(), [](bool b) { return b; });
    }
    for (Out& o : outs) {
      const Job& job = *request->jobs[o.job];
      ChatOutputParser* parser = parsers[o.job].get();
      if (parser != nullptr) {  // the text goes through the parser: content, reasoning, tool calls
        const int first_call = parser->tool_call_count();
        ChatDelta d = parser->Push(o.text);
        if (o.finish) AppendDelta(parser->Finish(), &d);
        if (!d.empty() || !o.logprobs.empty()) {
          json c = envelope(true);
          json choice = chunk_choice(job, "", nullptr);
          choice["delta"] = delta_json(d, first_call);
          if (r.logprobs >= 0) choice["logprobs"] = logprobs_json(o.logprobs, o.offsets);
          c["choices"] = json::array({choice});
          send(c);
        }
        if (o.finish && !job.failed) {
          const bool called = parser->tool_call_count() > 0 && job.finish_reason == "stop";
          json c = envelope(true);
          c["choices"] = json::array({chunk_choice(job, "", called ? "tool_calls" : job.finish_reason)});
          send(c);
        }
        flush(json{{"k", "tok"}, {"i", job.index}, {"t", o.tokens}, {"f", o.finish}});
        continue;
      }
      if (!o.text.empty() || !o.logprobs.empty()) {
        json c = envelope(true);
        json choice = chunk_choice(job, o.text, nullptr);
        if (r.logprobs >= 0) choice["logprobs"] = logprobs_json(o.logprobs, o.offsets);
        c["choices"] = json::array({choice});
        send(c);
      }
      if (o.finish && !job.failed) {
        json c = envelope(true);
        c["choices"] = json::array({chunk_choice(job, "", job.finish_reason)});
        send(c);
      }
      flush(json{{"k", "tok"}, {"i", job.index}, {"t", o.tokens}, {"f", o.finish}});
    }
    if (done) break;
  }
  for (const auto& job : request->jobs) {
    if (job->failed) {
      send(ErrorJson(job->error));
      break;
    }
  }
  if (r.include_usage) {
    json last = envelope(true);
    last["choices"] = json::array();
    last["usage"] = usage();
    send(last);
  }
  if (front) {
    unit += "data: [DONE]\n\n";
    flush(json{{"k", "tail"}});
  } else {
    write("data: [DONE]\n\n");
  }
  if (client_ok) exchange.EndStream();
}

}  // namespace zipmoe::api
