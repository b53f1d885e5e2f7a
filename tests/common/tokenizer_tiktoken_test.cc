// tiktoken tokenizers (common/tokenizer/tokenizer_tiktoken.h): the rank file, tiktoken's merge rule with
// known answers and against a direct transcription of its loop, the Python-side pattern, the class-set
// rewrite for PCRE2, and a model directory loaded by Tokenizer::LoadDir. The check against tiktoken itself
// on real ranks is tests/tokenizer_reference (ctest tokenizer_tiktoken_reference).
#include "common/tokenizer/tokenizer_tiktoken.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_regex.h"
#include "tests/common/tiktoken_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;
using testing::TempDir;
using testing::WriteAll;
using tokenizer::TiktokenModel;
using tokenizer::test::MoonshotTokenizerConfig;
using tokenizer::test::RankFile;
using tokenizer::test::WriteTiktokenFiles;

std::unique_ptr<TiktokenModel> MustParse(const std::string& text) {
  Result<std::unique_ptr<TiktokenModel>> m = TiktokenModel::Parse(text, "test.tiktoken");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<int32_t> Ids(const TiktokenModel& m, const std::string& piece) {
  std::vector<int32_t> ids;
  const Status st = m.Tokenize(piece, &ids);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return ids;
}

// tiktoken's byte_pair_merge as its loop reads (rescan for the lowest rank after every merge, leftmost
// on ties), to hold the heap version against.
std::vector<int32_t> ScanMerge(const std::map<std::string, int32_t>& ranks, const std::string& piece) {
  if (auto it = ranks.find(piece); it != ranks.end()) return {it->second};
  std::vector<size_t> bounds;
  for (size_t i = 0; i <= piece.size(); ++i) bounds.push_back(i);
  auto rank = [&](size_t a, size_t b) {
    auto it = ranks.find(piece.substr(a, b - a));
    return it == ranks.end() ? std::numeric_limits<int32_t>::max() : it->second;
  };
  while (bounds.size() > 2) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 2 < bounds.size(); ++i) {
      const int32_t r = rank(bounds[i], bounds[i + 2]);
      if (r < best) best = r, at = i;
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    bounds.erase(bounds.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) ids.push_back(rank(bounds[i], bounds[i + 1]));
  return ids;
}

TEST(TiktokenModelTest, MergesTheLowestRankedConcatenationLeftmostFirst) {
  // "bc" 256, "ab" 257, "cd" 258, "bcd" 259; "aa" 260; "abcd" absent.
  auto m = MustParse(RankFile({"bc", "ab", "cd", "bcd", "aa"}));
  ASSERT_NE(m, nullptr);
  // abcd: bc (256) first, then b|c|d -> bcd (259): a + bcd.
  EXPECT_THAT(Ids(*m, "abcd"), ElementsAre('a', 259));
  // a whole-piece token is one id; ties go to the leftmost pair.
  EXPECT_THAT(Ids(*m, "bcd"), ElementsAre(259));
  EXPECT_THAT(Ids(*m, "aaa"), ElementsAre(260, 'a'));
  EXPECT_THAT(Ids(*m, "aaaa"), ElementsAre(260, 260));
  EXPECT_THAT(Ids(*m, "x"), ElementsAre('x'));
  EXPECT_TRUE(Ids(*m, "").empty());
  // Token strings are the GPT-2 byte-level alphabet of the bytes.
  ASSERT_NE(m->IdToToken(' '), nullptr);
  EXPECT_EQ(*m->IdToToken(' '), "\xC4\xA0");  // "Ġ"
  EXPECT_EQ(m->TokenToId("bcd"), 259);
  EXPECT_EQ(m->id_limit(), 261);
  EXPECT_EQ(m->n_ranks(), 261);
  EXPECT_EQ(m->IdToToken(261), nullptr);
}

TEST(TiktokenModelTest, HeapMergeEqualsTiktokensScanOnRandomRanks) {
  std::mt19937 rng(20261204);
  for (int trial = 0; trial < 20; ++trial) {
    // Random tokens over a 4-letter alphabet (so pairs collide and ties happen), random rank order.
    std::vector<std::string> merged;
    std::map<std::string, int32_t> ranks;
    for (int b = 0; b < 256; ++b) ranks[std::string(1, static_cast<char>(b))] = b;
    while (merged.size() < 120) {
      std::string t;
      const int len = 2 + static_cast<int>(rng() % 5);
      for (int k = 0; k < len; ++k) t += static_cast<char>('a' + rng() % 4);
      if (ranks.count(t)) continue;
      ranks[t] = static_cast<int32_t>(256 + merged.size());
      merged.push_back(t);
    }
    auto m = MustParse(RankFile(merged));
    ASSERT_NE(m, nullptr);
    for (int p = 0; p < 50; ++p) {
      std::string piece;
      const int len = 1 + static_cast<int>(rng() % 40);
      for (int k = 0; k < len; ++k) piece += static_cast<char>('a' + rng() % 4);
      ASSERT_EQ(Ids(*m, piece), ScanMerge(ranks, piece)) << "trial " << trial << " piece " << piece;
    }
  }
}

TEST(TiktokenModelTest, LongPieceMergesWithoutQuadraticTime) {
  auto m = MustParse(RankFile({"==", "===="}));
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> ids = Ids(*m, std::string(200001, '='));  // 50000 x "====" + "="
  ASSERT_EQ(ids.size(), 50001u);
  EXPECT_EQ(ids.front(), 257);
  EXPECT_EQ(ids.back(), '=');
}

TEST(TiktokenModelTest, MalformedRankFilesAreRefusedNamingTheLine) {
  const std::string good = RankFile({});
  auto error = [](const std::string& text) {
    Result<std::unique_ptr<TiktokenModel>> m = TiktokenModel::Parse(text, "dir/tiktoken.model");
    return m.ok() ? std::string("ok") : m.status().ToString();
  };
  EXPECT_THAT(error(good + "YWI=\n"), HasSubstr("dir/tiktoken.model: line 257: expected '<base64 token> <rank>'"));
  EXPECT_THAT(error(good + "!!! 256\n"), HasSubstr("line 257: the token is not base64"));
  EXPECT_THAT(error(good + "YWI= x\n"), HasSubstr("line 257: rank 'x' is not an integer"));
  EXPECT_THAT(error(good + "YWI= -1\n"), HasSubstr("line 257: rank '-1'"));
  EXPECT_THAT(error(good + "YWI= 7\n"), HasSubstr("line 257: rank 7 given twice"));
  EXPECT_THAT(error(good + "YQ== 256\n"), HasSubstr("line 257: token YQ== given twice"));
  EXPECT_THAT(error(good.substr(good.find('\n') + 1)), HasSubstr("no rank for the single byte 0x00"));
  EXPECT_EQ(error(good + "\n\nYWI= 300\r\n"), "ok");  // blank lines and CRLF are fine; ranks may have gaps
  // ... but not billions of ids without a token (the table of tokens by id would take GiBs: a fuzzer's find):
  // below the lines plus 2^20 (257 lines here).
  EXPECT_EQ(error(good + "YWI= 1048832\n"), "ok");
  EXPECT_THAT(error(good + "YWI= 1048833\n"),
              HasSubstr("line 257: rank 1048833 is far past the file's 257 lines (ranks number the tokens from 0 with "
                        "few gaps: at most 1048832)"));
  EXPECT_THAT(error(good + "YWI= 133333341\n"), HasSubstr("line 257: rank 133333341 is far past"));
}

TEST(TiktokenPatternTest, ReadsTheJoinedRawLiteralsOfTheTokenizerModule) {
  const std::string py = R"PY(
import tiktoken
class TikTokenTokenizer(PreTrainedTokenizer):
    special_tokens: Dict[str, int]
    num_reserved_special_tokens = 256

    pat_str = "|".join(
        [
            r"""[\p{Han}]+""",  # Han runs
            r"""\p{N}{1,3}""",
            r' ?[^\s\p{L}\p{N}]+[\r\n]*',
            r"""\s+(?!\S)""" r"""|\s+""",
        ]
    )

    def encode(self, text):
        pat_str = "unused"
)PY";
  Result<std::string> pat = tokenizer::ExtractTiktokenPattern(py, "tokenization_kimi.py");
  ASSERT_TRUE(pat.ok()) << pat.status().ToString();
  EXPECT_EQ(*pat, R"([\p{Han}]+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+(?!\S)|\s+)");
  EXPECT_EQ(tokenizer::ExtractPythonInt(py, "num_reserved_special_tokens"), 256);
  EXPECT_EQ(tokenizer::ExtractPythonInt(py, "missing"), std::nullopt);

  // A plain literal with escapes, an annotation, a parenthesised single literal.
  Result<std::string> plain = tokenizer::ExtractTiktokenPattern("pat_str: str = \"a\\\\p{L}+|\\\"q\\\"|\\d\"\n", "x.py");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(*plain, "a\\p{L}+|\"q\"|\\d");  // \\ -> \, \" -> ", unknown \d kept
  Result<std::string> paren = tokenizer::ExtractTiktokenPattern("pat_str = (\n  r'\\w+'\n)\n", "x.py");
  ASSERT_TRUE(paren.ok()) << paren.status().ToString();
  EXPECT_EQ(*paren, "\\w+");

  // Errors name the file.
  Result<std::string> none = tokenizer::ExtractTiktokenPattern("x = 1\nif pat_str == 2: pass\n", "t.py");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().ToString(), HasSubstr("t.py: no 'pat_str = ...' assignment"));
  Result<std::string> computed = tokenizer::ExtractTiktokenPattern("pat_str = build_pattern()\n", "t.py");
  ASSERT_FALSE(computed.ok());
  EXPECT_THAT(computed.status().ToString(), HasSubstr("t.py: line 1: pat_str: expected a string literal"));
  Result<std::string> open = tokenizer::ExtractTiktokenPattern("pat_str = r\"\"\"abc\n", "t.py");
  EXPECT_THAT(open.status().ToString(), HasSubstr("unterminated string literal"));
}

