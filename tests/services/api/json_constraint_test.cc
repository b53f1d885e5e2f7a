// Tests for services/api/json_constraint: the mask equals the brute-force answer (each token's bytes
// fed to a copy of the matcher) in every state a walk through valid texts reaches, on a real
// byte-level BPE vocabulary; and random sampling under the mask always ends in a value that parses
// and has the schema's shape.
#include "services/api/json_constraint.h"

#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "tests/test_util.h"

namespace zipmoe::api {
namespace {

using nlohmann::json;

class JsonConstraintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = testing::CachedSynth("--arch qwen2_moe --preset tiny --seed 3");
    auto tok = Tokenizer::Load(JoinPath(dir, "tokenizer.json"));
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = std::move(tok).value().release();
    eos_ = 2045;  // <|endoftext|> of the synthesized tokenizer
    vocab_ = new std::shared_ptr<const ConstraintVocabulary>(
        ConstraintVocabulary::Build(*tokenizer_, tokenizer_->vocab_size(), {eos_}));
  }
  static std::shared_ptr<const JsonGrammar> Grammar(const char* schema) {
    auto g = JsonGrammar::Compile(json::parse(schema));
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return *g;
  }
  // Brute force: token t is allowed iff its bytes continue the text; EOS iff the text is complete
  // (or nothing else is allowed).
  static std::vector<uint8_t> BruteForce(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
    JsonMatcher base(g);
    EXPECT_TRUE(base.Feed(text)) << text;
    std::vector<uint8_t> allowed((*vocab_)->size(), 0);
    bool any = false;
    for (int32_t t = 0; t < (*vocab_)->size(); ++t) {
      const std::string& b = (*vocab_)->bytes(t);
      if (b.empty()) continue;
      JsonMatcher m = base;
      if (m.Feed(b)) allowed[static_cast<size_t>(t)] = 1, any = true;
    }
    if (base.Accepting() || !any) allowed[static_cast<size_t>(eos_)] = 1;
    return allowed;
  }
  static Tokenizer* tokenizer_;
  static int32_t eos_;
  static std::shared_ptr<const ConstraintVocabulary>* vocab_;
};
Tokenizer* JsonConstraintTest::tokenizer_ = nullptr;
int32_t JsonConstraintTest::eos_ = 0;
std::shared_ptr<const ConstraintVocabulary>* JsonConstraintTest::vocab_ = nullptr;

TEST_F(JsonConstraintTest, MaskEqualsBruteForceAtEveryPrefix) {
  const char* schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
      "n": {"type": "number"}, "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["ab", "c"]}},
      "note": {"type": ["string", "null"]}}, "required": ["name", "n"]})";
  auto g = Grammar(schema);
  const std::string text = "{\"name\": \"h\\u00e9 y\", \"n\": -12.5e3, \"tags\": [\"ab\", \"c\"], \"note\": \"the dog\", "
                           "\"ok\": false}";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    // Every prefix is reached token by token: feed the prefix through Accept of its bytes.
    JsonConstraint c(g, *vocab_);
    JsonMatcher probe(g);
    ASSERT_TRUE(probe.Feed(text.substr(0, cut))) << cut;
    // Accept needs token ids: walk the prefix with single-byte tokens where the vocabulary has them.
    bool reached = true;
    for (size_t i = 0; i < cut && reached; ++i) {
      Result<std::vector<int32_t>> ids = tokenizer_->Encode(text.substr(i, 1), false);
      reached = ids.ok() && ids->size() == 1 && (*vocab_)->bytes((*ids)[0]) == text.substr(i, 1);
      if (reached) c.Accept((*ids)[0]);
    }
    if (!reached) continue;
    EXPECT_EQ(c.Allowed(), BruteForce(g, text.substr(0, cut))) << "after " << text.substr(0, cut);
  }
}

TEST_F(JsonConstraintTest, RandomSamplingAlwaysEndsInAValidValue) {
  auto g = Grammar(R"({"type": "object", "properties": {"id": {"type": "integer"},
      "label": {"type": "string", "maxLength": 6}, "xs": {"type": "array", "items": {"type": "number"}, "maxItems": 3},
      "kind": {"enum": ["a", "b", 3]}}, "required": ["id", "label", "xs", "kind"]})");
  std::mt19937 rng(7);
  for (int run = 0; run < 30; ++run) {
    JsonConstraint c(g, *vocab_);
    std::vector<float> logits(static_cast<size_t>((*vocab_)->size()));
    std::string text;
    bool ended = false;
    for (int step = 0; step < 2000 && !ended; ++step) {
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (float& l : logits) l = u(rng);
      c.Mask(logits.data(), static_cast<int64_t>(logits.size()));
      std::vector<int32_t> ok;
      for (size_t t = 0; t < logits.size(); ++t)
        if (logits[t] > -1e30f) ok.push_back(static_cast<int32_t>(t));
      ASSERT_FALSE(ok.empty());
      const int32_t t = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
      if (t == eos_) {
        ended = true;
        break;
      }
      text += (*vocab_)->bytes(t);
      c.Accept(t);
    }
    ASSERT_TRUE(ended) << text;
    json v = json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    ASSERT_TRUE(v.is_object()) << text;
    EXPECT_TRUE(v["id"].is_number_integer()) << text;
    EXPECT_LE(v["label"].get<std::string>().size(), 6u * 4) << text;
    EXPECT_LE(v["xs"].size(), 3u) << text;
    EXPECT_TRUE(v["kind"] == "a" || v["kind"] == "b" || v["kind"] == 3) << text;
  }
}

