// ParseCompletionRequest (services/api/openai_protocol.h): every OpenAI field rule with known
// answers on a tiny synthesized model (its tokenizer and config.json).
#include "services/api/openai_protocol.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/file_util.h"
#include "tests/test_util.h"

namespace zipmoe::api {
namespace {

using nlohmann::json;

class OpenAiProtocolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::CachedSynth("--arch qwen2_moe --preset tiny --seed 3"));
    auto tok = Tokenizer::Load(JoinPath(*dir_, "tokenizer.json"));
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = std::move(tok).value().release();
    auto cfg = LoadModelConfig(*dir_);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    config_ = new ModelConfig(*cfg);
  }
  bool Parse(const json& body, Endpoint endpoint, CompletionRequest* out, ApiError* err) {
    return ParseCompletionRequest(body.dump(), endpoint, ProtocolContext{tokenizer_, config_}, out, err);
  }
  // The 400's param for `body` (fails the test when it parses).
  std::string RejectedParam(const json& body, Endpoint endpoint = Endpoint::kCompletions) {
    CompletionRequest r;
    ApiError e;
    EXPECT_FALSE(Parse(body, endpoint, &r, &e)) << body.dump();
    EXPECT_EQ(e.http_status, 400);
    EXPECT_FALSE(e.message.empty());
    return e.param;
  }
  static std::string* dir_;
  static Tokenizer* tokenizer_;
  static ModelConfig* config_;
};
std::string* OpenAiProtocolTest::dir_ = nullptr;
Tokenizer* OpenAiProtocolTest::tokenizer_ = nullptr;
ModelConfig* OpenAiProtocolTest::config_ = nullptr;

TEST_F(OpenAiProtocolTest, PromptFormsBecomeOnePromptEach) {
  CompletionRequest r;
  ApiError e;
  ASSERT_TRUE(Parse(json{{"prompt", "hello world"}}, Endpoint::kCompletions, &r, &e)) << e.message;
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].ids, *tokenizer_->Encode("hello world", true));
  EXPECT_EQ(r.prompts[0].text, "hello world");
  ASSERT_TRUE(Parse(json{{"prompt", {"a b", "c"}}}, Endpoint::kCompletions, &r, &e)) << e.message;
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].ids, *tokenizer_->Encode("c", true));
  ASSERT_TRUE(Parse(json{{"prompt", {5, 17, 300}}}, Endpoint::kCompletions, &r, &e)) << e.message;
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{5, 17, 300}));
  ASSERT_TRUE(Parse(json{{"prompt", {{5, 6}, {7}}}}, Endpoint::kCompletions, &r, &e)) << e.message;
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(RejectedParam(json{{"prompt", {5, 99999}}}), "prompt");
  EXPECT_EQ(RejectedParam(json{{"prompt", json::array()}}), "prompt");
  EXPECT_EQ(RejectedParam(json{{"prompt", 5}}), "prompt");
  EXPECT_EQ(RejectedParam(json::object()), "prompt");
}

TEST_F(OpenAiProtocolTest, ChatContentPartsRolesAndNullContent) {
  CompletionRequest a, b;
  ApiError e;
  // Text parts are joined with "\n" (vLLM's "\n".join, llama.cpp likewise), an empty part included.
  ASSERT_TRUE(Parse(json{{"messages", {{{"role", "user"}, {"content", "Hello\nworld\n\n!"}}}}}, Endpoint::kChat, &a, &e));
  const json parts = json::array({json{{"type", "text"}, {"text", "Hello"}}, json{{"type", "text"}, {"text", "world"}},
                                  json{{"type", "text"}, {"text", ""}}, json{{"type", "text"}, {"text", "!"}}});
  ASSERT_TRUE(Parse(json{{"messages", {{{"role", "user"}, {"content", parts}}}}}, Endpoint::kChat, &b, &e)) << e.message;
  EXPECT_EQ(a.prompts[0].ids, b.prompts[0].ids);
  ASSERT_TRUE(Parse(json{{"messages", {{{"role", "user"}, {"content", json::array({json{{"type", "text"}, {"text", ""}},
                                                                                   json{{"type", "text"}, {"text", "x"}}})}}}}},
                    Endpoint::kChat, &b, &e));
  ASSERT_TRUE(Parse(json{{"messages", {{{"role", "user"}, {"content", "\nx"}}}}}, Endpoint::kChat, &a, &e));
  EXPECT_EQ(a.prompts[0].ids, b.prompts[0].ids);
  const json history = json::array({json{{"role", "developer"}, {"content", "be brief"}},
                                    json{{"role", "user"}, {"content", "hi"}},
                                    json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}},
                                    json{{"role", "user"}, {"content", "again"}}});
  ASSERT_TRUE(Parse(json{{"messages", history}}, Endpoint::kChat, &a, &e)) << e.message;
  EXPECT_NE(a.prompts[0].text.find("system\nbe brief"), std::string::npos) << a.prompts[0].text;
  EXPECT_EQ(RejectedParam(json{{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, Endpoint::kChat),
            "messages[0].role");
  EXPECT_EQ(RejectedParam(json{{"messages", {{{"role", "user"}, {"content", nullptr}}}}}, Endpoint::kChat),
            "messages[0].content");
  const json image = json::array({json{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}});
  EXPECT_EQ(RejectedParam(json{{"messages", {{{"role", "user"}, {"content", image}}}}}, Endpoint::kChat),
            "messages[0].content");
  EXPECT_EQ(RejectedParam(json{{"messages", json::array()}}, Endpoint::kChat), "messages");
}

TEST(ParseJsonObjectTest, SyntaxErrorsSayWhereAndWhyAndQuoteLittle) {
  json j;
  ApiError e;
  EXPECT_FALSE(ParseJsonObject("{\"prompt\": [1, 2,, 3]}", &j, &e));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("at byte 18"), std::string::npos) << e.message;
  // A 5 MB string that never closes: the message stays short.
  EXPECT_FALSE(ParseJsonObject("{\"prompt\": \"" + std::string(5 << 20, 'a'), &j, &e));
  EXPECT_LT(e.message.size(), 400u) << e.message.substr(0, 400);
  // Invalid UTF-8 and control bytes near the error are not quoted as such (the message must dump).
  EXPECT_FALSE(ParseJsonObject(std::string("{\"a\": \xff\xfe\x01 }"), &j, &e));
  EXPECT_NO_THROW((void)ErrorJson(e).dump()) << e.message;
  // A number beyond float64 (nlohmann throws out_of_range, not parse_error; found by the fuzzer): a 400.
  EXPECT_FALSE(ParseJsonObject("{\"prompt\": [[1, 2], [4" + std::string(30, '1') + "E" + std::string(20, '1') + "]]}", &j, &e));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_NE(e.message.find("out of range"), std::string::npos) << e.message;
  EXPECT_FALSE(ParseJsonObject("[1, 2]", &j, &e));
  EXPECT_NE(e.message.find("a JSON array, not an object"), std::string::npos) << e.message;
  EXPECT_TRUE(ParseJsonObject("{\"a\": 1}", &j, &e));
  EXPECT_EQ(j["a"], 1);
}

