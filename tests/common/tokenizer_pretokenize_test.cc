// Tests for common/tokenizer/tokenizer_unicode and tokenizer_pretokenizer: UTF-8 repair, the GPT-2 byte
// alphabet, normalization forms, pre-tokenizer regexes (GPT-2, Qwen2, DeepSeek) and split behaviours.
#include "common/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

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
using nlohmann::json;
using tokenizer::test::kQwen2Regex;
using tokenizer::test::PreTokenize;
using tokenizer::test::Qwen2PreTokenizerJson;
using tokenizer::test::Gpt2PreTokenizerJson;

// ---- Unicode helpers ----

TEST(TokenizerUnicodeTest, ByteToUnicodeKnownValues) {
  EXPECT_EQ(tokenizer::ByteToUnicode(' '), U'\u0120');  // 'Ġ'
  EXPECT_EQ(tokenizer::ByteToUnicode('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(tokenizer::ByteToUnicode('a'), U'a');
  EXPECT_EQ(tokenizer::ByteToUnicode(0xAD), U'\u0143');  // 'Ń'
  EXPECT_EQ(tokenizer::ByteToUnicode(0x00), U'\u0100');
  EXPECT_EQ(tokenizer::ByteToUnicode(0xFF), U'\u00FF');
  EXPECT_EQ(tokenizer::ByteToUnicodeUtf8()[' '], "Ġ");
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tokenizer::UnicodeToByte(tokenizer::ByteToUnicode(b)), b);
  EXPECT_EQ(tokenizer::UnicodeToByte(U'\u0144'), -1);  // one past the 68 remapped bytes
}

TEST(TokenizerUnicodeTest, LossyRepairReplacesMaximalSubparts) {
  EXPECT_EQ(tokenizer::Utf8Lossy("plain ascii"), "plain ascii");
  EXPECT_EQ(tokenizer::Utf8Lossy("a\xF0\x9F\x91" "b"), "a\uFFFD" "b");  // truncated 4-byte sequence
  EXPECT_EQ(tokenizer::Utf8Lossy("\xFF"), "\uFFFD");
  EXPECT_EQ(tokenizer::Utf8Lossy("\xC0\xAF"), "\uFFFD\uFFFD");            // overlong lead, stray continuation
  EXPECT_EQ(tokenizer::Utf8Lossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // UTF-16 surrogate
  EXPECT_EQ(tokenizer::Utf8Lossy("\xE4\xBD"), "\uFFFD");
  EXPECT_EQ(tokenizer::Utf8Lossy("你好\xF4\x90\x80\x80"), "你好\uFFFD\uFFFD\uFFFD\uFFFD");  // > U+10FFFF
  EXPECT_TRUE(tokenizer::IsValidUtf8("👋🏽 你好"));
  EXPECT_FALSE(tokenizer::IsValidUtf8("\xF0\x9F\x91"));
}

TEST(TokenizerUnicodeTest, NormalizationForms) {
  using tokenizer::NormalizationForm;
  EXPECT_EQ(*tokenizer::Normalize("e\u0301", NormalizationForm::kNfc), "\u00E9");
  EXPECT_EQ(*tokenizer::Normalize("\u00E9", NormalizationForm::kNfd), "e\u0301");
  EXPECT_EQ(*tokenizer::Normalize("\uFB01 \u2460", NormalizationForm::kNfkc), "fi 1");
  EXPECT_EQ(*tokenizer::Normalize("\uFB01", NormalizationForm::kNfc), "\uFB01");
}

// ---- pre-tokenization ----

TEST(TokenizerPreTokenizeTest, Gpt2RegexKnownPieces) {
  EXPECT_THAT(PreTokenize(Gpt2PreTokenizerJson(), "Hello world's 2024!!\n\n  ok"),
              ElementsAre("Hello", "Ġworld", "'s", "Ġ2024", "!!", "ĊĊĠ", "Ġok"));
  EXPECT_THAT(PreTokenize(Gpt2PreTokenizerJson(), "I'M"), ElementsAre("I", "'", "M"));  // case-sensitive
}

TEST(TokenizerPreTokenizeTest, Qwen2RegexKnownPieces) {
  // Digits one per piece; "!!" keeps the newlines after it; (?i:'m) is case-insensitive.
  EXPECT_THAT(PreTokenize(Qwen2PreTokenizerJson(), "Hello world's 2024!!\n\n  ok"),
              ElementsAre("Hello", "Ġworld", "'s", "Ġ", "2", "0", "2", "4", "!!ĊĊ", "Ġ", "Ġok"));
  EXPECT_THAT(PreTokenize(Qwen2PreTokenizerJson(), "I'M"), ElementsAre("I", "'M"));
  const auto cjk = PreTokenize(Qwen2PreTokenizerJson(), "你好，世界");
  ASSERT_EQ(cjk.size(), 2u);  // "你好" and "，世界", byte-mapped
}

TEST(TokenizerPreTokenizeTest, DeepseekSplitSequence) {
  // DeepSeek-V2's pre-tokenizer: newlines, Latin/Greek/Cyrillic letter runs, ASCII and full-width
  // punctuation runs, trailing whitespace ("$"), CJK runs and digit runs, each isolated in turn.
  auto split = [](const std::string& regex) {
    return json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  const json pre = {{"type", "Sequence"},
                    {"pretokenizers", {split(R"([\r\n])"),
                                       split(R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-Ֆ]+)"),
                                       split(R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)"),
                                       split(R"(\s+$)"),
                                       split(R"([一-龥ࠀ-一가-퟿]+)"),
                                       split(R"(\p{N}+)"),
                                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const auto& a = tokenizer::ByteToUnicodeUtf8();
  std::string shijie;  // "世界" in the byte-level alphabet
  for (unsigned char c : std::string("世界")) shijie += a[c];
  EXPECT_THAT(PreTokenize(pre, "Hello, 世界 123\n"), ElementsAre("Hello", ",", "Ġ", shijie, "Ġ", "123", "Ċ"));
  EXPECT_THAT(PreTokenize(pre, "Ωμέγα  "), ElementsAre(a[0xCE] + a[0xA9] + a[0xCE] + a[0xBC] + a[0xCE] + a[0xAD] +
                                                          a[0xCE] + a[0xB3] + a[0xCE] + a[0xB1],
                                                      "ĠĠ"));
}

TEST(TokenizerPreTokenizeTest, RawRegexSplitsKeepUnicodeText) {
  json split = {{"type", "Split"}, {"pattern", {{"Regex", kQwen2Regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_THAT(PreTokenize(split, "你好，世界"), ElementsAre("你好", "，世界"));
  json gpt2 = {{"type", "Split"}, {"pattern", {{"Regex", std::string(tokenizer::kGpt2PreTokenizerRegex)}}}, {"behavior", "Isolated"}};
  EXPECT_THAT(PreTokenize(gpt2, "你好，世界"), ElementsAre("你好", "，", "世界"));
  EXPECT_THAT(PreTokenize(gpt2, "a  \n"), ElementsAre("a", "  \n"));
}

TEST(TokenizerPreTokenizeTest, SplitBehaviorsMatchHf) {
  auto split = [](const char* behavior) {
    return PreTokenize({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}},
                       "the-final--countdown");
  };
  EXPECT_THAT(split("Removed"), ElementsAre("the", "final", "countdown"));
  EXPECT_THAT(split("Isolated"), ElementsAre("the", "-", "final", "-", "-", "countdown"));
  EXPECT_THAT(split("MergedWithPrevious"), ElementsAre("the-", "final-", "-", "countdown"));
  EXPECT_THAT(split("MergedWithNext"), ElementsAre("the", "-final", "-", "-countdown"));
  EXPECT_THAT(split("Contiguous"), ElementsAre("the", "-", "final", "--", "countdown"));
  EXPECT_THAT(PreTokenize({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Removed"}, {"invert", true}},
                          "a-b"),
              ElementsAre("-"));
}

TEST(TokenizerPreTokenizeTest, DigitsMetaspaceAndWhitespace) {
  EXPECT_THAT(PreTokenize({{"type", "Digits"}, {"individual_digits", true}}, "a12b"), ElementsAre("a", "1", "2", "b"));
  EXPECT_THAT(PreTokenize({{"type", "Digits"}, {"individual_digits", false}}, "a12b"), ElementsAre("a", "12", "b"));
  EXPECT_THAT(PreTokenize({{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}},
                          "Hey  you"),
              ElementsAre("▁Hey", "▁", "▁you"));
  EXPECT_THAT(PreTokenize({{"type", "Whitespace"}}, "Hi, you!"), ElementsAre("Hi", ",", "you", "!"));
  EXPECT_THAT(PreTokenize({{"type", "Punctuation"}}, "a,b"), ElementsAre("a", ",", "b"));
}

TEST(TokenizerRegexTest, LongWhitespaceRunAndEmptyMatches) {
  auto re = tokenizer::Regex::Compile(tokenizer::kGpt2PreTokenizerRegex, false);
  ASSERT_TRUE(re.ok());
  const std::string spaces(200000, ' ');
  auto m = re->FindAll(spaces + "x");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);  // "\s+(?!\S)" takes all but the last space, " ?\p{L}+" takes " x"
  EXPECT_EQ((*m)[1], tokenizer::ByteRange(spaces.size() - 1, spaces.size() + 1));
  auto star = tokenizer::Regex::Compile("a*", false);
  ASSERT_TRUE(star.ok());
  auto e = star->FindAll("baa");  // Oniguruma find_iter: empty at 0, "aa" at 1, no empty match at 3
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(*e, ElementsAre(tokenizer::ByteRange(0, 0), tokenizer::ByteRange(1, 3)));
  EXPECT_EQ(tokenizer::Regex::Compile("(unclosed", false).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zipmoe
