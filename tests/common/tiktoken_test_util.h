// Helpers of the tiktoken tokenizer tests (tests/common/tokenizer_tiktoken_test.cc and the CLI tests
// that load such a directory): a base64 rank file and the files Moonlight / Kimi ship instead of
// tokenizer.json (tiktoken.model, tokenization_*.py with pat_str, tokenizer_config.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace zipmoe::tokenizer::test {

// Standard base64 (RFC 4648, padded), as tiktoken.model stores token bytes.
inline std::string Base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// A rank file: the 256 bytes at ranks 0..255, then `merged` at 256, 257, ...
inline std::string RankFile(const std::vector<std::string>& merged) {
  std::string text;
  for (int b = 0; b < 256; ++b) text += fmt::format("{} {}\n", Base64(std::string(1, static_cast<char>(b))), b);
  for (size_t k = 0; k < merged.size(); ++k) text += fmt::format("{} {}\n", Base64(merged[k]), 256 + k);
  return text;
}

// tokenizer_config.json of such a directory: auto_map naming tokenization_moonshot.TikTokenTokenizer,
// bos [BOS] (265), eos [EOS] (266) and <|im_end|> (267) in added_tokens_decoder.
inline nlohmann::json MoonshotTokenizerConfig() {
  return {
      {"auto_map", {{"AutoTokenizer", {"tokenization_moonshot.TikTokenTokenizer", nullptr}}}},
      {"bos_token", "[BOS]"},
      {"eos_token", "[EOS]"},
      {"added_tokens_decoder", {{"265", {{"content", "[BOS]"}, {"special", true}}},
                                {"266", {{"content", "[EOS]"}, {"special", true}}},
                                {"267", {{"content", "<|im_end|>"}, {"special", true}}}}},
  };
}

// Writes into `dir` the tokenizer files of a Moonlight / Kimi checkpoint with a small rank file: 256
// bytes then he, ll, hell, hello, " w", or, " wor", " world", "\xe4\xb8" (ranks 256..264); a
// tokenization_moonshot.py whose pat_str keeps Han runs apart from other letters (a class intersection)
// and reserves 8 special ids (265..272); `config` as tokenizer_config.json. "hello world" encodes to
// 259, 263.
inline void WriteTiktokenFiles(const std::string& dir, const nlohmann::json& config) {
  zipmoe::testing::WriteAll(dir + "/tiktoken.model",
                            RankFile({"he", "ll", "hell", "hello", " w", "or", " wor", " world", "\xe4\xb8"}));
  zipmoe::testing::WriteAll(dir + "/tokenization_moonshot.py", R"PY(
class TikTokenTokenizer:
    num_reserved_special_tokens = 8
    pat_str = "|".join([r"""[\p{Han}]+""", r"""[\p{L}&&[^\p{Han}]]+""", r""" ?[\p{L}&&[^\p{Han}]]+""", r"""\s+"""])
)PY");
  zipmoe::testing::WriteAll(dir + "/tokenizer_config.json", config.dump());
}

}  // namespace zipmoe::tokenizer::test