TEST_F(OpenAiProtocolTest, MaxTokensDefaultsToTheRestOfTheContext) {
  CompletionRequest r;
  ApiError e;
  ASSERT_TRUE(Parse(json{{"prompt", {1, 2, 3}}}, Endpoint::kCompletions, &r, &e));
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_EQ(r.MaxNewTokens(0, config_->max_position_embeddings), config_->max_position_embeddings - 3);
  ASSERT_TRUE(Parse(json{{"prompt", {1, 2, 3}}, {"max_tokens", 7}}, Endpoint::kCompletions, &r, &e));
  EXPECT_EQ(r.MaxNewTokens(0, config_->max_position_embeddings), 7);
  ASSERT_TRUE(Parse(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 3},
                         {"max_completion_tokens", 5}},
                    Endpoint::kChat, &r, &e));
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"max_tokens", -1}}), "max_tokens");
  EXPECT_EQ(RejectedParam(json{{"prompt", {1, 2}}, {"max_tokens", config_->max_position_embeddings}}), "max_tokens");
  // A prompt that fills the context leaves no default completion: 400, not an empty 200.
  const json full(std::vector<int>(static_cast<size_t>(config_->max_position_embeddings), 1));
  EXPECT_EQ(RejectedParam(json{{"prompt", full}}), "prompt");
  ASSERT_TRUE(Parse(json{{"prompt", full}, {"max_tokens", 0}}, Endpoint::kCompletions, &r, &e)) << e.message;
  // 0: a completion's prompt scoring (echo), but no chat answer at all (OpenAI and vLLM: 400).
  ASSERT_TRUE(Parse(json{{"prompt", {1, 2}}, {"max_tokens", 0}}, Endpoint::kCompletions, &r, &e));
  const json chat{{"role", "user"}, {"content", "x"}};
  EXPECT_EQ(RejectedParam(json{{"messages", {chat}}, {"max_tokens", 0}}, Endpoint::kChat), "max_tokens");
  EXPECT_EQ(RejectedParam(json{{"messages", {chat}}, {"max_completion_tokens", 0}}, Endpoint::kChat),
            "max_completion_tokens");
}

