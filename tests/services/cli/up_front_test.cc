// The HTTP front of `zipmoe up` (issue 43 item 1; services/front/front_server.h): an executor SIGKILLed
// while requests are in flight is invisible to clients. A 64-token stream, a non-streaming request and
// 8 concurrent streams (completions and chat, greedy and seeded sampling) each complete with HTTP 200
// and the text of an uninterrupted run, within 30 s of the kill, with no unit framing leaking to the
// client, exactly one [DONE] and the full token count in the usage; the front counts its re-issues.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/services/cli/up_cli_test_util.h"

namespace zipmoe::up_cli::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTokens = 64;

struct Streamed {
  std::string text;             // the choices' text / delta.content, concatenated
  int64_t completion_tokens = -1;
  int done = 0;                 // "data: [DONE]" events
  bool framing_leaked = false;  // a front_protocol.h comment line reached the client
  bool error = false;
};

Streamed ParseStream(const std::string& body) {
  Streamed s;
  s.framing_leaked = body.find(": zipmoe") != std::string::npos;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
    at = end == std::string::npos ? body.size() : end + 2;
    if (data == "[DONE]") {
      ++s.done;
      continue;
    }
    const json j = json::parse(data, nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("error")) s.error = true;
    if (j.contains("usage") && j["usage"].is_object()) s.completion_tokens = j["usage"]["completion_tokens"].get<int64_t>();
    if (!j.contains("choices")) continue;
    for (const json& c : j["choices"]) {
      if (c.contains("text") && c["text"].is_string()) s.text += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
        s.text += c["delta"]["content"].get<std::string>();
    }
  }
  return s;
}

// Request i of the concurrent set: even = completions, odd = chat; i % 4 < 2 greedy, else seeded sampling.
std::pair<std::string, std::string> Request(int i, bool stream) {
  json body{{"max_tokens", kTokens}, {"ignore_eos", true}, {"stream", stream}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  if (i % 4 < 2) {
    body["temperature"] = 0;
  } else {
    body["temperature"] = 0.8;
    body["top_p"] = 0.95;
    body["seed"] = 1000 + i;
  }
  if (i % 2 == 0) {
    json ids = json::array({5, 17, 300, 42 + i});
    body["prompt"] = ids;
    return {"/v1/completions", body.dump()};
  }
  body["messages"] = json::array({json{{"role", "user"}, {"content", fmt::format("tell me about number {}", i)}}});
  return {"/v1/chat/completions", body.dump()};
}

std::string Text(const std::string& body, bool stream) {
  if (stream) return ParseStream(body).text;
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("choices")) return "<no choices: " + body + ">";
  const json& c = j["choices"][0];
  return c.contains("text") ? c["text"].get<std::string>() : c["message"]["content"].get<std::string>();
}

