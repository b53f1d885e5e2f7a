// Tests for common/tokenizer/tokenizer_unigram (SentencePiece Unigram, T5 style): Viterbi segmentation, unknown
// scores and ties as HF's encode_optimized, byte fallback, errors, and the T5 pipeline with sentinels.
#include "common/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer_pretokenizer.h"
#include "common/tokenizer/tokenizer_regex.h"
#include "common/tokenizer/tokenizer_unicode.h"
#include "common/tokenizer/tokenizer_unigram.h"
#include "tests/common/tokenizer_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;
using tokenizer::test::MustLoad;
using tokenizer::test::MustEncode;

// ---- Unigram (SentencePiece) model, T5 style ----

// A T5-shaped tokenizer.json: vocab [<pad>, </s>, <unk>, pieces..., <extra_id_1>, <extra_id_0>],
// Metaspace pre-tokenizer and decoder, sentinels and specials as added tokens, "</s>" appended.
json T5TokenizerJson(const std::vector<std::pair<std::string, double>>& pieces) {
  json vocab = json::array({json::array({"<pad>", 0.0}), json::array({"</s>", 0.0}), json::array({"<unk>", 0.0})});
  for (const auto& [piece, score] : pieces) vocab.push_back(json::array({piece, score}));
  const int sentinel1 = static_cast<int>(vocab.size());
  vocab.push_back(json::array({"<extra_id_1>", 0.0}));
  vocab.push_back(json::array({"<extra_id_0>", 0.0}));
  json added = json::array();
  const std::vector<std::pair<int, std::string>> specials = {
      {0, "<pad>"}, {1, "</s>"}, {2, "<unk>"}, {sentinel1, "<extra_id_1>"}, {sentinel1 + 1, "<extra_id_0>"}};
  for (const auto& [id, content] : specials) {
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  const json metaspace = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  json post = {{"type", "TemplateProcessing"},
               {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
               {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}};
  return {{"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", metaspace}, {"post_processor", post},
          {"decoder", metaspace}, {"model", {{"type", "Unigram"}, {"unk_id", 2}, {"vocab", vocab}, {"byte_fallback", false}}}};
}

std::unique_ptr<tokenizer::UnigramModel> MustParseUnigram(const json& model) {
  auto m = tokenizer::UnigramModel::FromJson(model, "test");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<std::string> Segment(const tokenizer::UnigramModel& model, const std::string& text) {
  std::vector<std::string> out;
  Status s = model.Segment(text, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// HF tokenizers' own doc example (models/unigram/model.rs, Unigram::encode): the best path, with the
// two unknown "x" fused into one string.
TEST(TokenizerUnigramTest, ViterbiPicksBestPathAndFusesUnknowns) {
  json vocab = json::array({json::array({"<unk>", 0.0}), json::array({"a", 0.0}), json::array({"b", 0.0}),
                            json::array({"c", 0.0}), json::array({"d", 0.0}), json::array({"cd", 1.0}),
                            json::array({"ab", 2.0}), json::array({"abc", 5.0}), json::array({"abcd", 10.0})});
  auto model = MustParseUnigram({{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}});
  ASSERT_NE(model, nullptr);
  EXPECT_THAT(Segment(*model, "abcdacdxx"), ElementsAre("abcd", "a", "cd", "xx"));
  std::vector<int32_t> ids;
  ASSERT_TRUE(model->Tokenize("abcdacdxx", &ids).ok());
  EXPECT_THAT(ids, ElementsAre(8, 1, 5, 0));
  EXPECT_EQ(model->unk_score(), -10.0);  // min_score 0 - kUnkPenalty
  EXPECT_TRUE(Segment(*model, "").empty());
}

// An unknown character costs min_score - 10: with min_score -40, <unk>(c) + "de" scores -50, so it
// beats "cd" + "e" when "e" scores -11 (-51) and loses when "e" scores -9 (-49).
TEST(TokenizerUnigramTest, UnknownCharacterScoresMinScoreMinusTen) {
  for (const auto& [e_score, want] : std::vector<std::pair<double, std::vector<std::string>>>{
           {-9.0, {"cd", "e"}}, {-11.0, {"c", "de"}}}) {
    json vocab = json::array({json::array({"<unk>", 0.0}), json::array({"cd", -40.0}), json::array({"de", 0.0}),
                              json::array({"e", e_score}), json::array({"q", -40.0})});
    auto model = MustParseUnigram({{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}});
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->unk_score(), -50.0);
    EXPECT_EQ(Segment(*model, "cde"), want) << e_score;
  }
}

// Runs of one character tie mathematically (~9 ~9 ~8 vs ~8 ~9 ~9) and float rounding decides. As
// HF's encode_optimized, the best path to each position is kept and compared without the next
// edge's score. The word of ShareGPT prompt 472 on which transformers.js's Viterbi, which compares
// with it, differs (tests/tokenizer_reference/reference_encode.mjs).
TEST(TokenizerUnigramTest, TiesResolveAsHfEncodeOptimized) {
  // The scores of the generated T5-style vocab (tests/tokenizer_reference/make_t5_tokenizer.py).
  json vocab = json::array({json::array({"<unk>", 0.0}), json::array({"▁", -2.866095653092387}),
                            json::array({"n", -3.94117226835347}), json::array({"\\", -6.509933228578333})});
  const double tilde_scores[] = {-8.637314232547288, -8.673681876718163, -8.69868317892358, -8.724325609536917,
                                 -8.750642917854291, -8.77767159024221,  -8.805451154349287, -8.834024526793343,
                                 -8.863438411999637, -8.893743761494965};
  for (int n = 1; n <= 10; ++n) vocab.push_back(json::array({std::string(n, '~'), tilde_scores[n - 1]}));
  auto model = MustParseUnigram({{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}});
  ASSERT_NE(model, nullptr);
  // transformers.js's lattice gives "▁" ~8 ~9 ~9 "\" "n" here.
  EXPECT_THAT(Segment(*model, "▁" + std::string(26, '~') + "\\n"),
              ElementsAre("▁", std::string(9, '~'), std::string(9, '~'), std::string(8, '~'), "\\", "n"));
}

TEST(TokenizerUnigramTest, ByteFallbackSpellsUnknownRunsInBytes) {
  json vocab = json::array({json::array({"<unk>", 0.0})});
  for (int b = 0; b < 256; ++b) vocab.push_back(json::array({fmt::format("<0x{:02X}>", b), 0.0}));
  vocab.push_back(json::array({"d", -1.0}));  // id 257
  auto model = MustParseUnigram({{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}, {"byte_fallback", true}});
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> ids;
  ASSERT_TRUE(model->Tokenize("éxd", &ids).ok());  // "éx" is one fused unknown run: C3 A9 78
  EXPECT_THAT(ids, ElementsAre(1 + 0xC3, 1 + 0xA9, 1 + 0x78, 257));
  // Without byte pieces for every byte, the run is <unk>.
  vocab.erase(vocab.begin() + 1 + 0x78);
  auto partial = MustParseUnigram({{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}, {"byte_fallback", true}});
  ASSERT_NE(partial, nullptr);
  ids.clear();
  ASSERT_TRUE(partial->Tokenize("éxd", &ids).ok());
  EXPECT_THAT(ids, ElementsAre(0, 256));
}

TEST(TokenizerUnigramTest, UnknownWithoutUnkIdIsAnError) {
  json vocab = json::array({json::array({"a", -1.0})});
  auto model = MustParseUnigram({{"type", "Unigram"}, {"unk_id", nullptr}, {"vocab", vocab}});
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> ids;
  EXPECT_TRUE(model->Tokenize("aa", &ids).ok());
  EXPECT_THAT(ids, ElementsAre(0, 0));
  Status s = model->Tokenize("ab", &ids);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("'b'"));
}

TEST(TokenizerUnigramTest, MalformedModelErrorsNameTheField) {
  auto expect_error = [](const json& model, const std::string& needle) {
    json j = T5TokenizerJson({{"▁", -2.0}});
    j["model"] = model;
    auto t = Tokenizer::FromJson(j, json(), "dir/tokenizer.json");
    ASSERT_FALSE(t.ok()) << needle;
    EXPECT_EQ(t.status().code(), StatusCode::kCorruption) << t.status().ToString();
    EXPECT_THAT(t.status().message(), HasSubstr("dir/tokenizer.json: model" + needle));
  };
  expect_error({{"type", "Unigram"}, {"vocab", {{"a", -1.0}}}}, ".vocab: expected an array");
  expect_error({{"type", "Unigram"}, {"vocab", json::array({json::array({"a", -1.0}), json::array({"b"})})}}, ".vocab[1]: expected [piece, score]");
  expect_error({{"type", "Unigram"}, {"vocab", json::array({json::array({"a", "x"})})}}, ".vocab[0]: expected [piece, score]");
  expect_error({{"type", "Unigram"}, {"unk_id", 5}, {"vocab", json::array({json::array({"a", -1.0})})}}, ".unk_id: 5 is not an id");
  expect_error({{"type", "Unigram"}, {"unk_id", "0"}, {"vocab", json::array({json::array({"a", -1.0})})}}, ".unk_id");
  expect_error({{"type", "Unigram"}}, ".vocab: missing");
}

TEST(TokenizerUnigramTest, T5PipelineSentinelsMetaspaceAndEos) {
  auto t = MustLoad(T5TokenizerJson({{"▁", -2.0}, {"▁Hel", -5.0}, {"lo", -4.0}, {"▁world", -6.0}, {"l", -3.0},
                                     {"o", -3.0}, {"H", -3.0}, {"e", -3.0}, {"▁w", -4.0}}));
  ASSERT_NE(t, nullptr);
  // ids: ▁ 3, ▁Hel 4, lo 5, ▁world 6, <extra_id_1> 12, <extra_id_0> 13.
  // "Hello " -> "▁Hello▁" -> "▁Hello" "▁" (split); the sentinel is its own token; "world" gets "▁".
  EXPECT_THAT(MustEncode(*t, "Hello <extra_id_0>world", true), ElementsAre(4, 5, 3, 13, 6, 1));
  EXPECT_THAT(MustEncode(*t, "Hello"), ElementsAre(4, 5));
  // Unknown characters ("!?" has no piece) fuse into one <unk>.
  EXPECT_THAT(MustEncode(*t, "Hello!?<extra_id_1>"), ElementsAre(4, 5, 2, 12));
  EXPECT_THAT(MustEncode(*t, "", true), ElementsAre(1));
  EXPECT_EQ(t->Decode({4, 5, 3, 13, 6, 1}), "Hello <extra_id_0> world</s>");
  EXPECT_EQ(t->Decode({4, 5, 3, 13, 6, 1}, /*skip_special_tokens=*/true), "Hello  world");
  EXPECT_EQ(t->Decode(MustEncode(*t, "Hello world")), "Hello world");
  EXPECT_EQ(t->vocab_size(), 14);
  EXPECT_EQ(t->IdToToken(4), "▁Hel");
  EXPECT_EQ(t->TokenToId("<extra_id_0>"), 13);
}

// A segment that normalizes to "" gives no token (HF's prepend does nothing on an empty string).
TEST(TokenizerUnigramTest, SegmentNormalizedToNothingGivesNoTokens) {
  json j = T5TokenizerJson({{"▁", -2.0}, {"a", -3.0}});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", ""}};
  auto t = MustLoad(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(MustEncode(*t, "xx", true), ElementsAre(1));
  EXPECT_THAT(MustEncode(*t, "xax", true), ElementsAre(3, 4, 1));
}

}  // namespace
}  // namespace zipmoe