// An encoder-decoder model (switch_transformers): the prompt feeds the encoder, so max_tokens is bounded
// by the decoder's context alone and defaults to all of it; without a chat template the chat endpoint
// is a 400 that says so.
TEST(OpenAiProtocolSwitchTest, PromptFeedsTheEncoderAndChatNeedsATemplate) {
  const std::string dir = testing::CachedSynth("--arch switch_transformers --preset tiny --seed 7");
  auto tok = Tokenizer::Load(JoinPath(dir, "tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto cfg = LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  ASSERT_TRUE(cfg->is_encoder_decoder());
  const ProtocolContext ctx{tok->get(), &*cfg};
  const int64_t context = cfg->max_position_embeddings;
  const json prompt = json::array({5, 17, 300, 42, 1});
  CompletionRequest r;
  ApiError e;
  ASSERT_TRUE(ParseCompletionRequest(json{{"prompt", prompt}, {"max_tokens", context}}.dump(), Endpoint::kCompletions,
                                     ctx, &r, &e))
      << e.message;
  EXPECT_EQ(r.MaxNewTokens(0, context, /*encoder_decoder=*/true), context);
  ASSERT_TRUE(ParseCompletionRequest(json{{"prompt", prompt}}.dump(), Endpoint::kCompletions, ctx, &r, &e));
  EXPECT_EQ(r.MaxNewTokens(0, context, /*encoder_decoder=*/true), context);
  EXPECT_EQ(r.MaxNewTokens(0, context), context - 5);  // decoder-only arithmetic, for contrast
  EXPECT_FALSE(ParseCompletionRequest(json{{"prompt", prompt}, {"max_tokens", context + 1}}.dump(),
                                      Endpoint::kCompletions, ctx, &r, &e));
  EXPECT_EQ(e.param, "max_tokens");

  e = ApiError();
  EXPECT_FALSE(ParseCompletionRequest(json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump(),
                                      Endpoint::kChat, ctx, &r, &e));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("no chat template"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("tokenizer_config.json"), std::string::npos) << e.message;
}

TEST_F(OpenAiProtocolTest, SeedsNAndSamplingRanges) {
  CompletionRequest a, b;
  ApiError e;
  ASSERT_TRUE(Parse(json{{"prompt", {1}}}, Endpoint::kCompletions, &a, &e));
  ASSERT_TRUE(Parse(json{{"prompt", {1}}}, Endpoint::kCompletions, &b, &e));
  EXPECT_FALSE(a.seeded);
  EXPECT_NE(a.sampling.seed, b.sampling.seed);  // a fresh seed per request (2^-64 to collide)
  EXPECT_EQ(a.sampling.temperature, 1.0f);
  ASSERT_TRUE(Parse(json{{"prompt", {1}}, {"seed", 42}, {"n", 3}, {"temperature", 0.5}, {"top_k", 4},
                         {"presence_penalty", 0.5}, {"frequency_penalty", -1}},
                    Endpoint::kCompletions, &a, &e));
  EXPECT_TRUE(a.seeded);
  EXPECT_EQ(a.sampling.seed, 42u);
  EXPECT_EQ(a.n, 3);
  EXPECT_EQ(a.sampling.top_k, 4);
  EXPECT_EQ(a.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(a.sampling.frequency_penalty, -1.0f);
  EXPECT_TRUE(a.stop_token_ids.empty());
  EXPECT_EQ(a.min_tokens, 0);
  ASSERT_TRUE(Parse(json{{"prompt", {1}}, {"stop_token_ids", {5, 7}}, {"min_tokens", 3}, {"max_tokens", 3}},
                    Endpoint::kCompletions, &a, &e));
  EXPECT_EQ(a.stop_token_ids, (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(a.min_tokens, 3);
  for (const json& bad : {json("5"), json::array({-1}), json::array({config_->vocab_size}), json::array({"5"}),
                          json(std::vector<int>(65, 5))})
    EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"stop_token_ids", bad}}), "stop_token_ids") << bad.dump();
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"min_tokens", -1}}), "min_tokens");
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"min_tokens", 5}, {"max_tokens", 4}}), "min_tokens");
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"min_tokens", config_->max_position_embeddings}}), "min_tokens")
      << "more than the context leaves";
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"min_tokens", 2}, {"response_format", {{"type", "json_object"}}}}),
            "min_tokens");
  EXPECT_EQ(a.sampling.min_p, 0.0f);               // off unless given
  EXPECT_EQ(a.sampling.repetition_penalty, 1.0f);
  ASSERT_TRUE(Parse(json{{"prompt", {1}}, {"min_p", 0.05}, {"repetition_penalty", 1.1}}, Endpoint::kCompletions, &a, &e));
  EXPECT_EQ(a.sampling.min_p, 0.05f);
  EXPECT_EQ(a.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"top_k", -1}}), "top_k");
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"n", 0}}), "n");
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"temperature", -0.1}}), "temperature");
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"top_p", 0}}), "top_p");
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"presence_penalty", 2.5}}), "presence_penalty");
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"seed", "x"}}), "seed");
}

TEST_F(OpenAiProtocolTest, LogprobsStreamOptionsAndEcho) {
  CompletionRequest r;
  ApiError e;
  const json msgs = {{{"role", "user"}, {"content", "x"}}};
  ASSERT_TRUE(Parse(json{{"messages", msgs}, {"logprobs", true}, {"top_logprobs", 3}}, Endpoint::kChat, &r, &e));
  EXPECT_EQ(r.logprobs, 3);
  ASSERT_TRUE(Parse(json{{"messages", msgs}, {"logprobs", true}}, Endpoint::kChat, &r, &e));
  EXPECT_EQ(r.logprobs, 0);
  ASSERT_TRUE(Parse(json{{"messages", msgs}}, Endpoint::kChat, &r, &e));
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(RejectedParam(json{{"messages", msgs}, {"top_logprobs", 2}}, Endpoint::kChat), "top_logprobs");
  EXPECT_EQ(RejectedParam(json{{"messages", msgs}, {"logprobs", true}, {"top_logprobs", 21}}, Endpoint::kChat),
            "top_logprobs");
  ASSERT_TRUE(Parse(json{{"prompt", {1}}, {"logprobs", 2}}, Endpoint::kCompletions, &r, &e));
  EXPECT_EQ(r.logprobs, 2);
  ASSERT_TRUE(Parse(json{{"prompt", {1}}, {"stream", true}, {"stream_options", {{"include_usage", true}}}},
                    Endpoint::kCompletions, &r, &e));
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(RejectedParam(json{{"prompt", {1}}, {"stream_options", {{"include_usage", true}}}}), "stream_options");
  ASSERT_TRUE(Parse(json{{"prompt", "hi"}, {"echo", true}}, Endpoint::kCompletions, &r, &e));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(RejectedParam(json{{"prompt", "hi"}, {"echo", true}, {"logprobs", 1}}), "echo");
  EXPECT_EQ(RejectedParam(json{{"messages", msgs}, {"echo", true}}, Endpoint::kChat), "echo");
}

