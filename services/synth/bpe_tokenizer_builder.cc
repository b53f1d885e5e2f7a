// Byte-level BPE learning and tokenizer.json writing (see bpe_tokenizer_builder.h).
#include "services/synth/bpe_tokenizer_builder.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "services/synth/gaussian.h"

namespace zipmoe::synth {

const char kQwen2PreTokenizerRegex[] =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

namespace {

using ordered_json = nlohmann::ordered_json;

// Synthetic tokens longer than this (bytes of UTF-8) are not reused as prefixes.
constexpr size_t kMaxSyntheticPrefixBytes = 16;
// Seed of the synthetic fill; the tokenizer does not depend on the weights' seed.
constexpr uint64_t kFillSeed = 0x7A69706D6F65ull;  // "zipmoe"

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // bytes_to_unicode only needs code points < 0x800
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

bool IsLetter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsNewline(unsigned char c) { return c == '\n' || c == '\r'; }
bool IsSpace(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
bool IsOther(unsigned char c) { return !IsLetter(c) && !IsDigit(c) && !IsSpace(c); }  // [^\s\p{L}\p{N}]

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Length of the contraction alternative `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at i, or 0.
size_t MatchContraction(std::string_view s, size_t i) {
  if (s[i] != '\'' || i + 1 >= s.size()) return 0;
  const char a = Lower(s[i + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < s.size()) {
    const char b = Lower(s[i + 2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// Length of the first alternative of the Qwen2 regex matching at i (always >= 1).
size_t MatchQwen2(std::string_view s, size_t i) {
  const size_t n = s.size();
  auto c = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  if (size_t len = MatchContraction(s, i)) return len;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t j = i;
    if (!IsLetter(c(j)) && !IsNewline(c(j)) && !IsDigit(c(j)) && j + 1 < n && IsLetter(c(j + 1))) ++j;
    if (IsLetter(c(j))) {
      while (j < n && IsLetter(c(j))) ++j;
      return j - i;
    }
  }
  if (IsDigit(c(i))) return 1;  // \p{N}
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  {
    size_t j = i;
    if (c(j) == ' ' && j + 1 < n && IsOther(c(j + 1))) ++j;
    if (IsOther(c(j))) {
      while (j < n && IsOther(c(j))) ++j;
      while (j < n && IsNewline(c(j))) ++j;
      return j - i;
    }
  }
  // Remaining alternatives all start with whitespace.
  size_t run_end = i;
  while (run_end < n && IsSpace(c(run_end))) ++run_end;
  // \s*[\r\n]+ : up to and including the last newline of the whitespace run.
  for (size_t k = run_end; k > i; --k) {
    if (IsNewline(c(k - 1))) return k - i;
  }
  // \s+(?!\S) : the whole run at end of text, else the run minus its last space (if >= 2 long).
  if (run_end == n) return run_end - i;
  if (run_end - i >= 2) return run_end - i - 1;
  return run_end > i ? run_end - i : 1;  // \s+ (or, defensively, one unmatched byte)
}

std::string JsonString(const std::string& s) { return nlohmann::json(s).dump(); }

// Re-indents a nlohmann dump(2) so it can be embedded `depth` levels deep.
std::string Indented(const ordered_json& j, int depth) {
  const std::string text = j.dump(2);
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  std::string out;
  for (char ch : text) {
    out += ch;
    if (ch == '\n') out += pad;
  }
  return out;
}

ordered_json ByteLevel() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

ordered_json PostProcessor(const SpecialTokenLayout& layout) {
  if (!layout.prepend_bos) return ByteLevel();
  const std::string& bos = layout.bos_token;
  auto special = [&](int type_id) { return ordered_json{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}}; };
  auto sequence = [](const char* id, int type_id) {
    return ordered_json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  ordered_json special_tokens;
  special_tokens[bos] = {{"id", bos}, {"ids", {layout.IdOf(bos)}}, {"tokens", {bos}}};
  return {{"type", "TemplateProcessing"},
          {"single", {special(0), sequence("A", 0)}},
          {"pair", {special(0), sequence("A", 0), special(1), sequence("B", 1)}},
          {"special_tokens", special_tokens}};
}

}  // namespace

const std::array<uint8_t, 256>& ByteIdOrder() {
  static const std::array<uint8_t, 256> order = [] {
    std::array<uint8_t, 256> o{};
    std::array<bool, 256> printable{};
    size_t k = 0;
    for (int b = 0; b < 256; ++b) {
      printable[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      if (printable[b]) o[k++] = static_cast<uint8_t>(b);
    }
    for (int b = 0; b < 256; ++b) {
      if (!printable[b]) o[k++] = static_cast<uint8_t>(b);
    }
    return o;
  }();
  return order;
}

const std::array<std::string, 256>& ByteToUnicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = Utf8(printable ? static_cast<uint32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

std::vector<std::string> PreTokenizeQwen2Ascii(std::string_view text) {
  std::vector<std::string> pieces;
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = MatchQwen2(text, i);
    pieces.emplace_back(text.substr(i, len));
    i += len;
  }
  return pieces;
}

Result<BpeModel> BuildBpeModel(int64_t n_tokens, std::string_view corpus) {
  if (n_tokens < 256) {
    return Status::InvalidArgument(fmt::format("BPE vocabulary of {} tokens is below the 256 byte tokens", n_tokens));
  }
  BpeModel model;
  std::unordered_map<std::string, int32_t> index;
  std::array<int32_t, 256> byte_id{};
  for (int i = 0; i < 256; ++i) {
    const uint8_t byte = ByteIdOrder()[i];
    byte_id[byte] = i;
    model.tokens.push_back(ByteToUnicode()[byte]);
    index.emplace(model.tokens.back(), i);
  }

  // Word frequencies, in sorted word order so training is deterministic.
  std::map<std::string, int64_t> freq;
  for (std::string& piece : PreTokenizeQwen2Ascii(corpus)) ++freq[std::move(piece)];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [word, count] : freq) {
    std::vector<int32_t> symbols;
    for (unsigned char ch : word) symbols.push_back(byte_id[ch]);
    words.emplace_back(std::move(symbols), count);
  }

  // Learned merges: most frequent adjacent pair first; ties by (left, right) string order.
  while (static_cast<int64_t>(model.tokens.size()) < n_tokens) {
    std::unordered_map<uint64_t, int64_t> pair_count;
    for (const auto& [symbols, count] : words) {
      for (size_t k = 0; k + 1 < symbols.size(); ++k) {
        pair_count[(static_cast<uint64_t>(symbols[k]) << 32) | static_cast<uint32_t>(symbols[k + 1])] += count;
      }
    }
    if (pair_count.empty()) break;  // every word is one token: the corpus is exhausted
    uint64_t best = 0;
    int64_t best_count = -1;
    for (const auto& [key, count] : pair_count) {
      bool better = count > best_count;
      if (count == best_count) {
        const auto& bl = model.tokens[best >> 32];
        const auto& br = model.tokens[best & 0xffffffffu];
        const auto& kl = model.tokens[key >> 32];
        const auto& kr = model.tokens[key & 0xffffffffu];
        better = std::tie(kl, kr) < std::tie(bl, br);
      }
      if (better) {
        best = key;
        best_count = count;
      }
    }
    const int32_t left = static_cast<int32_t>(best >> 32);
    const int32_t right = static_cast<int32_t>(best & 0xffffffffu);
    const std::string merged = model.tokens[left] + model.tokens[right];
    int32_t merged_id;
    if (auto it = index.find(merged); it != index.end()) {
      merged_id = it->second;  // same string reached by another split: a valid, token-free merge
    } else {
      merged_id = static_cast<int32_t>(model.tokens.size());
      model.tokens.push_back(merged);
      index.emplace(merged, merged_id);
    }
    model.merges.emplace_back(left, right);
    for (auto& [symbols, count] : words) {
      std::vector<int32_t> out;
      out.reserve(symbols.size());
      for (size_t k = 0; k < symbols.size(); ++k) {
        if (k + 1 < symbols.size() && symbols[k] == left && symbols[k + 1] == right) {
          out.push_back(merged_id);
          ++k;
        } else {
          out.push_back(symbols[k]);
        }
      }
      symbols = std::move(out);
    }
  }
  model.n_learned_merges = static_cast<int64_t>(model.merges.size());

  // Synthetic merges: word-like prefix + lowercase suffix, both existing tokens.
  auto all_lower = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= 'a' && ch <= 'z'; });
  };
  const std::string& space = ByteToUnicode()[' '];  // "Ġ"
  auto word_like = [&](const std::string& s) {
    const std::string rest = s.compare(0, space.size(), space) == 0 ? s.substr(space.size()) : s;
    return !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char ch) { return IsLetter(ch); });
  };
  std::vector<int32_t> prefixes, suffixes;
  for (int32_t id = 0; id < static_cast<int32_t>(model.tokens.size()); ++id) {
    if (word_like(model.tokens[id])) prefixes.push_back(id);
    if (all_lower(model.tokens[id])) suffixes.push_back(id);
  }
  SplitMix64 rng(kFillSeed);
  const int64_t needed = n_tokens - static_cast<int64_t>(model.tokens.size());
  int64_t attempts = 0;
  while (static_cast<int64_t>(model.tokens.size()) < n_tokens) {
    if (++attempts > 64 * needed + 1024) {
      return Status::Internal(fmt::format("BPE fill: no new token string after {} attempts ({} of {} tokens)",
                                          attempts, model.tokens.size(), n_tokens));
    }
    const int32_t left = prefixes[rng.NextBelow(prefixes.size())];
    const int32_t right = suffixes[rng.NextBelow(suffixes.size())];
    std::string merged = model.tokens[left] + model.tokens[right];
    if (index.count(merged) != 0) continue;
    const int32_t id = static_cast<int32_t>(model.tokens.size());
    if (merged.size() <= kMaxSyntheticPrefixBytes) prefixes.push_back(id);
    index.emplace(merged, id);
    model.tokens.push_back(std::move(merged));
    model.merges.emplace_back(left, right);
  }
  return model;
}

Result<BpeTokenizer> BuildBpeTokenizer(const SpecialTokenLayout& layout, std::string_view corpus) {
  const int64_t n_bpe = layout.vocab_size - layout.n_special();
  ZM_ASSIGN_OR_RETURN(BpeModel model, BuildBpeModel(n_bpe, corpus));
  const int64_t first_id = layout.first_bpe_id();

  ordered_json added = ordered_json::array();
  auto add_special = [&](const std::string& content) {
    added.push_back({{"id", layout.IdOf(content)}, {"content", content}, {"single_word", false},
                     {"lstrip", false},  {"rstrip", false},     {"normalized", false},
                     {"special", true}});
  };
  for (const std::string& t : layout.front) add_special(t);
  for (const std::string& t : layout.back) add_special(t);

  ordered_json pre_tokenizer = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2PreTokenizerRegex}}}, {"behavior", "Isolated"},
         {"invert", false}},
        ByteLevel()}}};

  std::string out;
  out.reserve(static_cast<size_t>(n_bpe) * 40 + 4096);
  out += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  out += "  \"added_tokens\": " + Indented(added, 1) + ",\n";
  out += "  \"normalizer\": " + Indented(ordered_json{{"type", "NFC"}}, 1) + ",\n";
  out += "  \"pre_tokenizer\": " + Indented(pre_tokenizer, 1) + ",\n";
  out += "  \"post_processor\": " + Indented(PostProcessor(layout), 1) + ",\n";
  out += "  \"decoder\": " + Indented(ByteLevel(), 1) + ",\n";
  out += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n";
  out += "    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n";
  out += "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"vocab\": {";
  for (size_t i = 0; i < model.tokens.size(); ++i) {
    out += i == 0 ? "\n      " : ",\n      ";
    out += JsonString(model.tokens[i]);
    out += ": ";
    out += std::to_string(first_id + static_cast<int64_t>(i));
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t i = 0; i < model.merges.size(); ++i) {
    out += i == 0 ? "\n      " : ",\n      ";
    out += JsonString(model.tokens[model.merges[i].first] + " " + model.tokens[model.merges[i].second]);
  }
  out += "\n    ]\n  }\n}\n";

  BpeTokenizer tokenizer;
  tokenizer.json_text = std::move(out);
  tokenizer.n_bpe_tokens = n_bpe;
  tokenizer.n_learned_merges = model.n_learned_merges;
  tokenizer.n_synthetic_merges = static_cast<int64_t>(model.merges.size()) - model.n_learned_merges;
  return tokenizer;
}

}  // namespace zipmoe::synth
