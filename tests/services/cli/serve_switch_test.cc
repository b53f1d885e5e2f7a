// `zipmoe serve` with an encoder-decoder model (switch_transformers tiny): /v1/completions feeds the
// prompt to the encoder and matches `zipmoe generate` (text and token prompts, a batch of two prompts,
// streaming), max_tokens is bounded by the decoder's context only, and the chat endpoint answers a
// clear 400 because the model has no chat template.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/checkpoint/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/services/cli/http_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;
using testing::CachedSynth;
using testing::Http;
using testing::HttpReply;
using testing::RunCli;
using testing::ServeProcess;
using testing::TempDir;
using testing::SsePayloads;

constexpr int kNewTokens = 5;

// `zipmoe generate --json` for one prompt source (greedy, --ignore-eos off: as the server).
json Generate(const std::string& model, const std::string& source) {
  auto r = RunCli(fmt::format("generate --model {} {} --max-new-tokens {} --threads 1 --json 2>/dev/null", model,
                              source, kNewTokens));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find('{');
  return brace == std::string::npos ? json() : json::parse(r.output.substr(brace));
}

// Each id as the server names it in logprobs.tokens (Decode({id}), special tokens kept): greedy
// decoding of the tiny model often yields <extra_id_N> sentinels, which the completion text skips.
json Pieces(const Tokenizer& tok, const json& ids) {
  json out = json::array();
  for (const json& id : ids) out.push_back(tok.Decode({id.get<int32_t>()}));
  return out;
}

TEST(ServeSwitch, CompletionsFeedTheEncoderAndMatchGenerate) {
  // Embedding std 0.02 (HF's initializer_range): the sub-layers outweigh the fed token, so different
  // prompts give different greedy tokens (at std 1 greedy repeats the decoder start token).
  const std::string model = CachedSynth("--arch switch_transformers --preset tiny --seed 7 --embedding-std 0.02");
  auto tok = Tokenizer::Load(JoinPath(model, "tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  TempDir tmp;
  const std::string long_text = "a prompt long enough that the experts of the encoder overflow their capacity";
  const json gen_ids = Generate(model, "--prompt-ids 5,17,300,42,1");
  const json gen_text = Generate(model, fmt::format("--prompt '{}'", long_text));
  ASSERT_EQ(gen_ids["generated_ids"].size(), static_cast<size_t>(kNewTokens));
  ASSERT_GT(gen_text["prompt_ids"].size(), 16u);  // > 8 experts x capacity 2: the encoder drops tokens
  ASSERT_NE(gen_ids["generated_ids"], gen_text["generated_ids"]);  // the encoder input matters

  ServeProcess serve(tmp, fmt::format("--model {} --threads 1", model));
  ASSERT_TRUE(serve.healthy()) << serve.log();

  // Token prompt, then text prompt: text and usage as generate (prompt_tokens = the encoder input).
  for (const auto& [prompt, want] : {std::pair<json, json>{json::array({5, 17, 300, 42, 1}), gen_ids},
                                     std::pair<json, json>{json(long_text), gen_text}}) {
    const json request{{"prompt", prompt}, {"max_tokens", kNewTokens}, {"temperature", 0}, {"logprobs", 0}};
    const HttpReply reply = Http(tmp, serve.port(), "POST", "/v1/completions", request.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json body = json::parse(reply.body);
    EXPECT_EQ(body["choices"][0]["text"], want["text"]) << prompt;
    EXPECT_EQ(body["choices"][0]["logprobs"]["tokens"], Pieces(**tok, want["generated_ids"])) << prompt;
    EXPECT_EQ(body["usage"]["prompt_tokens"], want["prompt_ids"].size());
    EXPECT_EQ(body["usage"]["completion_tokens"], want["generated_ids"].size());
  }

  // Two prompts of different lengths in one request: each choice equals its own generate run (the
  // ragged batch keeps sequences apart, capacity counted per sequence).
  const json batch{{"prompt", json::array({json::array({5, 17, 300, 42, 1}), long_text})},
                   {"max_tokens", kNewTokens},
                   {"temperature", 0},
                   {"logprobs", 0}};
  const HttpReply both = Http(tmp, serve.port(), "POST", "/v1/completions", batch.dump());
  ASSERT_EQ(both.status, 200) << both.body;
  const json choices = json::parse(both.body)["choices"];
  ASSERT_EQ(choices.size(), 2u);
  for (const json& c : choices)
    EXPECT_EQ(c["logprobs"]["tokens"], Pieces(**tok, (c["index"] == 0 ? gen_ids : gen_text)["generated_ids"])) << c;

  // Streaming: the chunks concatenate to the same text.
  json stream_request{{"prompt", long_text}, {"max_tokens", kNewTokens}, {"temperature", 0}, {"stream", true}};
  const HttpReply stream = Http(tmp, serve.port(), "POST", "/v1/completions", stream_request.dump());
  ASSERT_EQ(stream.status, 200) << stream.body;
  std::string streamed;
  for (const std::string& payload : SsePayloads(stream.body)) {
    streamed += json::parse(payload)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, gen_text["text"]);

  // max_tokens is the decoder's budget alone (openai_protocol_test checks that the whole context is
  // allowed after a long prompt); one more is a 400 naming max_tokens.
  const json over{{"prompt", long_text}, {"max_tokens", kSwitchMaxPositions + 1}};
  const HttpReply too_many = Http(tmp, serve.port(), "POST", "/v1/completions", over.dump());
  EXPECT_EQ(too_many.status, 400) << too_many.body;
  EXPECT_EQ(json::parse(too_many.body)["error"]["param"], "max_tokens");

  // No chat template: 400 naming messages, saying so and pointing to /v1/completions.
  const json chat{{"messages", json::array({json{{"role", "user"}, {"content", "hello"}}})}, {"max_tokens", 3}};
  const HttpReply chat_reply = Http(tmp, serve.port(), "POST", "/v1/chat/completions", chat.dump());
  EXPECT_EQ(chat_reply.status, 400) << chat_reply.body;
  const json error = json::parse(chat_reply.body)["error"];
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["param"], "messages");
  EXPECT_NE(error["message"].get<std::string>().find("no chat template"), std::string::npos) << error;
  EXPECT_NE(error["message"].get<std::string>().find("/v1/completions"), std::string::npos) << error;
}

}  // namespace
}  // namespace zipmoe