TEST_F(OpenAiProtocolTest, UnsupportedFeaturesAre400NamingTheFieldAndNoOpsAreListed) {
  const json base{{"prompt", {1}}};
  auto with = [&](const char* key, json value) {
    json b = base;
    b[key] = std::move(value);
    return b;
  };
  EXPECT_EQ(RejectedParam(with("response_format", {{"type", "xml"}})), "response_format");
  EXPECT_EQ(RejectedParam(with("response_format", {{"type", "json_schema"}})), "response_format");
  EXPECT_EQ(RejectedParam(with("response_format", {{"type", "json_schema"},
                                                   {"json_schema", {{"schema", {{"type", "string"}, {"pattern", "a+"}}}}}})),
            "response_format");
  EXPECT_EQ(RejectedParam(with("tools", json::array({json{{"type", "function"}}}))), "tools");
  EXPECT_EQ(RejectedParam(with("tool_choice", "required")), "tool_choice");
  EXPECT_EQ(RejectedParam(with("logit_bias", {{"x5", 10}})), "logit_bias");
  EXPECT_EQ(RejectedParam(with("logit_bias", {{"5", 101}})), "logit_bias");
  EXPECT_EQ(RejectedParam(with("logit_bias", {{"5", "high"}})), "logit_bias");
  EXPECT_EQ(RejectedParam(with("logit_bias", {{std::to_string(config_->vocab_size), 1}})), "logit_bias");
  EXPECT_EQ(RejectedParam(with("logit_bias", json::array({5}))), "logit_bias");
  EXPECT_EQ(RejectedParam(with("best_of", 3)), "best_of");
  EXPECT_EQ(RejectedParam(with("suffix", "x")), "suffix");
  EXPECT_EQ(RejectedParam(with("repetition_penalty", 0)), "repetition_penalty");
  EXPECT_EQ(RejectedParam(with("repetition_penalty", 101)), "repetition_penalty");
  EXPECT_EQ(RejectedParam(with("repetition_penalty", "1.2")), "repetition_penalty");
  EXPECT_EQ(RejectedParam(with("min_p", -0.1)), "min_p");
  EXPECT_EQ(RejectedParam(with("min_p", 1.5)), "min_p");
  // vLLM's extensions that would change the answer are refused, not silently dropped.
  EXPECT_EQ(RejectedParam(with("include_stop_str_in_output", true)), "include_stop_str_in_output");
  EXPECT_EQ(RejectedParam(with("skip_special_tokens", false)), "skip_special_tokens");
  CompletionRequest r;
  ApiError e;
  json ok = with("response_format", {{"type", "text"}});
  ok["stop_token_ids"] = json::array();  // their no-op values pass
  ok["min_tokens"] = 0;
  ok["include_stop_str_in_output"] = false;
  ok["skip_special_tokens"] = true;
  ok["best_of"] = 1;
  ok["logit_bias"] = json::object();
  ok["user"] = "u1";
  ok["my_extension"] = 3;
  ASSERT_TRUE(Parse(ok, Endpoint::kCompletions, &r, &e)) << e.message;
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"my_extension", "user"}));
  EXPECT_TRUE(r.sampling.logit_bias.empty());
  EXPECT_EQ(r.grammar, nullptr);  // response_format text
  ASSERT_TRUE(Parse(with("response_format", {{"type", "json_object"}}), Endpoint::kCompletions, &r, &e)) << e.message;
  ASSERT_NE(r.grammar, nullptr);
  EXPECT_EQ(r.grammar->node(r.grammar->root()).kind, SchemaNode::Kind::kObject);
  ASSERT_TRUE(Parse(with("logit_bias", {{"5", 10}, {"7", -100}}), Endpoint::kCompletions, &r, &e)) << e.message;
  EXPECT_EQ(r.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, 10.0f}, {7, -100.0f}}));
  EXPECT_EQ(ErrorJson(BadRequest("m", "p")).dump(),
            R"({"error":{"code":null,"message":"m","param":"p","type":"invalid_request_error"}})");
  EXPECT_FALSE(ParseCompletionRequest("{not json", Endpoint::kCompletions, ProtocolContext{tokenizer_, config_}, &r, &e));
}