TEST_F(JsonConstraintTest, EosOnlyWhenCompleteAndForeignTokensEndTheSequence) {
  auto g = Grammar(R"({"type": "integer"})");
  JsonConstraint c(g, *vocab_);
  EXPECT_EQ(c.Allowed()[static_cast<size_t>(eos_)], 0);
  Result<std::vector<int32_t>> seven = tokenizer_->Encode("7", false);
  ASSERT_TRUE(seven.ok());
  ASSERT_EQ(seven->size(), 1u);
  c.Accept((*seven)[0]);
  EXPECT_EQ(c.Allowed()[static_cast<size_t>(eos_)], 1);
  EXPECT_EQ(c.Allowed()[static_cast<size_t>((*seven)[0])], 1);  // 77 is an integer too
  // A token the mask forbade (the caller sampled outside it): only EOS from then on.
  Result<std::vector<int32_t>> x = tokenizer_->Encode("x", false);
  ASSERT_TRUE(x.ok());
  c.Accept((*x)[0]);
  const std::vector<uint8_t>& after = c.Allowed();
  EXPECT_EQ(std::count(after.begin(), after.end(), 1), 1);
  EXPECT_EQ(after[static_cast<size_t>(eos_)], 1);
}

// The free text before a thinking model's "</think>": the class fast path (every token without the
// marker's first byte) gives the brute-force mask, at rest and with part of the marker written.
TEST_F(JsonConstraintTest, FreeTextBeforeTheMarkerMatchesBruteForce) {
  auto g = JsonGrammar::CompileAlternatives({{json::parse(R"({"type": "integer"})"), "", ""}}, "</think>");
  ASSERT_TRUE(g.ok());
  for (const std::string text : {"", "I think so", "a </th", "ok</think>", "ok</think> 1"}) {
    JsonConstraint c(*g, *vocab_);
    for (char ch : text) {  // single-byte tokens reach the state
      Result<std::vector<int32_t>> ids = tokenizer_->Encode(std::string(1, ch), false);
      ASSERT_TRUE(ids.ok() && ids->size() == 1) << ch;
      c.Accept((*ids)[0]);
    }
    EXPECT_EQ(c.Allowed(), BruteForce(*g, text)) << "after '" << text << "'";
  }
}

// A special token is allowed where its text writes the frame (a forced call's marker), and nowhere
// else: not inside the value, not as free text.
TEST_F(JsonConstraintTest, SpecialTokensOnlyWriteFixedTexts) {
  const std::optional<int32_t> im_start = tokenizer_->TokenToId("<|im_start|>");
  ASSERT_TRUE(im_start.has_value());
  ASSERT_TRUE(tokenizer_->IsSpecialToken(*im_start));
  auto g = JsonGrammar::CompileAlternatives({{json::parse(R"({"type": "string"})"), "<|im_start|>", ""}});
  ASSERT_TRUE(g.ok());
  JsonConstraint c(*g, *vocab_);
  EXPECT_EQ(c.Allowed()[static_cast<size_t>(*im_start)], 1);
  c.Accept(*im_start);
  EXPECT_EQ(c.Allowed()[static_cast<size_t>(*im_start)], 0);  // the value now
  const int32_t quote = (*tokenizer_->Encode("\"", false))[0];
  EXPECT_EQ(c.Allowed()[static_cast<size_t>(quote)], 1);
  c.Accept(quote);
  EXPECT_EQ(c.Allowed()[static_cast<size_t>(*im_start)], 0);  // inside the string: its text is not content
  c.Accept(quote);
  EXPECT_TRUE(c.complete());
  // Free text does not take special tokens either.
  auto lead = JsonGrammar::CompileAlternatives({{json::parse(R"({"type": "string"})"), "", ""}}, "</think>");
  ASSERT_TRUE(lead.ok());
  JsonConstraint f(*lead, *vocab_);
  EXPECT_EQ(f.Allowed()[static_cast<size_t>(*im_start)], 0);
}

}  // namespace
}  // namespace zipmoe::api