TEST(TiktokenPatternTest, ClassIntersectionsBecomeLookaheadsThatMatchTheSameCharacters) {
  Result<std::string> t = tokenizer::TranslateClassSetOperations(R"([\p{L}&&[^\p{Han}]]+|[a-z--[aeiou]]|[^x]|\[&&\])", "p");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, R"((?:(?=[^\p{Han}])[\p{L}])+|(?:(?![aeiou])[a-z])|[^x]|\[&&\])");

  Result<std::string> letters = tokenizer::TranslateClassSetOperations(R"([\p{L}&&[^\p{Han}]]+)", "p");
  ASSERT_TRUE(letters.ok()) << letters.status().ToString();
  Result<tokenizer::Regex> re = tokenizer::Regex::Compile(*letters, /*literal=*/false);
  ASSERT_TRUE(re.ok()) << re.status().ToString();
  const std::string text = "abc中文Def, bcd";
  Result<std::vector<tokenizer::ByteRange>> found = re->FindAll(text);
  ASSERT_TRUE(found.ok());
  std::vector<std::string> pieces;
  for (const auto& [b, e] : *found) pieces.push_back(text.substr(b, e - b));
  EXPECT_THAT(pieces, ElementsAre("abc", "Def", "bcd"));

  EXPECT_THAT(tokenizer::TranslateClassSetOperations("[a&&b&&c]", "p").status().ToString(),
              HasSubstr("p: pat_str at offset 5: more than one set operation"));
  EXPECT_THAT(tokenizer::TranslateClassSetOperations("[[ab]&&c]", "p").status().ToString(),
              HasSubstr("a nested class before a set operation"));
  EXPECT_THAT(tokenizer::TranslateClassSetOperations("[ab", "p").status().ToString(),
              HasSubstr("unterminated character class"));
}