// The synthesized tokenizer with another chat template (what a model of that family ships).
std::unique_ptr<Tokenizer> WithTemplate(const std::string& dir, const std::string& chat_template) {
  auto read = [&](const char* name) {
    Result<std::string> text = ReadFileToString(JoinPath(dir, name));
    EXPECT_TRUE(text.ok()) << name;
    return json::parse(text.ok() ? *text : "{}");
  };
  json config = read("tokenizer_config.json");
  config["chat_template"] = chat_template;
  auto tok = Tokenizer::FromJson(read("tokenizer.json"), config, "test");
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// An assistant turn with tool calls and a null content: null where the template can render it, "" where
// it cannot (gpt-oss's published template tests `"..." in message.content`), the template's error where
// neither renders.
TEST_F(OpenAiProtocolTest, NullContentBesideToolCallsFallsBackToEmptyWhereTheTemplateCannotTakeNull) {
  const json call{{"id", "c1"}, {"type", "function"},
                  {"function", {{"name", "weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}};
  const json messages = json::array({json{{"role", "user"}, {"content", "hi"}},
                                     json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                                     json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}});
  const auto parse = [&](const std::string& tmpl, CompletionRequest* r, ApiError* e) {
    std::unique_ptr<Tokenizer> tok = WithTemplate(*dir_, tmpl);
    return ParseCompletionRequest(json{{"messages", messages}}.dump(), Endpoint::kChat,
                                  ProtocolContext{tok.get(), config_}, r, e);
  };
  CompletionRequest r;
  ApiError e;
  // Renders null (as jinja2 does: "None"): kept.
  ASSERT_TRUE(parse("{% for m in messages %}[{{ m.content }}]{% if m.tool_calls %}{{ m.tool_calls[0].function.name }}"
                    "{% endif %}{% endfor %}",
                    &r, &e))
      << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi][None]weather[sunny]");
  // `in` on null fails: rendered with "" instead.
  const std::string harmony_like =
      "{% for m in messages %}{% if 'content' in m and '<|channel|>' in m.content %}{{ raise_exception('tags') }}"
      "{% endif %}[{{ m.content }}]{% if m.tool_calls %}{{ m.tool_calls[0].function.name }}{% endif %}{% endfor %}";
  ASSERT_TRUE(parse(harmony_like, &r, &e)) << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi][]weather[sunny]");
  // A template that fails either way: its first error, naming the line.
  EXPECT_FALSE(parse("{% for m in messages %}{{ m.content.upper() }}{{ m.tool_calls[0].x.y }}{% endfor %}", &r, &e));
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("chat_template line"), std::string::npos) << e.message;
}

// Calls are parsed out of an answer only when the request offers tools (OpenAI never answers tool_calls
// without them): no tools, an empty list or tool_choice none leave call-shaped text in the content.
TEST_F(OpenAiProtocolTest, ToolCallsAreParsedOnlyWhenTheRequestOffersTools) {
  const std::string hermes = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{# <tool_call> #}";
  const json tools = json::array({json{{"type", "function"}, {"function", {{"name", "weather"}}}}});
  const auto parse = [&](json extra, CompletionRequest* r, ApiError* e) {
    std::unique_ptr<Tokenizer> tok = WithTemplate(*dir_, hermes);
    json body{{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return ParseCompletionRequest(body.dump(), Endpoint::kChat, ProtocolContext{tok.get(), config_}, r, e);
  };
  CompletionRequest r;
  ApiError e;
  ASSERT_TRUE(parse({{"tools", tools}}, &r, &e)) << e.message;
  EXPECT_NE(r.chat_syntax.tool_calls, ToolCallSyntax::kNone);
  for (const json& extra : {json::object(), json{{"tools", json::array()}}, json{{"tools", tools}, {"tool_choice", "none"}}}) {
    ASSERT_TRUE(parse(extra, &r, &e)) << e.message;
    EXPECT_EQ(r.chat_syntax.tool_calls, ToolCallSyntax::kNone) << extra.dump();
  }
}

// DeepSeek-V3's published template concatenates a call's arguments as the JSON string clients send: where
// the parsed object fails, the string as sent (what transformers hands the template) renders the call. A
// template that, with an empty content instead of null, renders the turn without its calls is a 400 naming
// the message, not a prompt whose tool result follows no call.
TEST_F(OpenAiProtocolTest, ToolCallArgumentsAsSentWhereTheTemplateConcatenatesThemAndNoCallIsDroppedSilently) {
  const json call{{"id", "c1"}, {"type", "function"},
                  {"function", {{"name", "weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}};
  const auto messages = [&](json assistant) {
    return json::array({json{{"role", "user"}, {"content", "hi"}}, std::move(assistant),
                        json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}});
  };
  const auto parse = [&](const std::string& tmpl, const json& msgs, CompletionRequest* r, ApiError* e) {
    std::unique_ptr<Tokenizer> tok = WithTemplate(*dir_, tmpl);
    return ParseCompletionRequest(json{{"messages", msgs}}.dump(), Endpoint::kChat,
                                  ProtocolContext{tok.get(), config_}, r, e);
  };
  const std::string deepseek_like =
      "{% for m in messages %}{% if m.role == 'assistant' and m.content is none %}{% for t in m.tool_calls %}"
      "<call>{{ t.function.name + '```json\\n' + t.function.arguments + '```' }}</call>{% endfor %}"
      "{% elif m.content is not none %}[{{ m.content }}]{% endif %}{% endfor %}";
  CompletionRequest r;
  ApiError e;
  ASSERT_TRUE(parse(deepseek_like, messages({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}}), &r, &e))
      << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi]<call>weather```json\n{\"city\": \"Oslo\"}```</call>[sunny]");
  // No content key at all: the same.
  ASSERT_TRUE(parse(deepseek_like, messages({{"role", "assistant"}, {"tool_calls", {call}}}), &r, &e)) << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi]<call>weather```json\n{\"city\": \"Oslo\"}```</call>[sunny]");
  // Arguments sent as an object: their compact JSON text.
  json object_args = call;
  object_args["function"]["arguments"] = {{"city", "Oslo"}};
  ASSERT_TRUE(parse(deepseek_like, messages({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {object_args}}}),
                    &r, &e))
      << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi]<call>weather```json\n{\"city\":\"Oslo\"}```</call>[sunny]");
  // A template that renders a call only beside a null content, and fails on null: a 400 naming the
  // message, not a prompt without the call.
  const std::string null_only =
      "{% for m in messages %}{% if m.content is none %}{{ m.content.upper() }}{{ m.tool_calls[0].function.name }}"
      "{% else %}[{{ m.content }}]{% endif %}{% endfor %}";
  EXPECT_FALSE(parse(null_only, messages({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}}), &r, &e));
  EXPECT_EQ(e.param, "messages[1].tool_calls");
  EXPECT_NE(e.message.find("leaves them out"), std::string::npos) << e.message;
  // A template that renders tool calls nowhere: the calls are not the template's business; served.
  ASSERT_TRUE(parse("{% for m in messages %}[{{ m.content }}]{% endfor %}",
                    messages({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}}), &r, &e))
      << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi][][sunny]");
}

