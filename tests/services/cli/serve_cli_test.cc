// `zipmoe serve`: starts the CLI's HTTP server on a free port as a background process, talks to it
// with curl, and checks that greedy /v1/completions matches `zipmoe generate --json`, streaming,
// the error statuses (400, 401, 404) and a clean exit on SIGTERM.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tests/services/cli/http_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;
using testing::CachedSynth;
using testing::ReadAll;
using testing::RunCli;
using testing::TempDir;
using testing::WriteAll;
using testing::FreePort;
using testing::Http;
using testing::HttpReply;
using testing::Alive;
using testing::ServeProcess;
using testing::SsePayloads;

TEST(ServeCli, CompletionsMatchGenerateStreamAndErrors) {
  const std::string model = CachedSynth("--arch qwen2_moe --preset tiny --seed 7");
  TempDir tmp;
  constexpr int kNewTokens = 6;
  const std::string ids = "5,17,300,42";
  auto gen = RunCli(fmt::format("generate --model {} --prompt-ids {} --max-new-tokens {} --threads 1 --json", model,
                                ids, kNewTokens));
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const json ref = json::parse(gen.output.substr(gen.output.find('{')));
  const auto ref_ids = ref["generated_ids"].get<std::vector<int32_t>>();
  const std::string ref_text = ref["text"].get<std::string>();
  ASSERT_FALSE(ref_ids.empty());

  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string log = tmp.Sub("serve.log");
  const std::string pid_file = tmp.Sub("serve.pid");
  const std::string key = "sekrit";
  auto start = RunCli(fmt::format("serve --model {} --port {} --threads 1 --api-key {} > {} 2>&1 & echo $! > {}",
                                  model, port, key, log, pid_file));
  ASSERT_EQ(start.exit_code, 0) << start.output;
  const int pid = std::atoi(ReadAll(pid_file).c_str());
  ASSERT_GT(pid, 0);
  struct Killer {  // never leave a server behind, whatever fails
    int pid;
    ~Killer() {
      if (pid > 0) ::kill(pid, SIGKILL);
    }
  } killer{pid};

  HttpReply health;
  for (int i = 0; i < 600 && health.status != 200 && Alive(pid); ++i) {
    health = Http(tmp, port, "GET", "/health");
    if (health.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(health.status, 200) << ReadAll(log);
  EXPECT_EQ(json::parse(health.body)["status"], "ok");

  // Models: the directory's basename.
  auto models = Http(tmp, port, "GET", "/v1/models", "", key);
  ASSERT_EQ(models.status, 200) << models.body;
  const std::string base = model.substr(model.find_last_of('/') + 1);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], base);

  // Greedy completion over token ids == `zipmoe generate`.
  const json request{{"prompt", json::array({5, 17, 300, 42})}, {"max_tokens", kNewTokens}, {"temperature", 0}};
  auto done = Http(tmp, port, "POST", "/v1/completions", request.dump(), key);
  ASSERT_EQ(done.status, 200) << done.body;
  const json body = json::parse(done.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], base);
  EXPECT_EQ(body["choices"][0]["text"], ref_text);
  EXPECT_EQ(body["choices"][0]["finish_reason"], ref_ids.size() == kNewTokens ? "length" : "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(body["usage"]["completion_tokens"], ref_ids.size());
  EXPECT_EQ(body["usage"]["total_tokens"], 4 + ref_ids.size());

  // Streaming: data: chunks whose texts concatenate to the same text, then [DONE].
  json stream_request = request;
  stream_request["stream"] = true;
  auto stream = Http(tmp, port, "POST", "/v1/completions", stream_request.dump(), key);
  ASSERT_EQ(stream.status, 200) << stream.body;
  const std::string done_marker = "data: [DONE]\n\n";
  ASSERT_GE(stream.body.size(), done_marker.size());
  EXPECT_EQ(stream.body.substr(stream.body.size() - done_marker.size()), done_marker) << stream.body;
  std::string streamed;
  int chunks = 0;
  std::string finish;
  for (const std::string& payload : SsePayloads(stream.body)) {
    const json chunk = json::parse(payload);
    ++chunks;
    streamed += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_GE(chunks, 2);
  EXPECT_EQ(streamed, ref_text);
  EXPECT_EQ(finish, body["choices"][0]["finish_reason"].get<std::string>());

  // Chat completions answer with an assistant message.
  const json chat{{"messages", json::array({json{{"role", "user"}, {"content", "hello"}}})},
                  {"max_tokens", 3},
                  {"temperature", 0}};
  auto chat_reply = Http(tmp, port, "POST", "/v1/chat/completions", chat.dump(), key);
  ASSERT_EQ(chat_reply.status, 200) << chat_reply.body;
  EXPECT_EQ(json::parse(chat_reply.body)["object"], "chat.completion");
  EXPECT_EQ(json::parse(chat_reply.body)["choices"][0]["message"]["role"], "assistant");

  // Errors.
  auto bad_json = Http(tmp, port, "POST", "/v1/completions", "{not json", key);
  EXPECT_EQ(bad_json.status, 400) << bad_json.body;
  EXPECT_EQ(json::parse(bad_json.body)["error"]["type"], "invalid_request_error");
  auto bad_field = Http(tmp, port, "POST", "/v1/completions", R"({"prompt": [1, 2], "max_tokens": -1})", key);
  EXPECT_EQ(bad_field.status, 400) << bad_field.body;
  const json config = json::parse(ReadAll(model + "/config.json"));
  const json too_long{{"prompt", std::vector<int>(config["max_position_embeddings"].get<size_t>() + 1, 5)}};
  auto long_reply = Http(tmp, port, "POST", "/v1/completions", too_long.dump(), key);
  EXPECT_EQ(long_reply.status, 400) << long_reply.body;
  EXPECT_NE(long_reply.body.find("context"), std::string::npos) << long_reply.body;
  json named = request;
  named["model"] = base;
  EXPECT_EQ(Http(tmp, port, "POST", "/v1/completions", named.dump(), key).status, 200);
  named["model"] = "gpt-4";  // any model id is accepted as given (one model is served) and echoed
  auto other_model = Http(tmp, port, "POST", "/v1/completions", named.dump(), key);
  EXPECT_EQ(other_model.status, 200) << other_model.body;
  EXPECT_EQ(json::parse(other_model.body)["model"], "gpt-4");
  auto huge = Http(tmp, port, "POST", "/v1/completions",
                   R"({"prompt": ")" + std::string(size_t{33} << 20, 'a') + R"("})", key);
  EXPECT_EQ(huge.status, 413) << huge.body.substr(0, 200);
  EXPECT_TRUE(json::parse(huge.body).contains("error")) << huge.body.substr(0, 200);
  auto no_key = Http(tmp, port, "POST", "/v1/completions", request.dump());
  EXPECT_EQ(no_key.status, 401) << no_key.body;
  auto wrong_key = Http(tmp, port, "GET", "/v1/models", "", "wrong");
  EXPECT_EQ(wrong_key.status, 401) << wrong_key.body;
  EXPECT_EQ(json::parse(wrong_key.body)["error"]["type"], "authentication_error");
  // Authentication before the body (issue 37): the headers of a 30 MiB POST without the key get the
  // 401 at once, and the connection is closed without the body being read.
  const auto head_t0 = std::chrono::steady_clock::now();
  const std::string head_only = testing::RawHeadOnly(
      port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 31457280\r\n\r\n");
  EXPECT_EQ(head_only.rfind("HTTP/1.1 401", 0), 0u) << head_only;
  EXPECT_NE(head_only.find("authentication_error"), std::string::npos) << head_only;
  EXPECT_LT(std::chrono::steady_clock::now() - head_t0, std::chrono::seconds(3));
  // /tokenize is bounded like a prompt, before its body is read or parsed.
  const std::string big_tokenize = json{{"content", std::string(size_t{2} << 20, 'a')}}.dump();
  auto tokenize_bomb = Http(tmp, port, "POST", "/tokenize", big_tokenize, key);
  EXPECT_EQ(tokenize_bomb.status, 413) << tokenize_bomb.body.substr(0, 200);
  auto small_tokenize = Http(tmp, port, "POST", "/tokenize", json{{"content", "hello"}}.dump(), key);
  EXPECT_EQ(small_tokenize.status, 200) << small_tokenize.body;
  auto unknown = Http(tmp, port, "GET", "/v1/nope", "", key);
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_TRUE(json::parse(unknown.body).contains("error")) << unknown.body;

  // Concurrent requests are batched (continuous batching) and each still gets its own greedy text.
  {
    const std::vector<std::vector<int>> prompts = {{5, 17, 300, 42}, {64, 128}, {3, 900, 1500, 77, 8}, {1000, 7}};
    constexpr int kLong = 48;
    std::vector<std::string> want(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::string csv;
      for (int id : prompts[i]) csv += (csv.empty() ? "" : ",") + std::to_string(id);
      auto g = RunCli(fmt::format("generate --model {} --prompt-ids {} --max-new-tokens {} --threads 1 --ignore-eos "
                                  "--json", model, csv, kLong));
      ASSERT_EQ(g.exit_code, 0) << g.output;
      want[i] = json::parse(g.output.substr(g.output.find('{')))["text"].get<std::string>();
    }
    std::vector<HttpReply> got(prompts.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i) {
      clients.emplace_back([&, i] {
        const json r{{"prompt", prompts[i]}, {"max_tokens", kLong}, {"temperature", 0}, {"ignore_eos", true},
                     {"stream", i % 2 == 1}};
        got[i] = Http(tmp, port, "POST", "/v1/completions", r.dump(), key, std::to_string(i));
      });
    }
    for (auto& t : clients) t.join();
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(got[i].status, 200) << got[i].body;
      std::string text;
      if (i % 2 == 0) {
        text = json::parse(got[i].body)["choices"][0]["text"].get<std::string>();
        EXPECT_EQ(json::parse(got[i].body)["usage"]["completion_tokens"], kLong);
      } else {
        for (size_t pos = 0; (pos = got[i].body.find("data: {", pos)) != std::string::npos;) {
          const size_t end = got[i].body.find("\n\n", pos);
          text += json::parse(got[i].body.substr(pos + 6, end - pos - 6))["choices"][0]["text"].get<std::string>();
          pos = end;
        }
      }
      EXPECT_EQ(text, want[i]) << "prompt " << i;
    }
    // The server's per-request log says how many sequences shared a step.
    const std::string text = ReadAll(log);
    size_t peak = 0;
    for (size_t pos = 0; (pos = text.find("batch of up to ", pos)) != std::string::npos;) {
      pos += 15;
      peak = std::max<size_t>(peak, std::strtoul(text.c_str() + pos, nullptr, 10));
    }
    EXPECT_GE(peak, 2u) << text;
  }

  // SIGTERM: the server stops cleanly.
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  for (int i = 0; i < 300 && Alive(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(Alive(pid)) << ReadAll(log);
  killer.pid = Alive(pid) ? pid : 0;
  EXPECT_NE(ReadAll(log).find("I: serve: stopped"), std::string::npos) << ReadAll(log);
}

// Runs `command` through the shell; its stdout.
std::string Shell(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

// A full queue answers 429 (rate_limit_error, queue_full) instead of queueing without bound.
TEST(ServeCli, FullQueueAnswers429) {
  const std::string model = CachedSynth("--arch qwen2_moe --preset tiny --seed 7");
  TempDir tmp;
  ServeProcess serve(tmp, fmt::format("--model {} --threads 1 --max-batch 1 --max-waiting 1", model));
  ASSERT_TRUE(serve.healthy()) << serve.log();
  // Two long requests: one runs, one waits; they end when their curl is killed (client gone).
  const json long_request{{"prompt", json::array({5, 17})}, {"max_tokens", 4000}, {"ignore_eos", true}};
  WriteAll(tmp.Sub("long.json"), long_request.dump());
  std::vector<int> curls;
  for (int i = 0; i < 2; ++i) {
    const std::string pid = Shell(fmt::format("curl -s -o /dev/null -X POST -H 'Content-Type: application/json' "
                                              "--data-binary @{} http://127.0.0.1:{}/v1/completions >/dev/null 2>&1 & "
                                              "echo $!",
                                              tmp.Sub("long.json"), serve.port()));
    curls.push_back(std::atoi(pid.c_str()));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const HttpReply third = Http(tmp, serve.port(), "POST", "/v1/completions",
                               json{{"prompt", json::array({5})}, {"max_tokens", 2}}.dump());
  for (int pid : curls)
    if (pid > 0) ::kill(pid, SIGKILL);
  EXPECT_EQ(third.status, 429) << third.body << serve.log();
  const json error = json::parse(third.body, nullptr, false);
  ASSERT_TRUE(error.is_object()) << third.body;
  EXPECT_EQ(error["error"]["type"], "rate_limit_error");
  EXPECT_EQ(error["error"]["code"], "queue_full");
  // The abandoned requests are cancelled: a new request is served again soon.
  HttpReply next;
  for (int i = 0; i < 100 && next.status != 200; ++i) {
    next = Http(tmp, serve.port(), "POST", "/v1/completions", json{{"prompt", json::array({5})}, {"max_tokens", 2}}.dump());
    if (next.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(next.status, 200) << next.body << serve.log();
}

// CoServe's request grouping (--request-grouping coserve) only reorders admissions:
// with one batch slot and requests queued behind a running one, every completion still equals the
// all-resident `generate` of its prompt, and every admitted sequence is counted, fifo or grouped.
TEST(ServeCli, CoServeRequestGroupingKeepsEveryCompletionExact) {
  const std::string model = testing::CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 7"));
  const std::vector<std::vector<int>> prompts = {{5, 17, 300, 42}, {9, 9, 9}, {1000, 3, 77}, {5, 17, 301}, {640, 2, 2, 8}};
  const std::vector<int> max_tokens = {12, 3, 3, 3, 3};
  std::vector<std::string> ref;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto gen = RunCli(fmt::format("generate --model {} --prompt-ids {} --max-new-tokens {} --threads 1 --ignore-eos --json",
                                  model, fmt::join(prompts[i], ","), max_tokens[i]));
    ASSERT_EQ(gen.exit_code, 0) << gen.output;
    ref.push_back(json::parse(gen.output.substr(gen.output.find('{')))["text"].get<std::string>());
  }
  TempDir tmp;
  ServeProcess serve(tmp, fmt::format("--model {} --threads 1 --memory-budget 30% --policy coserve --request-grouping coserve "
                                      "--max-batch 1",
                                      model));
  ASSERT_TRUE(serve.healthy()) << serve.log();
  EXPECT_NE(serve.log().find("request grouping coserve over 8 waiting"), std::string::npos) << serve.log();
  auto body = [&](size_t i) {
    return json{{"prompt", prompts[i]}, {"max_tokens", max_tokens[i]}, {"temperature", 0}, {"ignore_eos", true}}.dump();
  };
  std::vector<HttpReply> replies(prompts.size());
  std::vector<std::thread> clients;
  clients.emplace_back([&] { replies[0] = Http(tmp, serve.port(), "POST", "/v1/completions", body(0), "", "0"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the long one runs, the others queue
  for (size_t i = 1; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      replies[i] = Http(tmp, serve.port(), "POST", "/v1/completions", body(i), "", std::to_string(i));
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(replies[i].status, 200) << replies[i].body << serve.log();
    EXPECT_EQ(json::parse(replies[i].body)["choices"][0]["text"].get<std::string>(), ref[i]) << "prompt " << i;
  }
  const HttpReply metrics = Http(tmp, serve.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  auto counter = [&](const std::string& series) {
    const size_t at = metrics.body.find(series + " ");
    return at == std::string::npos ? -1.0 : std::stod(metrics.body.substr(at + series.size() + 1));
  };
  const double fifo = counter("zipmoe_requests_admitted_total{order=\"fifo\"}");
  const double grouped = counter("zipmoe_requests_admitted_total{order=\"grouped\"}");
  ASSERT_GE(fifo, 0) << metrics.body;
  ASSERT_GE(grouped, 0) << metrics.body;
  EXPECT_EQ(fifo + grouped, static_cast<double>(prompts.size())) << metrics.body;

  auto bad = RunCli(fmt::format("serve --model {} --request-grouping fcfs", model));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--request-grouping"), std::string::npos) << bad.output;
}

// With the embedded runtime, GET /metrics on the API port has the serving, cache and runtime
// families, and promtool accepts the exposition. SMoE's policy brings its top-score prefetching by
// default; substitution is counted.
// `zipmoe generate --json` of `prompt` (greedy, EOS ignored, n new tokens): the reference a completion
// of the same prompt must equal.
json GenerateGreedy(const std::string& model, const std::vector<int32_t>& prompt, int n) {
  auto gen = RunCli(fmt::format("generate --model {} --prompt-ids {} --max-new-tokens {} --threads 1 --ignore-eos --json",
                                model, fmt::join(prompt, ","), n));
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  const size_t at = gen.output.find('{');
  return at == std::string::npos ? json::object() : json::parse(gen.output.substr(at));
}

// Prefix reuse (--prefix-cache, on by default): a chat's next turn re-sends the history; the tokens a
// finished request's cache holds are not prefilled again (usage.prompt_tokens_details.cached_tokens,
// zipmoe_prompt_tokens_cached_total), and the completion equals `zipmoe generate` on the whole prompt.
TEST(ServeCli, APromptStartingWithAFinishedRequestsTokensIsNotPrefilledAgain) {
  const std::string model = CachedSynth("--arch qwen2_moe --preset tiny --seed 7");
  TempDir tmp;
  const std::vector<int32_t> turn1 = {5, 17, 300, 42, 900, 1500, 77, 8};
  const json ref1 = GenerateGreedy(model, turn1, 6);
  std::vector<int32_t> turn2 = turn1;
  for (int32_t id : ref1["generated_ids"].get<std::vector<int32_t>>()) turn2.push_back(id);
  const size_t history = turn2.size() - 1;  // the last generated token was never fed
  for (int32_t id : {64, 128, 3}) turn2.push_back(id);
  const json ref2 = GenerateGreedy(model, turn2, 6);
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "prefix cache on" : "--prefix-cache 0");
    TempDir run;
    ServeProcess serve(run, fmt::format("--model {} --threads 1{}", model, on ? "" : " --prefix-cache 0"));
    ASSERT_TRUE(serve.healthy()) << serve.log();
    const auto complete = [&](const std::vector<int32_t>& prompt) {
      const HttpReply r = Http(run, serve.port(), "POST", "/v1/completions",
                               json{{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}}.dump());
      EXPECT_EQ(r.status, 200) << r.body;
      return r.status == 200 ? json::parse(r.body) : json::object();
    };
    const json first = complete(turn1);
    EXPECT_EQ(first["choices"][0]["text"], ref1["text"]);
    EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    const json second = complete(turn2);
    EXPECT_EQ(second["choices"][0]["text"], ref2["text"]);
    EXPECT_EQ(second["usage"]["prompt_tokens"], turn2.size());
    EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], on ? history : 0);
    const HttpReply metrics = Http(run, serve.port(), "GET", "/metrics");
    const std::string sample = fmt::format("zipmoe_prompt_tokens_cached_total {}", on ? history : 0);
    EXPECT_NE(metrics.body.find(sample), std::string::npos) << sample << "\n" << metrics.body;
    EXPECT_NE(serve.log().find(on ? "prefix cache 512 MiB" : "prefix cache off"), std::string::npos) << serve.log();
  }
}

// --kv-budget: requests that do not fit wait or preempt the latest admitted one, and every completion
// still equals `zipmoe generate` on its prompt; a prompt larger than the whole budget is a 400 naming it.
// qwen2_moe tiny holds 4 KiB of keys and values per position: 1 MiB = 256 positions (4 pages of 64).
TEST(ServeCli, KvBudgetQueuesPreemptsAndRefusesWhatCannotFit) {
  const std::string model = CachedSynth("--arch qwen2_moe --preset tiny --seed 7");
  TempDir tmp;
  constexpr int kRequests = 4;
  constexpr int kNewTokens = 90;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> want;
  for (int r = 0; r < kRequests; ++r) {
    std::vector<int32_t> p;
    for (int i = 0; i < 40; ++i) p.push_back(16 + (r * 131 + i * 17) % 2000);
    want.push_back(GenerateGreedy(model, p, kNewTokens)["text"].get<std::string>());
    prompts.push_back(std::move(p));
  }
  ServeProcess serve(tmp, fmt::format("--model {} --threads 1 --kv-budget 1 --prefix-cache 0", model));
  ASSERT_TRUE(serve.healthy()) << serve.log();
  EXPECT_NE(serve.log().find("KV budget 1 MiB"), std::string::npos) << serve.log();
  std::vector<std::thread> clients;
  std::vector<HttpReply> replies(kRequests);
  std::vector<TempDir> client_dirs(kRequests);  // Http keeps each request's files in its directory
  for (int r = 0; r < kRequests; ++r) {
    clients.emplace_back([&, r] {
      replies[r] = Http(client_dirs[r], serve.port(), "POST", "/v1/completions",
                        json{{"prompt", prompts[r]}, {"max_tokens", kNewTokens}, {"temperature", 0}, {"ignore_eos", true}}
                            .dump());
    });
  }
  for (std::thread& t : clients) t.join();
  for (int r = 0; r < kRequests; ++r) {
    ASSERT_EQ(replies[r].status, 200) << replies[r].body;
    EXPECT_EQ(json::parse(replies[r].body)["choices"][0]["text"], want[r]) << "request " << r;
  }
  const HttpReply metrics = Http(tmp, serve.port(), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("zipmoe_kv_cache_bytes{state=\"budget\"} 1048576"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("zipmoe_kv_cache_bytes{state=\"used\"} 0"), std::string::npos) << metrics.body;
  const size_t at = metrics.body.find("\nzipmoe_preemptions_total ");
  ASSERT_NE(at, std::string::npos) << metrics.body;
  EXPECT_GT(std::stod(metrics.body.substr(at + 26)), 0.0) << "four 130-position requests in 256 positions never preempted";
  // 300 prompt tokens need 5 pages: more than the whole budget.
  const HttpReply big = Http(tmp, serve.port(), "POST", "/v1/completions",
                             json{{"prompt", std::vector<int32_t>(300, 42)}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(big.status, 400) << big.body;
  EXPECT_NE(big.body.find("KV budget"), std::string::npos) << big.body;
}

// The hybrid models (Gated DeltaNet state per request) through serve: each completion equals `zipmoe generate`,
// alone and with three requests in one batch.
TEST(ServeCli, HybridModelsMatchGenerate) {
  for (const char* arch : {"qwen3_next", "qwen3_5_moe"}) {
    SCOPED_TRACE(arch);
    const std::string model = CachedSynth(fmt::format("--arch {} --preset tiny --seed 7", arch));
    TempDir tmp;
    std::vector<std::vector<int32_t>> prompts = {{5, 17, 300, 42}, {900, 1500, 77, 8, 64, 128, 3}, {1234, 56}};
    std::vector<std::string> want;
    for (const auto& p : prompts) {
      want.push_back(GenerateGreedy(model, p, 12)["text"].get<std::string>());
    }
    ServeProcess serve(tmp, fmt::format("--model {} --threads 1", model));
    ASSERT_TRUE(serve.healthy()) << serve.log();
    std::vector<std::thread> clients;
    std::vector<HttpReply> replies(prompts.size());
    std::vector<TempDir> dirs(prompts.size());
    for (size_t r = 0; r < prompts.size(); ++r) {
      clients.emplace_back([&, r] {
        replies[r] = Http(dirs[r], serve.port(), "POST", "/v1/completions",
                          json{{"prompt", prompts[r]}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}}.dump());
      });
    }
    for (std::thread& t : clients) t.join();
    for (size_t r = 0; r < prompts.size(); ++r) {
      ASSERT_EQ(replies[r].status, 200) << replies[r].body;
      EXPECT_EQ(json::parse(replies[r].body)["choices"][0]["text"], want[r]) << "prompt " << r;
    }
  }
}

TEST(ServeCli, MetricsOnTheApiPortIncludeTheEmbeddedRuntime) {
  const std::string model = testing::CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 7"));
  TempDir tmp;
  ServeProcess serve(tmp, fmt::format("--model {} --threads 1 --memory-budget 50% --policy smoe --substitution-alpha 0.5",
                                      model));
  ASSERT_TRUE(serve.healthy()) << serve.log();
  // Sampled at the default temperature, the first token can be EOS (a CI run drew it): ignore_eos makes
  // the four tokens and the "length" finish this test counts certain.
  const HttpReply reply = Http(tmp, serve.port(), "POST", "/v1/completions",
                               json{{"prompt", json::array({5, 17, 300})}, {"max_tokens", 4}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  const HttpReply metrics = Http(tmp, serve.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  for (const char* family : {"zipmoe_prompt_tokens_total 3", "zipmoe_generation_tokens_total 4",
                             "zipmoe_request_success_total{finished_reason=\"length\"} 1", "zipmoe_build_info{",
                             "zipmoe_cache_requests_total{", "zipmoe_runtime_io_bytes_total{kind=\"e_chunk\"}",
                             "zipmoe_runtime_worker_ops_total{op=\"decode\"}", "zipmoe_time_to_first_token_seconds_bucket",
                             "zipmoe_runtime_prefetch_experts_total{mode=\"top-score\",outcome=\"issued\"}",
                             "zipmoe_runtime_prefetch_bytes_total{mode=\"top-score\",outcome=\"wasted\"}",
                             "zipmoe_runtime_info{policy=\"smoe\",prefetch=\"top-score\"} 1",
                             "zipmoe_runtime_routed_experts_total ", "zipmoe_runtime_substituted_experts_total "})
    EXPECT_NE(metrics.body.find(family), std::string::npos) << family << "\n" << metrics.body;
  // Time per activity: the forward passes, the waits for experts, and the runtime's reads and decodes
  // (every expert at 50 % had to come through them at least once) all took time.
  for (const char* activity : {"forward", "wait_experts", "read", "decode", "schedule_layer"}) {
    const std::string sample = fmt::format("zipmoe_activity_seconds_total{{activity=\"{}\"}} ", activity);
    const size_t at = metrics.body.find(sample);
    ASSERT_NE(at, std::string::npos) << sample << "\n" << metrics.body;
    EXPECT_GT(std::stod(metrics.body.substr(at + sample.size())), 0.0) << sample;
  }
  WriteAll(tmp.Sub("metrics.txt"), metrics.body);
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    const int rc = std::system(fmt::format("promtool check metrics < {} > {} 2>&1", tmp.Sub("metrics.txt"),
                                           tmp.Sub("promtool.txt")).c_str());
    EXPECT_EQ(rc, 0) << ReadAll(tmp.Sub("promtool.txt"));
  } else {
    ADD_FAILURE() << "promtool is missing: run scripts/install_deps.sh";
  }
}

// A corrupt expert chunk fails the request with a server error naming it, and /health says so
// (503 "error") instead of "ok" while requests fail.
TEST(ServeCli, HealthReportsTheFailureOfACorruptExpertChunk) {
  const std::string compressed = testing::CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 7"));
  TempDir tmp;
  const std::string copy = tmp.Sub("copy");
  std::filesystem::copy(compressed, copy, std::filesystem::copy_options::recursive);
  std::string experts = ReadAll(copy + "/experts.bin");
  ASSERT_GT(experts.size(), 8192u);
  for (size_t i = 1000; i < experts.size(); i += 1024) experts[i] = static_cast<char>(experts[i] ^ 0x40);
  WriteAll(copy + "/experts.bin", experts);
  ServeProcess serve(tmp, fmt::format("--model {} --threads 1 --memory-budget 50%", copy));
  ASSERT_TRUE(serve.healthy()) << serve.log();
  const HttpReply reply = Http(tmp, serve.port(), "POST", "/v1/completions",
                               json{{"prompt", json::array({5, 17, 300})}, {"max_tokens", 4}}.dump());
  EXPECT_EQ(reply.status, 500) << reply.body;
  EXPECT_EQ(json::parse(reply.body, nullptr, false)["error"]["type"], "server_error") << reply.body;
  const HttpReply health = Http(tmp, serve.port(), "GET", "/health");
  EXPECT_EQ(health.status, 503) << health.body;
  const json body = json::parse(health.body, nullptr, false);
  EXPECT_EQ(body["status"], "error") << health.body;
  EXPECT_FALSE(body["message"].get<std::string>().empty());
}

}  // namespace
}  // namespace zipmoe