TEST(TiktokenPatternTest, ScriptNamesMeanTheScriptNotItsExtensions) {
  // U+3002 IDEOGRAPHIC FULL STOP is Script=Common with Han among its Script_Extensions: Rust's regex
  // (tiktoken) and Oniguruma (HF) keep it out of \p{Han}; PCRE2's bare \p{Han} alone would not.
  auto pieces = [](const std::string& pattern, const std::string& text) {
    Result<tokenizer::Regex> re = tokenizer::Regex::Compile(pattern, /*literal=*/false);
    EXPECT_TRUE(re.ok()) << re.status().ToString();
    std::vector<std::string> out;
    if (!re.ok()) return out;
    Result<std::vector<tokenizer::ByteRange>> found = re->FindAll(text);
    EXPECT_TRUE(found.ok());
    for (const auto& [b, e] : *found) out.push_back(text.substr(b, e - b));
    return out;
  };
  const std::string text = "漢字\u3002かな\u3001";
  EXPECT_THAT(pieces(R"([\p{Han}]+)", text), ElementsAre("漢字"));
  EXPECT_THAT(pieces(R"(\P{Han}+)", text), ElementsAre("\u3002かな\u3001"));
  EXPECT_THAT(pieces(R"(\p{^Han}+)", text), ElementsAre("\u3002かな\u3001"));
  EXPECT_THAT(pieces(R"([\p{Han}\p{Hiragana}]+)", text), ElementsAre("漢字", "かな"));
  EXPECT_THAT(pieces(R"(\p{Lo}+)", text), ElementsAre("漢字", "かな"));  // categories are untouched
  EXPECT_THAT(pieces(R"(\p{scx:Han}+)", text), ElementsAre("漢字\u3002", "\u3001"));  // explicit forms kept
  EXPECT_THAT(pieces(R"(\\p{Han})", "\\p{Han}"), ElementsAre("\\p{Han}"));  // an escaped backslash: literal
}