// LFM2-8B-A1B's template lists the tools (<|tool_list_start|>) but renders no tool_calls: an assistant turn's calls
// go into its text as the model writes them, Python calls between its markers, after any content; a template that
// renders tool_calls itself (LFM2.5's) gets them as fields.
TEST_F(OpenAiProtocolTest, PythonicHistoryCallsGoIntoTheTurnsTextWhereTheTemplateRendersNone) {
  const json call{{"id", "c0"},
                  {"type", "function"},
                  {"function", {{"name", "weather"}, {"arguments", R"({"city": "O'slo", "days": 2, "metric": true})"}}}};
  const json msgs = json::array({json{{"role", "user"}, {"content", "hi"}},
                                 json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call, call}}},
                                 json{{"role", "tool"}, {"content", "sunny"}}});
  const auto parse = [&](const std::string& tmpl, const json& m, CompletionRequest* r, ApiError* e) {
    std::unique_ptr<Tokenizer> tok = WithTemplate(*dir_, tmpl);
    return ParseCompletionRequest(json{{"messages", m}}.dump(), Endpoint::kChat, ProtocolContext{tok.get(), config_}, r,
                                  e);
  };
  CompletionRequest r;
  ApiError e;
  const std::string lfm2 = "{# <|tool_list_start|> #}{% for m in messages %}[{{ m.content }}]{% endfor %}";
  ASSERT_TRUE(parse(lfm2, msgs, &r, &e)) << e.message;
  const std::string one = R"(weather(city='O\'slo', days=2, metric=True))";
  EXPECT_EQ(r.prompts[0].text, "[hi][<|tool_call_start|>[" + one + ", " + one + "]<|tool_call_end|>][sunny]");
  json with_text = msgs;
  with_text[1]["content"] = "Let me look.";
  ASSERT_TRUE(parse(lfm2, with_text, &r, &e)) << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi][Let me look.<|tool_call_start|>[" + one + ", " + one + "]<|tool_call_end|>][sunny]");
  const std::string lfm25 =
      "{# <|tool_call_start|> #}{% for m in messages %}[{{ m.content or '' }}{% for c in m.tool_calls or [] %}"
      "{{ c.function.name }}{% endfor %}]{% endfor %}";
  ASSERT_TRUE(parse(lfm25, msgs, &r, &e)) << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi][weatherweather][sunny]");
}

// gpt-oss's published template renders a tool-call turn's `thinking` (its analysis channel): the field
// reaches the template as sent; reasoning_content stays reasoning_content (transformers renames nothing).
TEST_F(OpenAiProtocolTest, ThinkingReachesTemplatesThatReadIt) {
  const std::string tmpl =
      "{% for m in messages %}{% if m.thinking %}<analysis>{{ m.thinking }}</analysis>{% endif %}[{{ m.content }}]"
      "{% endfor %}";
  const auto parse = [&](json assistant, CompletionRequest* r, ApiError* e) {
    std::unique_ptr<Tokenizer> tok = WithTemplate(*dir_, tmpl);
    const json msgs = json::array({json{{"role", "user"}, {"content", "hi"}}, std::move(assistant),
                                   json{{"role", "user"}, {"content", "and?"}}});
    return ParseCompletionRequest(json{{"messages", msgs}}.dump(), Endpoint::kChat,
                                  ProtocolContext{tok.get(), config_}, r, e);
  };
  CompletionRequest r;
  ApiError e;
  ASSERT_TRUE(parse({{"role", "assistant"}, {"content", "yes"}, {"thinking", "Need the tool."}}, &r, &e)) << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi]<analysis>Need the tool.</analysis>[yes][and?]");
  ASSERT_TRUE(parse({{"role", "assistant"}, {"content", "yes"}, {"reasoning_content", "Mine."}}, &r, &e)) << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi][yes][and?]");
  ASSERT_TRUE(parse({{"role", "assistant"}, {"content", "yes"}}, &r, &e)) << e.message;
  EXPECT_EQ(r.prompts[0].text, "[hi][yes][and?]");
}

