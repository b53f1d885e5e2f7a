// Helpers of the tokenizer tests (tokenizer_test.cc, tokenizer_pretokenize_test.cc,
// tokenizer_chat_test.cc, tokenizer_unigram_test.cc): tokenizer.json documents (byte-level BPE,
// SentencePiece-style BPE), pre-tokenizer documents (GPT-2, Qwen2), and loads that must succeed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_pretokenizer.h"
#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer::test {

using nlohmann::json;

inline const char kQwen2Regex[] =
           R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ---- fixtures: tokenizer.json documents ----

// Byte-level BPE: id b is the byte-level character of byte b (so every byte has a token), then
// 8 merges (ids 256..263) and three special added tokens (264..266).
inline json ByteLevelTokenizerJson() {
  json vocab = json::object();
  const auto& alphabet = tokenizer::ByteToUnicodeUtf8();
  for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "l l", "he ll", "hell o", "Ġ w", "o r"};
  const std::vector<std::string> merged = {"Ġt", "he", "Ġthe", "ll", "hell", "hello", "Ġw", "or"};
  for (size_t i = 0; i < merged.size(); ++i) vocab[merged[i]] = 256 + static_cast<int>(i);
  json added = json::array();
  int id = 264;
  for (const char* content : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                     {"merges", merges}}}};
}

// Mixtral/Llama style: Prepend + Replace normalizer, no pre-tokenizer, byte fallback, <s> added by
// TemplateProcessing, decoder Replace/ByteFallback/Fuse/Strip. Ids: <unk> 0, <s> 1, </s> 2,
// <0x00>..<0xFF> 3..258, then the tokens below; merges use the ["a", "b"] form.
inline json SentencePieceTokenizerJson() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  const std::vector<std::string> tokens = {"▁", "H", "e", "l", "o", "w", "r", "d",  // 259..266
                                           "▁H", "el", "ell", "▁Hell", "▁Hello",   // 267..271
                                           "▁w", "or", "▁wor", "▁worl", "▁world"}; // 272..276
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = 259 + static_cast<int>(i);
  const json merges = json::array({{"▁", "H"}, {"e", "l"}, {"el", "l"}, {"▁H", "ell"}, {"▁Hell", "o"},
                                   {"▁", "w"}, {"o", "r"}, {"▁w", "or"}, {"▁wor", "l"}, {"▁worl", "d"}});
  json added = json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id}, {"content", id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>"}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  json normalizer = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "Prepend"}, {"prepend", "▁"}},
                                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  json decoder = {{"type", "Sequence"},
                  {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}},
                                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  json post = {{"type", "TemplateProcessing"},
               {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
               {"pair", json::array()},
               {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  return {{"added_tokens", added}, {"normalizer", normalizer}, {"pre_tokenizer", nullptr},
          {"post_processor", post}, {"decoder", decoder},
          {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
                     {"vocab", vocab}, {"merges", merges}}}};
}

inline std::unique_ptr<Tokenizer> MustLoad(const json& tokenizer_json, const json& config = json()) {
  auto t = Tokenizer::FromJson(tokenizer_json, config, "test-tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

inline std::vector<int32_t> MustEncode(const Tokenizer& t, const std::string& text, bool add_special = false) {
  auto ids = t.Encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>();
}

inline std::vector<std::string> PreTokenize(const json& pre_tokenizer_json, const std::string& text) {
  auto pre = tokenizer::ParsePreTokenizer(pre_tokenizer_json, "test");
  EXPECT_TRUE(pre.ok()) << pre.status().ToString();
  std::vector<tokenizer::Piece> pieces = {{text, true}};
  EXPECT_TRUE((*pre)->PreTokenize(&pieces).ok());
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

inline json Qwen2PreTokenizerJson() {
  return {{"type", "Sequence"},
          {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2Regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
}

inline json Gpt2PreTokenizerJson() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
}

}  // namespace zipmoe::tokenizer::test