TEST(TiktokenPatternTest, LongRunsAreCutAsThePythonEncodeCutsThem) {
  EXPECT_TRUE(tokenizer::PythonIsSpace(U' '));
  EXPECT_TRUE(tokenizer::PythonIsSpace(0x1C));    // a separator: isspace in Python, not White_Space
  EXPECT_TRUE(tokenizer::PythonIsSpace(0x3000));
  EXPECT_FALSE(tokenizer::PythonIsSpace(0x180E));  // MONGOLIAN VOWEL SEPARATOR: no longer a space
  EXPECT_FALSE(tokenizer::PythonIsSpace(0x200B));  // ZERO WIDTH SPACE is not one either
  using V = std::vector<std::string_view>;
  // Runs of at most 3: "aaaa" is cut before its 4th character; a change of kind resets the count.
  EXPECT_EQ(tokenizer::SplitLongRuns("aaaa  bbb", 0, 3), (V{"aaa", "a  bbb"}));
  EXPECT_EQ(tokenizer::SplitLongRuns("ab     c", 0, 3), (V{"ab   ", "  c"}));
  EXPECT_EQ(tokenizer::SplitLongRuns("", 0, 3), (V{""}));
  // Chunks count code points, not bytes: 5 two-byte characters in chunks of 2.
  EXPECT_EQ(tokenizer::SplitLongRuns("ééééé", 2, 0), (V{"éé", "éé", "é"}));
  EXPECT_EQ(tokenizer::SplitLongRuns("ééééé", 3, 2), (V{"éé", "é", "éé"}));
  EXPECT_EQ(tokenizer::ExtractPythonInt("    X = 400_000\n", "X"), 400000);
  EXPECT_EQ(tokenizer::ExtractPythonInt("X = 400_\n", "X"), std::nullopt);
}