// tool_choice "required" / named, in each template family's own call syntax (JSON, or GLM's and Qwen3-Coder's
// tagged pairs); a thinking model reasons first, then the constrained part.
TEST_F(OpenAiProtocolTest, ForcedCallsInTheTemplatesOwnSyntaxAndReasoningFirst) {
  const std::string plain = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
  const json tools = json::array(
      {json{{"type", "function"},
            {"function", {{"name", "weather"},
                          {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}},
                                          {"required", {"city"}}}}}}},
       json{{"type", "function"}, {"function", {{"name", "noop"}}}}});
  const auto parse = [&](const std::string& tmpl, json extra, CompletionRequest* r, ApiError* e) {
    std::unique_ptr<Tokenizer> tok = WithTemplate(*dir_, tmpl);
    json body{{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return ParseCompletionRequest(body.dump(), Endpoint::kChat, ProtocolContext{tok.get(), config_}, r, e);
  };
  const auto accepts = [](const CompletionRequest& r, const std::string& text) {
    JsonMatcher m(r.grammar);
    return m.Feed(text) && m.Accepting();
  };
  const json forced{{"tools", tools}, {"tool_choice", "required"}};
  const json named{{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "weather"}}}}}};
  CompletionRequest r;
  ApiError e;
  // Mistral: [TOOL_CALLS][{...}]
  ASSERT_TRUE(parse(plain + "{# [TOOL_CALLS] #}", named, &r, &e)) << e.message;
  ASSERT_NE(r.grammar, nullptr);
  EXPECT_TRUE(accepts(r, R"([TOOL_CALLS][{"name": "weather", "arguments": {"city": "Oslo"}}])"));
  EXPECT_FALSE(accepts(r, R"([TOOL_CALLS][{"name": "noop", "arguments": {}}])"));
  EXPECT_FALSE(accepts(r, R"(<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}</tool_call>)"));
  // Granite 3.x: <|tool_call|>[{...}]
  ASSERT_TRUE(parse(plain + "{# <|tool_call|> #}", named, &r, &e)) << e.message;
  ASSERT_NE(r.grammar, nullptr);
  EXPECT_TRUE(accepts(r, R"(<|tool_call|>[{"name": "weather", "arguments": {"city": "Oslo"}}])"));
  EXPECT_FALSE(accepts(r, R"(<|tool_call|>[{"name": "noop", "arguments": {}}])"));
  EXPECT_FALSE(accepts(r, R"([TOOL_CALLS][{"name": "weather", "arguments": {"city": "Oslo"}}])"));
  // LFM2 / LFM2.5: the JSON form of its Pythonic calls between <|tool_call_start|> and <|tool_call_end|>.
  ASSERT_TRUE(parse(plain + "{# <|tool_list_start|> #}", named, &r, &e)) << e.message;
  ASSERT_NE(r.grammar, nullptr);
  EXPECT_TRUE(accepts(r, R"(<|tool_call_start|>[{"name": "weather", "arguments": {"city": "Oslo"}}]<|tool_call_end|>)"));
  EXPECT_FALSE(accepts(r, R"(<|tool_call_start|>[{"name": "weather", "arguments": {"city": "Oslo"}}])"));
  EXPECT_FALSE(accepts(r, R"(<|tool_call_start|>[{"name": "noop", "arguments": {}}]<|tool_call_end|>)"));
  // DeepSeek-V3 (a ```json fence) and V3.1 (none): the name in the frame, one alternative per tool.
  const std::string ds = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>";
  ASSERT_TRUE(parse(plain + "{# <｜tool▁call▁begin｜>function<｜tool▁sep｜>x\n```json\n #}", forced, &r, &e)) << e.message;
  EXPECT_EQ(r.grammar->alternatives().size(), 2u);
  EXPECT_TRUE(accepts(r, ds + "function<｜tool▁sep｜>weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"));
  EXPECT_TRUE(accepts(r, ds + "function<｜tool▁sep｜>noop\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"));
  EXPECT_FALSE(accepts(r, ds + "function<｜tool▁sep｜>noop\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"));
  ASSERT_TRUE(parse(plain + "{# <｜tool▁call▁begin｜>x<｜tool▁sep｜> #}", named, &r, &e)) << e.message;
  EXPECT_TRUE(accepts(r, ds + "weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"));
  // Hermes / Qwen as before.
  ASSERT_TRUE(parse(plain + "{# <tool_call> #}", forced, &r, &e)) << e.message;
  EXPECT_TRUE(accepts(r, R"(<tool_call>{"name": "noop", "arguments": {}}</tool_call>)"));
  // Tagged pairs: GLM's <arg_key>/<arg_value>, Qwen3-Coder's <parameter=...>, the name in the frame.
  ASSERT_TRUE(parse(plain + "{# <tool_call><arg_key> #}", forced, &r, &e)) << e.message;
  EXPECT_EQ(r.grammar->tags(), TagSyntax::kGlm);
  EXPECT_EQ(r.grammar->alternatives().size(), 2u);
  EXPECT_TRUE(accepts(r, "<tool_call>weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>"));
  EXPECT_TRUE(accepts(r, "<tool_call>noop\n</tool_call>"));
  EXPECT_FALSE(accepts(r, "<tool_call>noop\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>"));
  EXPECT_FALSE(accepts(r, "<tool_call>weather\n</tool_call>"));  // city is required
  EXPECT_TRUE(r.chat_syntax.string_arguments.count({"weather", "city"}));
  ASSERT_TRUE(parse(plain + "{# <tool_call><parameter= #}", named, &r, &e)) << e.message;
  EXPECT_EQ(r.grammar->tags(), TagSyntax::kQwenXml);
  EXPECT_TRUE(accepts(r, "<tool_call>\n<function=weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"));
  // No call syntax at all.
  EXPECT_FALSE(parse(plain, forced, &r, &e));
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_NE(e.message.find("writes no tool calls"), std::string::npos) << e.message;
  // A thinking model (the prompt ends in an open <think>): free reasoning up to </think>, then the
  // forced call or the JSON answer; the parser keeps the reasoning apart.
  const std::string thinking = plain + "{# <tool_call> </think> #}<think>\n";
  ASSERT_TRUE(parse(thinking, forced, &r, &e)) << e.message;
  EXPECT_TRUE(r.chat_syntax.starts_in_reasoning);
  EXPECT_EQ(r.grammar->free_until(), "</think>");
  EXPECT_TRUE(accepts(r, "The user wants weather.</think>\n\n<tool_call>{\"name\": \"noop\", \"arguments\": {}}</tool_call>"));
  EXPECT_FALSE(accepts(r, "<tool_call>{\"name\": \"noop\", \"arguments\": {}}</tool_call>"));
  ASSERT_TRUE(parse(thinking, {{"response_format", {{"type", "json_object"}}}}, &r, &e)) << e.message;
  EXPECT_TRUE(r.chat_syntax.reasoning);
  EXPECT_EQ(r.chat_syntax.tool_calls, ToolCallSyntax::kNone);
  EXPECT_TRUE(accepts(r, "Think {not json} first.</think>\n{\"a\": 1}"));
  EXPECT_FALSE(accepts(r, "{\"a\": 1}"));
  // gpt-oss's Harmony: a forced call is a message to functions.NAME (its <|call|> is an EOS id); a JSON
  // answer is the final channel's message.
  const std::string harmony = plain + "{# <|channel|>final<|message|> #}<|start|>assistant";
  ASSERT_TRUE(parse(harmony, named, &r, &e)) << e.message;
  EXPECT_TRUE(r.chat_syntax.harmony);
  EXPECT_TRUE(accepts(r, "<|channel|>commentary to=functions.weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}"));
  EXPECT_FALSE(accepts(r, "<|channel|>final<|message|>{\"city\": \"Oslo\"}"));
  ASSERT_TRUE(parse(harmony, {{"response_format", {{"type", "json_object"}}}}, &r, &e)) << e.message;
  EXPECT_TRUE(r.chat_syntax.harmony);
  EXPECT_TRUE(accepts(r, "<|channel|>final<|message|>{\"a\": 1}"));
  EXPECT_FALSE(accepts(r, "{\"a\": 1}"));
  // Without the open <think> the JSON is the whole answer, as before.
  ASSERT_TRUE(parse(plain + "{# </think> #}", {{"response_format", {{"type", "json_object"}}}}, &r, &e)) << e.message;
  EXPECT_FALSE(r.chat_syntax.active());
  EXPECT_TRUE(r.grammar->free_until().empty());
}