// How many "data: " events the file at `path` holds now.
size_t EventsIn(const std::string& path) {
  if (!Exists(path)) return 0;
  const std::string body = ReadAll(path);
  size_t n = 0, at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    ++n;
    at += 6;
  }
  return n;
}

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TEST(UpFront, ExecutorKilledMidRequestIsInvisibleToStreamingAndNonStreamingClients) {
  const std::string model = Model();
  TempDir tmp;
  Up up(tmp, model, 1, "--set http.resume_timeout_ms=30000");
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  const std::string executor_pid = up.run_dir() + "/executor.pid";

  // Uninterrupted answers first (the greedy completion also against embedded `generate`).
  constexpr int kConcurrent = 8;
  std::vector<std::string> want_stream(kConcurrent);
  for (int i = 0; i < kConcurrent; ++i) {
    const auto [path, body] = Request(i, true);
    const HttpReply r = Http(tmp, up.port(), "POST", path, body);
    ASSERT_EQ(r.status, 200) << r.body;
    const Streamed s = ParseStream(r.body);
    EXPECT_FALSE(s.framing_leaked);
    EXPECT_EQ(s.done, 1);
    EXPECT_EQ(s.completion_tokens, kTokens) << r.body;
    want_stream[static_cast<size_t>(i)] = s.text;
  }
  EXPECT_EQ(want_stream[0], Reference(model, kTokens)["text"].get<std::string>());
  EXPECT_NE(want_stream[2], want_stream[0]);  // sampling (seed 1002) is not greedy here
  {  // A client cannot pose as the front: its "zipmoe_resume" is dropped before the executor sees it.
    auto [path, body] = Request(0, true);
    json forged = json::parse(body);
    forged["zipmoe_resume"] = {{"id", "x"}, {"created", 1}, {"head", true},
                               {"choices", json::array({json{{"index", 0}, {"groups", {{7, 7, 7}}}, {"finished", false}}})}};
    const HttpReply r = Http(tmp, up.port(), "POST", path, forged.dump(), "", "forged");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(ParseStream(r.body).text, want_stream[0]);
    EXPECT_EQ(ParseStream(r.body).completion_tokens, kTokens);
  }

  // 1. One stream, the executor killed once it has sent a few events.
  {
    const auto [path, body] = Request(2, true);
    HttpReply reply;
    std::thread client([&, path = path, body = body] { reply = Http(tmp, up.port(), "POST", path, body, "", "one"); });
    const std::string out = tmp.Sub("respone.out");
    const auto start = Clock::now();
    while (EventsIn(out) < 4 && Since(start) < 60) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const size_t events_at_kill = EventsIn(out);
    const int victim = ReadPid(executor_pid);
    ASSERT_GT(victim, 0);
    EXPECT_EQ(::kill(victim, SIGKILL), 0);
    const auto killed = Clock::now();
    client.join();
    std::printf("I: test: stream: executor killed after %zu events; the stream ended %.1f s later\n", events_at_kill,
                Since(killed));
    EXPECT_LT(Since(killed), 30.0);
    ASSERT_EQ(reply.status, 200) << reply.body << up.log();
    const Streamed s = ParseStream(reply.body);
    EXPECT_LT(events_at_kill, static_cast<size_t>(kTokens)) << "the stream was over before the kill";
    EXPECT_EQ(s.text, want_stream[2]);
    EXPECT_FALSE(s.framing_leaked);
    EXPECT_FALSE(s.error) << reply.body;
    EXPECT_EQ(s.done, 1);
    EXPECT_EQ(s.completion_tokens, kTokens);
  }

  // 2. A non-streaming request: sent again to the replacement.
  {
    ASSERT_TRUE(up.WaitHealthy()) << up.log();
    const auto [path, body] = Request(3, false);
    HttpReply reply;
    std::thread client([&, path = path, body = body] { reply = Http(tmp, up.port(), "POST", path, body, "", "two"); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(::kill(ReadPid(executor_pid), SIGKILL), 0);
    const auto killed = Clock::now();
    client.join();
    EXPECT_LT(Since(killed), 30.0);
    ASSERT_EQ(reply.status, 200) << reply.body << up.log();
    EXPECT_EQ(Text(reply.body, false), want_stream[3]);
    EXPECT_EQ(json::parse(reply.body)["usage"]["completion_tokens"].get<int64_t>(), kTokens);
  }

  // 3. Eight concurrent streams (completions and chat, greedy and sampled), one kill.
  {
    ASSERT_TRUE(up.WaitHealthy()) << up.log();
    std::vector<HttpReply> replies(kConcurrent);
    std::vector<std::thread> clients;
    for (int i = 0; i < kConcurrent; ++i) {
      clients.emplace_back([&, i] {
        const auto [path, body] = Request(i, true);
        replies[static_cast<size_t>(i)] = Http(tmp, up.port(), "POST", path, body, "", fmt::format("c{}", i));
      });
    }
    const std::string first = tmp.Sub("respc0.out");
    const auto start = Clock::now();
    while (EventsIn(first) < 4 && Since(start) < 60) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(::kill(ReadPid(executor_pid), SIGKILL), 0);
    const auto killed = Clock::now();
    for (std::thread& t : clients) t.join();
    EXPECT_LT(Since(killed), 30.0);
    for (int i = 0; i < kConcurrent; ++i) {
      SCOPED_TRACE(::testing::Message() << "stream " << i);
      const HttpReply& r = replies[static_cast<size_t>(i)];
      ASSERT_EQ(r.status, 200) << r.body;
      const Streamed s = ParseStream(r.body);
      EXPECT_EQ(s.text, want_stream[static_cast<size_t>(i)]);
      EXPECT_FALSE(s.framing_leaked);
      EXPECT_FALSE(s.error) << r.body;
      EXPECT_EQ(s.done, 1);
      EXPECT_EQ(s.completion_tokens, kTokens);
    }
  }
  // Three kills, each request re-issued at least once; nothing failed.
  const HttpReply metrics = Http(tmp, up.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  const std::string series = "\nzipmoe_front_resumes_total ";
  const size_t at = metrics.body.find(series);
  ASSERT_NE(at, std::string::npos) << metrics.body;
  EXPECT_GE(std::atof(metrics.body.c_str() + at + series.size()), 3.0) << metrics.body.substr(at, 80);
  EXPECT_NE(metrics.body.find("zipmoe_front_requests_total{outcome=\"failed\"} 0"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("zipmoe_executor_generated_tokens_total"), std::string::npos) << "the executor's own metrics come first";
  // Streams were resumed mid-way (after some of their tokens), not merely sent again.
  const std::string log = up.log();
  EXPECT_TRUE(std::regex_search(log, std::regex("resuming after [1-9][0-9]* token"))) << log;
  const std::regex front_line("I: front: [^\n]*");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), front_line); it != std::sregex_iterator(); ++it)
    std::printf("%s\n", it->str().c_str());
  ASSERT_TRUE(up.Stop()) << up.log();
}

}  // namespace
}  // namespace zipmoe::up_cli::test