TEST(TiktokenDirectoryTest, LoadDirReadsRanksPatternAndSpecialTokens) {
  TempDir dir;
  json config = MoonshotTokenizerConfig();
  config["added_tokens_decoder"]["280"] = {{"content", "<|late|>"}, {"special", true}};
  WriteTiktokenFiles(dir.path(), config);
  ASSERT_TRUE(Tokenizer::DirHasTokenizer(dir.path()));
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadDir(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // 265 ranks; specials 265.. 272 (8 reserved) and 280 (configured past them).
  EXPECT_EQ((*tok)->vocab_size(), 281);
  EXPECT_EQ((*tok)->bos_token_id(), 265);
  EXPECT_EQ((*tok)->eos_token_id(), 266);
  EXPECT_EQ((*tok)->TokenToId("<|reserved_token_270|>"), 270);
  EXPECT_TRUE((*tok)->IsSpecialToken(280));

  // "hello world" -> hello (259), " world" (263); special text is its id; Han apart from letters.
  Result<std::vector<int32_t>> ids = (*tok)->Encode("hello world<|im_end|>中ab", /*add_special_tokens=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_THAT(*ids, ElementsAre(259, 263, 267, 264, 0xAD, 'a', 'b'));
  EXPECT_EQ((*tok)->Decode(*ids), "hello world<|im_end|>中ab");
  EXPECT_EQ((*tok)->Decode(*ids, /*skip_special_tokens=*/true), "hello world中ab");
  EXPECT_EQ((*tok)->IdToToken(263), "\xC4\xA0world");  // "Ġworld"
}

TEST(TiktokenDirectoryTest, MissingOrBrokenFilesAreNamed) {
  {
    TempDir dir;  // neither file
    EXPECT_FALSE(Tokenizer::DirHasTokenizer(dir.path()));
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadDir(dir.path());
    ASSERT_FALSE(tok.ok());
    EXPECT_THAT(tok.status().ToString(), HasSubstr("tokenizer.json"));
  }
  {
    TempDir dir;  // ranks without the Python file
    WriteAll(dir.Sub("tiktoken.model"), RankFile({}));
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadDir(dir.path());
    ASSERT_FALSE(tok.ok());
    EXPECT_THAT(tok.status().ToString(), HasSubstr("needs the tokenization_*.py that sets its pat_str"));
  }
  {
    TempDir dir;  // a special id inside the ranks
    WriteTiktokenFiles(dir.path(), {{"added_tokens_decoder", {{"12", {{"content", "<|x|>"}}}}}});
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadDir(dir.path());
    ASSERT_FALSE(tok.ok());
    EXPECT_THAT(tok.status().ToString(), HasSubstr("added_tokens_decoder[\"12\"]: id 12 is a rank of tiktoken.model"));
  }
  {
    TempDir dir;  // a special id two billion past the ranks: refused, not two billion added tokens
    WriteTiktokenFiles(dir.path(), {{"added_tokens_decoder", {{"2000000000", {{"content", "<|x|>"}}}}}});
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadDir(dir.path());
    ASSERT_FALSE(tok.ok());
    EXPECT_THAT(tok.status().ToString(),
                HasSubstr("added_tokens_decoder: special token ids run from 265 to 2000000000 (1999999736 ids; at most "
                          "1048576 follow the ranks)"));
    EXPECT_THAT(tok.status().ToString(), HasSubstr("tokenization_moonshot.py"));
  }
  {
    TempDir dir;  // tokenizer.json wins when both exist (a converted checkpoint)
    WriteTiktokenFiles(dir.path(), json::object());
    WriteAll(dir.Sub("tokenizer.json"), "{not json");
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadDir(dir.path());
    ASSERT_FALSE(tok.ok());
    EXPECT_THAT(tok.status().ToString(), HasSubstr("tokenizer.json: invalid JSON"));
  }
}

}  // namespace
}  // namespace zipmoe