// Forced calls of tools whose parameters use $defs / "#" (pydantic's output) resolve them against the
// parameters, not the {"name", "arguments"} wrapper; a schema that admits anything means any object;
// one that admits no object, and a name the parser could not read back, are 400s naming the field.
TEST_F(OpenAiProtocolTest, ForcedCallParametersAreTheirOwnSchemaDocumentAndNamesAreReadable) {
  const std::string hermes = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{# <tool_call> #}";
  std::unique_ptr<Tokenizer> tok = WithTemplate(*dir_, hermes);
  const auto parse = [&](const json& tools, CompletionRequest* r, ApiError* e) {
    json body{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", tools}, {"tool_choice", "required"}};
    return ParseCompletionRequest(body.dump(), Endpoint::kChat, ProtocolContext{tok.get(), config_}, r, e);
  };
  const auto tool = [](const std::string& name, json params) {
    json f{{"name", name}};
    if (!params.is_null()) f["parameters"] = std::move(params);
    return json{{"type", "function"}, {"function", f}};
  };
  const auto accepts = [](const CompletionRequest& r, const std::string& text) {
    JsonMatcher m(r.grammar);
    return m.Feed(text) && m.Accepting();
  };
  const json pydantic = json::parse(R"({"$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}},
                                        "required": ["city"], "additionalProperties": false}},
                                        "type": "object", "properties": {"home": {"$ref": "#/$defs/Address"}},
                                        "required": ["home"], "additionalProperties": false})");
  CompletionRequest r;
  ApiError e;
  for (const json& tools : {json::array({tool("move", pydantic)}), json::array({tool("move", pydantic), tool("stay", nullptr)})}) {
    ASSERT_TRUE(parse(tools, &r, &e)) << e.message;
    EXPECT_TRUE(accepts(r, R"(<tool_call>{"name": "move", "arguments": {"home": {"city": "Oslo"}}}</tool_call>)"));
    EXPECT_FALSE(accepts(r, R"(<tool_call>{"name": "move", "arguments": {"home": {}}}</tool_call>)"));
  }
  // {} and true: any object, never a bare number or string.
  for (const json& any : {json::object(), json(true)}) {
    ASSERT_TRUE(parse(json::array({tool("free", any)}), &r, &e)) << e.message;
    EXPECT_TRUE(accepts(r, R"(<tool_call>{"name": "free", "arguments": {"x": [1]}}</tool_call>)"));
    EXPECT_FALSE(accepts(r, R"(<tool_call>{"name": "free", "arguments": 8}</tool_call>)"));
  }
  EXPECT_FALSE(parse(json::array({tool("s", json{{"type", "string"}})}), &r, &e));
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_NE(e.message.find("tools[0].function.parameters must describe an object"), std::string::npos) << e.message;
  json bad = pydantic;
  bad["properties"]["home"]["$ref"] = "#/$defs/Nowhere";
  EXPECT_FALSE(parse(json::array({tool("ok", nullptr), tool("move", bad)}), &r, &e));
  EXPECT_NE(e.message.find("tools[1].function.parameters/properties/home does not resolve"), std::string::npos)
      << e.message;
  // Names: what the output parser reads back, or a 400 before anything runs (forced or not).
  for (const char* name : {"has space", "we\"ird", "", "x\n"}) {
    json body{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", json::array({tool(name, nullptr)})}};
    EXPECT_FALSE(ParseCompletionRequest(body.dump(), Endpoint::kChat, ProtocolContext{tok.get(), config_}, &r, &e));
    EXPECT_EQ(e.param, "tools[0].function.name") << name;
  }
  ASSERT_TRUE(parse(json::array({tool("mcp.server:get-item_2", nullptr)}), &r, &e)) << e.message;
}

}  // namespace
}  // namespace zipmoe::api
