// Tests for common/tokenizer*: hand-worked byte-level BPE encodings, added tokens, round trips,
// SentencePiece-style byte fallback, streaming decode, load errors and the synthetic checkpoint's
// tokenizer. Pre-tokenization, chat templates and Unigram have files of their own.
#include "common/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
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
using testing::TempDir;
using testing::WriteAll;
using tokenizer::test::ByteLevelTokenizerJson;
using tokenizer::test::SentencePieceTokenizerJson;
using tokenizer::test::MustLoad;
using tokenizer::test::MustEncode;

// ---- byte-level BPE ----

TEST(TokenizerTest, ByteLevelKnownEncoding) {
  auto t = MustLoad(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  // "hello": h e l l o -> (h e) -> (l l) -> (he ll) -> (hell o) = 261.
  // " the": Ġ t h e -> (Ġ t) -> (h e) -> (Ġt he) = 258.
  // " world": Ġ w o r l d -> (Ġ w) -> (o r); "Ġw or" is not a merge -> 262 263 'l' 'd'.
  EXPECT_THAT(MustEncode(*t, "hello the world"), ElementsAre(261, 258, 262, 263, 108, 100));
  EXPECT_EQ(t->Decode({261, 258, 262, 263, 108, 100}), "hello the world");
  EXPECT_EQ(t->vocab_size(), 267);
  EXPECT_EQ(t->TokenToId("Ġthe"), 258);
  EXPECT_EQ(t->TokenToId("<|im_end|>"), 266);
  EXPECT_EQ(t->IdToToken(32), "Ġ");
  EXPECT_EQ(t->IdToToken(9999), "");
  EXPECT_THAT(MustEncode(*t, "hello", /*add_special=*/true), ElementsAre(261));  // ByteLevel adds nothing
}

TEST(TokenizerTest, SpecialTokensSplitOutFirst) {
  auto t = MustLoad(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  const std::vector<int32_t> ids = MustEncode(*t, "<|im_start|>user\nhi<|im_end|>");
  EXPECT_THAT(ids, ElementsAre(265, 'u', 's', 'e', 'r', '\n', 'h', 'i', 266));
  EXPECT_EQ(t->Decode(ids), "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(t->Decode(ids, /*skip_special_tokens=*/true), "user\nhi");
  EXPECT_TRUE(t->IsSpecialToken(265));
  EXPECT_FALSE(t->IsSpecialToken(261));
  // A partial special token is plain text.
  EXPECT_THAT(MustEncode(*t, "<|im_end"), ElementsAre('<', '|', 'i', 'm', '_', 'e', 'n', 'd'));
}

TEST(TokenizerTest, AddedTokenLstripRstripSingleWord) {
  json j = ByteLevelTokenizerJson();
  j["added_tokens"].push_back({{"id", 267}, {"content", "<mask>"}, {"single_word", false}, {"lstrip", true},
                               {"rstrip", false}, {"normalized", false}, {"special", false}});
  j["added_tokens"].push_back({{"id", 268}, {"content", "cat"}, {"single_word", true}, {"lstrip", false},
                               {"rstrip", true}, {"normalized", true}, {"special", false}});
  auto t = MustLoad(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(MustEncode(*t, "a <mask> b"), ElementsAre('a', 267, 32, 'b'));  // the space before is eaten
  EXPECT_THAT(MustEncode(*t, "cat  x"), ElementsAre(268, 'x'));                // rstrip eats both spaces
  EXPECT_THAT(MustEncode(*t, "cats"), ElementsAre('c', 'a', 't', 's'));        // not a single word
  EXPECT_EQ(t->Decode({268}), "cat");
}

TEST(TokenizerTest, IgnoreMergesEmitsWholeVocabWord) {
  json j = ByteLevelTokenizerJson();
  j["model"]["vocab"]["Ġhel"] = 267;
  auto t = MustLoad(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(MustEncode(*t, " hel"), ElementsAre(32, 257, 'l'));  // merges only: Ġ he l
  j["model"]["ignore_merges"] = true;
  t = MustLoad(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(MustEncode(*t, " hel"), ElementsAre(267));
}

TEST(TokenizerTest, ByteLevelRoundTripsArbitraryUtf8) {
  auto t = MustLoad(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  const char kControl[] = "ctrl \x00\x01\x02\t\x1b[0m\x7f end";
  const std::vector<std::string> texts = {
      "The quick brown fox jumps over the lazy dog. 1234567890 !@#$%^&*()",
      "👋🏽 waving, skin tone",
      "你好，世界",
      "e\u0301 a\u0308 \u0915\u094D\u0937",  // combining marks (not normalized: no normalizer)
      std::string(kControl, sizeof(kControl) - 1),
      "  leading and trailing spaces  \n\n\r\n",
      "mixed: Ελληνικά, русский, العربية, 日本語のテキスト, 🇩🇪🏳️‍🌈",
      "",
  };
  for (const std::string& s : texts) {
    const std::vector<int32_t> ids = MustEncode(*t, s);
    EXPECT_EQ(t->Decode(ids), s) << s;
  }
  EXPECT_THAT(MustEncode(*t, "👋"), ElementsAre(0xF0, 0x9F, 0x91, 0x8B));
}

TEST(TokenizerTest, ConcurrentEncodeMatchesSerial) {
  auto t = MustLoad(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(fmt::format("hello the world {} 你好 {} 👋 hell{}o", i, i * 7, i % 3));
  std::vector<std::vector<int32_t>> serial;
  for (const std::string& s : texts) serial.push_back(MustEncode(*t, s));
  auto fresh = MustLoad(ByteLevelTokenizerJson());  // empty word cache
  ASSERT_NE(fresh, nullptr);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          auto ids = fresh->Encode(texts[(i + w * 16) % texts.size()]);
          if (!ids.ok() || *ids != serial[(i + w * 16) % texts.size()]) ++mismatches[w];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

TEST(TokenizerTest, InvalidUtf8InputIsReplacedWithFffd) {
  auto t = MustLoad(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  const std::string bad = std::string("ok\xFF") + "\xF0\x9F\x91" + " hello";
  const std::vector<int32_t> ids = MustEncode(*t, bad);
  EXPECT_EQ(ids, MustEncode(*t, "ok\uFFFD\uFFFD hello"));
  EXPECT_EQ(t->Decode(ids), "ok\uFFFD\uFFFD hello");
  // Decoding a lone byte token gives U+FFFD, as String::from_utf8_lossy.
  EXPECT_EQ(t->Decode({0xE4, 0xBD}), "\uFFFD");
  EXPECT_EQ(t->Decode({'a', 0xFF, 'b'}), "a\uFFFDb");
  // DecodeBytes keeps what those bytes are (/tokenize's pieces, logprobs' `bytes`).
  EXPECT_EQ(t->DecodeBytes({0xE4, 0xBD}), "\xE4\xBD");
  EXPECT_EQ(t->DecodeBytes({'a', 0xFF, 'b'}), "a\xFF" "b");
  EXPECT_EQ(t->Decode({'a', -5, 100000, 'b'}), "ab");  // ids without a token are skipped
}

TEST(TokenizerTest, NfcNormalizerComposesBeforeEncoding) {
  json j = ByteLevelTokenizerJson();
  j["normalizer"] = {{"type", "NFC"}};
  auto t = MustLoad(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(MustEncode(*t, "e\u0301"), MustEncode(*t, "\u00E9"));
  EXPECT_EQ(t->Decode(MustEncode(*t, "e\u0301")), "\u00E9");
}

// ---- SentencePiece-style BPE ----

TEST(TokenizerTest, SentencePieceKnownEncodingWithBos) {
  auto t = MustLoad(SentencePieceTokenizerJson());
  ASSERT_NE(t, nullptr);
  // "▁Hello▁world" is one word: (▁ H) (e l) (el l) (▁H ell) (▁Hell o) (▁ w) (o r) (▁w or) ...
  EXPECT_THAT(MustEncode(*t, "Hello world", /*add_special=*/true), ElementsAre(1, 271, 276));
  EXPECT_THAT(MustEncode(*t, "Hello world"), ElementsAre(271, 276));
  EXPECT_EQ(t->Decode({1, 271, 276}), "<s> Hello world");
  EXPECT_EQ(t->Decode({1, 271, 276}, /*skip_special_tokens=*/true), "Hello world");
}

TEST(TokenizerTest, SentencePieceByteFallbackRoundTrip) {
  auto t = MustLoad(SentencePieceTokenizerJson());
  ASSERT_NE(t, nullptr);
  // 'i' is not in the vocab -> <0x69> = 3 + 0x69; "👋" -> its four byte tokens.
  const std::vector<int32_t> ids = MustEncode(*t, "Hi 👋");
  EXPECT_THAT(ids, ElementsAre(267, 3 + 0x69, 259, 3 + 0xF0, 3 + 0x9F, 3 + 0x91, 3 + 0x8B));
  EXPECT_EQ(t->Decode(ids), "Hi 👋");
  for (const std::string s : {"Hello world", "你好，世界 👋🏽", "tab\there", "e\u0301"}) {
    EXPECT_EQ(t->Decode(MustEncode(*t, s, true), true), s) << s;
  }
  // An incomplete byte run decodes to one U+FFFD per byte (HF ByteFallback).
  EXPECT_EQ(t->Decode({3 + 0xF0, 3 + 0x9F}), "\uFFFD\uFFFD");
  EXPECT_EQ(t->DecodeBytes({3 + 0xF0, 3 + 0x9F}), "\xF0\x9F");
}

TEST(TokenizerTest, SentencePieceUnknownWithoutByteFallbackIsFusedUnk) {
  json j = SentencePieceTokenizerJson();
  j["model"]["byte_fallback"] = false;
  auto t = MustLoad(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(MustEncode(*t, "Hiii"), ElementsAre(267, 0));  // three unknown 'i' fuse into one <unk>
}

TEST(TokenizerTest, MetaspacePrependSchemeFirst) {
  json j = SentencePieceTokenizerJson();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}};
  auto t = MustLoad(j);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(MustEncode(*t, "Hello world"), ElementsAre(271, 276));
  EXPECT_EQ(t->Decode({271, 276}), "Hello world");
  // After an added token the text does not start the input: no "▁" is prepended.
  EXPECT_THAT(MustEncode(*t, "<s>Hello"), ElementsAre(1, 260, 269, 263));
}

TEST(TokenizerTest, ConfigAddBosTokenOverridesPostProcessor) {
  json config = {{"add_bos_token", false}, {"add_eos_token", true}, {"bos_token", "<s>"},
                 {"eos_token", {{"content", "</s>"}, {"special", true}}}};
  auto t = MustLoad(SentencePieceTokenizerJson(), config);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(MustEncode(*t, "Hello", true), ElementsAre(271, 2));
  EXPECT_EQ(t->bos_token_id(), 1);
  EXPECT_EQ(t->eos_token_id(), 2);
  config["add_eos_token"] = true;
  config["eos_token"] = "<nope>";
  auto bad = Tokenizer::FromJson(SentencePieceTokenizerJson(), config, "x/tokenizer.json");
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(bad.status().message(), HasSubstr("eos_token"));
}

// ---- streaming ----

TEST(StreamDecoderTest, EmitsEmojiOnlyWhenComplete) {
  auto t = MustLoad(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  StreamDecoder stream(*t);
  EXPECT_EQ(stream.Step(0xF0), "");
  EXPECT_EQ(stream.Step(0x9F), "");
  EXPECT_EQ(stream.Step(0x91), "");
  EXPECT_EQ(stream.Step(0x8B), "👋");
  EXPECT_EQ(stream.Step(258), " the");
  EXPECT_EQ(stream.Flush(), "");
  // An incomplete tail is flushed as U+FFFD; an invalid byte is emitted once text follows it.
  EXPECT_EQ(stream.Step(0xE4), "");
  EXPECT_EQ(stream.Flush(), "\uFFFD");
  EXPECT_EQ(stream.Step(0xFF), "");
  EXPECT_EQ(stream.Step('a'), "\uFFFDa");
}

TEST(StreamDecoderTest, ConcatenationEqualsDecode) {
  for (const json& j : {ByteLevelTokenizerJson(), SentencePieceTokenizerJson()}) {
    auto t = MustLoad(j);
    ASSERT_NE(t, nullptr);
    const std::string text = "Hello world 👋🏽, 你好，世界! e\u0301 <s> the end\n";
    const std::vector<int32_t> ids = MustEncode(*t, text);
    StreamDecoder stream(*t, /*skip_special_tokens=*/false);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Step(id);
    streamed += stream.Flush();
    EXPECT_EQ(streamed, t->Decode(ids));
  }
}

TEST(StreamDecoderTest, MetaspaceKeepsSpacesBetweenChunks) {
  auto t = MustLoad(SentencePieceTokenizerJson());
  ASSERT_NE(t, nullptr);
  StreamDecoder stream(*t, /*skip_special_tokens=*/true);
  EXPECT_EQ(stream.Step(1), "");
  EXPECT_EQ(stream.Step(271), "Hello");
  EXPECT_EQ(stream.Step(276), " world");
  EXPECT_EQ(stream.Step(271), " Hello");
}

// The API's decoder for a chat syntax: special tokens skipped but its markers (here </s>), which come
// out as their text exactly where Decode of the ids without the skipped ones puts them.
TEST(StreamDecoderTest, KeepsOnlyTheNamedSpecialTokens) {
  auto t = MustLoad(SentencePieceTokenizerJson());
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->IsSpecialToken(1) && t->IsSpecialToken(2));
  StreamDecoder stream(*t, std::vector<int32_t>{2});
  std::string streamed;
  for (int32_t id : {1, 271, 2, 276, 1, 271}) streamed += stream.Step(id);
  streamed += stream.Flush();
  EXPECT_EQ(streamed, t->Decode({271, 2, 276, 271}));
  EXPECT_NE(streamed.find("</s>"), std::string::npos);
  EXPECT_EQ(streamed.find("<s>"), std::string::npos);
}

// ---- chat templates through the Tokenizer (parsed once at load) ----

TEST(TokenizerTest, ChatTemplateJinjaFileReplacesConfigTemplate) {
  TempDir tmp;
  WriteAll(tmp.Sub("tokenizer.json"), ByteLevelTokenizerJson().dump());
  WriteAll(tmp.Sub("tokenizer_config.json"),
           json{{"chat_template", "from config"}, {"eos_token", {{"content", "</s>"}}}}.dump());
  WriteAll(tmp.Sub("chat_template.jinja"),
           "{% for m in messages %}{{ m.role }}={{ m.content }}{{ eos_token }}\n{% endfor %}"
           "{% if tools %}{{ tools[0].function.name }}{% endif %}{% if enable_thinking is false %}!{% endif %}\n");
  auto t = Tokenizer::Load(tmp.Sub("tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto plain = (*t)->ApplyChatTemplate({{"user", "hi"}}, false);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(*plain, "user=hi</s>\n");  // the file's template; its final newline dropped, as jinja2
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  const nlohmann::ordered_json tools =
      nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "lookup"}}])");
  auto with_tools = (*t)->ApplyChatTemplate(messages, tools, false, {{"enable_thinking", false}});
  ASSERT_TRUE(with_tools.ok()) << with_tools.status().ToString();
  EXPECT_EQ(*with_tools, "user=x</s>\nlookup!");
}

TEST(TokenizerTest, BrokenChatTemplateLoadsButFailsToApply) {
  auto t = Tokenizer::FromJson(ByteLevelTokenizerJson(), json{{"chat_template", "{% for m in messages %}"}},
                               "dir/tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();  // encoding still works without a usable template
  auto chat = (*t)->ApplyChatTemplate({{"user", "hi"}}, true);
  EXPECT_EQ(chat.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(chat.status().message(), HasSubstr("unclosed 'for'"));
  auto none = Tokenizer::FromJson(ByteLevelTokenizerJson(), json(), "dir/tokenizer.json");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->ApplyChatTemplate({{"user", "hi"}}, true).status().code(), StatusCode::kNotFound);
}

// ---- load errors ----

TEST(TokenizerTest, LoadErrorsNameFileAndField) {
  TempDir tmp;
  auto missing = Tokenizer::Load(tmp.Sub("absent/tokenizer.json"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("absent/tokenizer.json"));

  WriteAll(tmp.Sub("tokenizer.json"), "{\"model\": {");
  auto malformed = Tokenizer::Load(tmp.Sub("tokenizer.json"));
  EXPECT_EQ(malformed.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(malformed.status().message(), HasSubstr("tokenizer.json"));

  auto expect_error = [](const json& j, StatusCode code, const std::string& needle) {
    auto t = Tokenizer::FromJson(j, json(), "dir/tokenizer.json");
    ASSERT_FALSE(t.ok()) << needle;
    EXPECT_EQ(t.status().code(), code) << t.status().ToString();
    EXPECT_THAT(t.status().message(), HasSubstr(needle));
    EXPECT_THAT(t.status().message(), HasSubstr("dir/tokenizer.json"));
  };
  json j = ByteLevelTokenizerJson();
  j["model"]["type"] = "Fancy";
  expect_error(j, StatusCode::kCorruption, "model type 'Fancy'");
  j = ByteLevelTokenizerJson();
  j["model"]["merges"].push_back("Ġ zzz");
  expect_error(j, StatusCode::kCorruption, "'zzz'");
  j = ByteLevelTokenizerJson();
  j["model"]["merges"].push_back("nospace");
  expect_error(j, StatusCode::kCorruption, "merges[8]");
  // A 5 MB merge string: the message quotes a bounded prefix of it (issue 37).
  for (const std::string& huge : {std::string(5000000, 'x'), "a " + std::string(5000000, 'y')}) {
    j = ByteLevelTokenizerJson();
    j["model"]["merges"].push_back(huge);
    auto t = Tokenizer::FromJson(j, json(), "dir/tokenizer.json");
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status().message(), HasSubstr("merges[8]"));
    EXPECT_LT(t.status().message().size(), 400u) << t.status().message().substr(0, 200);
  }
  j = ByteLevelTokenizerJson();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error(j, StatusCode::kInvalidArgument, "'BertNormalizer'");
  j = ByteLevelTokenizerJson();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AA=="}};  // 1 byte: no header
  expect_error(j, StatusCode::kCorruption, "precompiled_charsmap");
  j = ByteLevelTokenizerJson();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "UnicodeScripts"}}}}};
  expect_error(j, StatusCode::kInvalidArgument, "pre_tokenizer.pretokenizers[0]: unsupported pre_tokenizer type 'UnicodeScripts'");
  j = ByteLevelTokenizerJson();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(oops"}}}, {"behavior", "Isolated"}};
  expect_error(j, StatusCode::kInvalidArgument, "(oops");
  j = ByteLevelTokenizerJson();
  j["added_tokens"][0].erase("id");
  expect_error(j, StatusCode::kCorruption, "added_tokens[0].id");
  j = ByteLevelTokenizerJson();
  j.erase("model");
  expect_error(j, StatusCode::kCorruption, "model: missing");
}

// ---- the synthetic checkpoint's tokenizer (services/synth) ----

TEST(TokenizerTest, SynthQwen2TokenizerRoundTripsEnglish) {
  TempDir tmp;
  const std::string out = tmp.Sub("ckpt");
  const testing::CommandResult r = testing::RunCli("synth --arch qwen2_moe --preset tiny --out " + out);
  if (r.exit_code != 0) GTEST_SKIP() << "zipmoe synth unavailable: " << r.output;
  auto t = Tokenizer::Load(out + "/tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::string paragraph =
      "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of "
      "times; in 2024 the model answered 17 questions in 3.5 seconds!\n\nNew paragraph:  two spaces, "
      "tabs\tand \"quotes\" (parentheses) -- dashes.";
  auto ids = (*t)->Encode(paragraph, /*add_special_tokens=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_LT(ids->size(), paragraph.size());  // merges learned from English shorten the text
  EXPECT_EQ((*t)->Decode(*ids), paragraph);
  EXPECT_EQ((*t)->vocab_size(), 2048);
  auto chat = (*t)->ApplyChatTemplate({{"user", "hi"}}, true);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  auto chat_ids = (*t)->Encode(*chat);
  ASSERT_TRUE(chat_ids.ok());
  EXPECT_EQ(chat_ids->front(), *(*t)->TokenToId("<|im_start|>"));
  EXPECT_EQ((*t)->Decode(*chat_ids), *chat);
}

}  // namespace
}  // namespace zipmoe
