// Tests for the byte-level BPE tokenizer builder (services/synth/bpe_tokenizer_builder.h).
#include "services/synth/bpe_tokenizer_builder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace zipmoe::synth {
namespace {

using nlohmann::json;
using Pieces = std::vector<std::string>;

// Reference BPE encoder over byte-level characters: repeatedly apply the lowest-rank merge.
std::vector<std::string> Encode(const std::string& bytes, const std::map<std::pair<std::string, std::string>, size_t>& ranks) {
  std::vector<std::string> sym;
  for (unsigned char b : bytes) sym.push_back(ByteToUnicode()[b]);
  for (;;) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = ranks.find({sym[i], sym[i + 1]});
      if (it != ranks.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == SIZE_MAX) return sym;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
}

TEST(BpeByteLevel, ByteMappingMatchesGpt2) {
  EXPECT_EQ(ByteToUnicode()[' '], "\u0120");   // Ġ
  EXPECT_EQ(ByteToUnicode()['\n'], "\u010A");  // Ċ
  EXPECT_EQ(ByteToUnicode()[0], "\u0100");     // Ā
  EXPECT_EQ(ByteToUnicode()['a'], "a");
  EXPECT_EQ(ByteToUnicode()[0xAD], "\u0143");  // the soft hyphen is the last remapped byte
  EXPECT_EQ(ByteIdOrder()[0], '!');
  EXPECT_EQ(ByteIdOrder()[93], '~');
  EXPECT_EQ(ByteIdOrder()[188], 0);    // "Ā" has id 188 in GPT-2 / Qwen2
  EXPECT_EQ(ByteIdOrder()[220], ' ');  // "Ġ" has id 220
  std::set<std::string> distinct(ByteToUnicode().begin(), ByteToUnicode().end());
  EXPECT_EQ(distinct.size(), 256u);
}

TEST(BpePreTokenizer, SplitsLikeTheQwen2Regex) {
  EXPECT_EQ(PreTokenizeQwen2Ascii("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(PreTokenizeQwen2Ascii("It's 2024!"), (Pieces{"It", "'s", " ", "2", "0", "2", "4", "!"}));
  EXPECT_EQ(PreTokenizeQwen2Ascii("WE'LL go"), (Pieces{"WE", "'LL", " go"}));
  EXPECT_EQ(PreTokenizeQwen2Ascii("foo   bar"), (Pieces{"foo", "  ", " bar"}));
  EXPECT_EQ(PreTokenizeQwen2Ascii("x\n\ny"), (Pieces{"x", "\n\n", "y"}));
  EXPECT_EQ(PreTokenizeQwen2Ascii("end.  \n"), (Pieces{"end", ".", "  \n"}));
  EXPECT_EQ(PreTokenizeQwen2Ascii("(a) b?!\n\nc"), (Pieces{"(a", ")", " b", "?!\n\n", "c"}));
  EXPECT_EQ(PreTokenizeQwen2Ascii("a \t\nb  "), (Pieces{"a", " \t\n", "b", "  "}));
  EXPECT_EQ(PreTokenizeQwen2Ascii(" 'x"), (Pieces{" '", "x"}));
  std::string joined;
  for (const std::string& p : PreTokenizeQwen2Ascii(EnglishCorpus())) joined += p;
  EXPECT_EQ(joined, EnglishCorpus());
}

TEST(BpeModel, LearnsCommonEnglishWordsThenFillsExactly) {
  Result<BpeModel> model = BuildBpeModel(6000, EnglishCorpus());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(model->tokens.size(), 6000u);
  EXPECT_GT(model->n_learned_merges, 800);
  EXPECT_LT(model->n_learned_merges, 6000 - 256);
  const std::set<std::string> vocab(model->tokens.begin(), model->tokens.end());
  EXPECT_EQ(vocab.size(), model->tokens.size()) << "token strings must be unique";
  for (const char* word : {"\u0120the", "\u0120and", "\u0120model", "\u0120experts", "\u0120garden"}) {
    EXPECT_EQ(vocab.count(word), 1u) << word;
  }
  EXPECT_EQ(model->tokens[model->merges[0].first] + model->tokens[model->merges[0].second], "\u0120t");

  // Rank order: both parts of merge i exist before it (bytes or products of earlier merges).
  std::unordered_map<std::string, size_t> made_by;  // token -> first merge producing it
  for (size_t i = 0; i < model->merges.size(); ++i) {
    const auto& [l, r] = model->merges[i];
    for (int32_t part : {l, r}) {
      if (part < 256) continue;
      auto it = made_by.find(model->tokens[part]);
      ASSERT_TRUE(it != made_by.end() && it->second < i) << "merge " << i << " uses a later token";
    }
    made_by.emplace(model->tokens[l] + model->tokens[r], i);
  }
  // Synthetic merges each add the last tokens, one new string per merge.
  const size_t n_synthetic = model->merges.size() - static_cast<size_t>(model->n_learned_merges);
  for (size_t k = 0; k < n_synthetic; ++k) {
    const auto& [l, r] = model->merges[static_cast<size_t>(model->n_learned_merges) + k];
    EXPECT_EQ(model->tokens[model->tokens.size() - n_synthetic + k], model->tokens[l] + model->tokens[r]);
  }
  EXPECT_EQ(BuildBpeModel(100, EnglishCorpus()).status().code(), StatusCode::kInvalidArgument);
}

TEST(BpeModel, LearnedMergesEncodeCorpusWordsAsOneToken) {
  Result<BpeModel> model = BuildBpeModel(4000, EnglishCorpus());
  ASSERT_TRUE(model.ok());
  std::map<std::pair<std::string, std::string>, size_t> ranks;
  for (size_t i = 0; i < model->merges.size(); ++i) {
    ranks.emplace(std::make_pair(model->tokens[model->merges[i].first], model->tokens[model->merges[i].second]), i);
  }
  for (const char* word : {" the", " experts", " compression", "Computers", " isn't"}) {
    const std::vector<std::string> pieces = PreTokenizeQwen2Ascii(word);
    for (const std::string& p : pieces) EXPECT_EQ(Encode(p, ranks).size(), 1u) << "'" << p << "' of '" << word << "'";
  }
  const std::vector<std::string> unseen = Encode(" zebra", ranks);
  EXPECT_GT(unseen.size(), 1u);
  std::string joined;
  for (const std::string& s : unseen) joined += s;
  EXPECT_EQ(joined, "\u0120zebra");
}

TEST(Tokenizer, QwenMiniVocabularyIsExactDenseAndValid) {
  Result<SpecialTokenLayout> layout = SpecialTokensForArch("qwen2_moe", 151936);
  ASSERT_TRUE(layout.ok());
  const auto start = std::chrono::steady_clock::now();
  Result<BpeTokenizer> tok = BuildBpeTokenizer(*layout);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::printf("BuildBpeTokenizer(151936): %.2f s, %lld learned + %lld synthetic merges, %zu bytes\n", seconds,
              static_cast<long long>(tok->n_learned_merges), static_cast<long long>(tok->n_synthetic_merges),
              tok->json_text.size());
  const json j = json::parse(tok->json_text);
  const json& vocab = j["model"]["vocab"];
  ASSERT_EQ(vocab.size(), 151933u);
  ASSERT_EQ(j["added_tokens"].size(), 3u);
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], 151933);
  EXPECT_EQ(j["added_tokens"][2]["content"], "<|im_end|>");
  EXPECT_EQ(j["added_tokens"][2]["id"], 151935);
  std::vector<char> seen(151936, 0);
  for (const auto& [token, id] : vocab.items()) {
    ASSERT_EQ(seen.at(id.get<size_t>()), 0) << token;
    seen[id.get<size_t>()] = 1;
  }
  for (int64_t id = 0; id < 151933; ++id) ASSERT_EQ(seen[id], 1) << id;
  EXPECT_EQ(vocab["!"], 0);
  EXPECT_EQ(vocab["\u0120"], 220);
  const json& merges = j["model"]["merges"];
  EXPECT_EQ(static_cast<int64_t>(merges.size()), tok->n_learned_merges + tok->n_synthetic_merges);
  EXPECT_EQ(static_cast<int64_t>(merges.size()), 151933 - 256);
  for (const json& m : merges) {
    const std::string s = m;
    const size_t sp = s.find(' ');
    ASSERT_TRUE(sp != std::string::npos && vocab.contains(s.substr(0, sp)) && vocab.contains(s.substr(sp + 1)) &&
                vocab.contains(s.substr(0, sp) + s.substr(sp + 1)))
        << s;
  }
  EXPECT_EQ(j["model"]["dropout"], nullptr);
  EXPECT_EQ(j["model"]["byte_fallback"], false);
  EXPECT_EQ(j["normalizer"]["type"], "NFC");
  EXPECT_EQ(j["post_processor"]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"], false);
}

TEST(Tokenizer, FrontSpecialsShiftTheBpeIds) {
  Result<SpecialTokenLayout> layout = SpecialTokensForArch("mixtral", 1024);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->IdOf("<s>"), 1);
  EXPECT_EQ(layout->IdOf("</s>"), 2);
  Result<BpeTokenizer> tok = BuildBpeTokenizer(*layout);
  ASSERT_TRUE(tok.ok());
  const json j = json::parse(tok->json_text);
  EXPECT_EQ(j["model"]["vocab"]["!"], 3);
  EXPECT_EQ(j["model"]["vocab"].size(), 1021u);
  EXPECT_EQ(j["post_processor"]["type"], "TemplateProcessing");
  EXPECT_EQ(j["post_processor"]["special_tokens"]["<s>"]["ids"], json({1}));
  EXPECT_EQ(SpecialTokensForArch("mixtral", 200).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecialTokensForArch("bert", 4096).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zipmoe::synth
