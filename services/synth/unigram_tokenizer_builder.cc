// T5-style Unigram tokenizer.json (see unigram_tokenizer_builder.h).
#include "services/synth/unigram_tokenizer_builder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace zipmoe::synth {
namespace {

constexpr const char* kMeta = "\xe2\x96\x81";  // U+2581 "▁"
constexpr size_t kMaxNgramBytes = 8;

bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

Result<UnigramTokenizer> BuildUnigramTokenizer(int64_t vocab_size, std::string_view corpus) {
  if (vocab_size < 256)
    return Status::InvalidArgument(fmt::format("unigram tokenizer: vocab_size {} < 256", vocab_size));
  UnigramTokenizer out;
  out.n_sentinels = std::min<int64_t>(100, vocab_size / 16);
  const int64_t n_pieces = vocab_size - 3 - out.n_sentinels;
  // Frequencies of "▁word" and of every character n-gram (2..8 bytes) of words and of "▁word".
  std::map<std::string, int64_t> counts;
  std::string word;
  const auto flush = [&] {
    if (word.empty()) return;
    const std::string w = std::string(kMeta) + word;
    counts[w] += 4;  // whole words first
    for (const std::string& s : {w, word}) {
      for (size_t i = 0; i < s.size(); ++i)
        for (size_t n = 2; n <= kMaxNgramBytes && i + n <= s.size(); ++n) {
          // Whole UTF-8 characters only (never split "▁" or any other multi-byte character).
          if (IsContinuation(s[i]) || (i + n < s.size() && IsContinuation(s[i + n]))) continue;
          counts[s.substr(i, n)] += 1;
        }
    }
    word.clear();
  };
  for (char ch : corpus) {
    if (ch == ' ' || ch == '\n' || ch == '\t') {
      flush();
    } else {
      word.push_back(ch);
    }
  }
  flush();
  std::vector<std::pair<std::string, int64_t>> pieces;
  std::set<std::string> taken;
  // Every printable ASCII character alone and after the marker, plus the marker itself: any ASCII
  // text tokenizes without <unk>.
  pieces.emplace_back(kMeta, 1);
  for (char ch = 33; ch < 127; ++ch) {
    pieces.emplace_back(std::string(1, ch), 1);
    pieces.emplace_back(std::string(kMeta) + ch, 1);
  }
  for (const auto& p : pieces) taken.insert(p.first);
  std::vector<std::pair<std::string, int64_t>> ranked(counts.begin(), counts.end());
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& p : ranked) {
    if (static_cast<int64_t>(pieces.size()) >= n_pieces) break;
    if (taken.insert(p.first).second) pieces.push_back(p);
  }
  // A vocabulary larger than the corpus's pieces (t5-base's 32128): filled with lower-case letter
  // strings of 2, 3, 4 letters, with and without the marker, in lexicographic order, each scored as a
  // single occurrence (below every corpus piece of the same length).
  std::string filler;
  for (size_t len = 2; len <= 4 && static_cast<int64_t>(pieces.size()) < n_pieces; ++len) {
    std::vector<int> digits(len, 0);
    while (static_cast<int64_t>(pieces.size()) < n_pieces) {
      filler.clear();
      for (int d : digits) filler.push_back(static_cast<char>('a' + d));
      for (const std::string& s : {std::string(kMeta) + filler, filler}) {
        if (static_cast<int64_t>(pieces.size()) < n_pieces && taken.insert(s).second) pieces.emplace_back(s, 1);
      }
      size_t i = len;  // next string of this length
      while (i > 0 && ++digits[i - 1] == 26) digits[--i] = 0;
      if (i == 0) break;
    }
  }
  if (static_cast<int64_t>(pieces.size()) < n_pieces)
    return Status::InvalidArgument(fmt::format("unigram tokenizer: the corpus and the filler yield {} pieces, vocab_size {} needs {}",
                                               pieces.size(), vocab_size, n_pieces));
  pieces.resize(static_cast<size_t>(n_pieces));
  double total = 0.0;
  for (const auto& p : pieces) total += static_cast<double>(p.second);

  nlohmann::json vocab = nlohmann::json::array();
  const auto entry = [](const std::string& p, double score) { return nlohmann::json::array({p, score}); };
  vocab.push_back(entry("<pad>", 0.0));
  vocab.push_back(entry("</s>", 0.0));
  vocab.push_back(entry("<unk>", 0.0));
  for (const auto& p : pieces) {
    // Single characters get a low score so that longer pieces win whenever they apply.
    const double score = std::log(static_cast<double>(p.second) / total) - (p.second == 1 ? 10.0 : 0.0);
    vocab.push_back(entry(p.first, score));
  }
  nlohmann::json added = nlohmann::json::array();
  const auto special = [](int64_t id, const std::string& content) {
    return nlohmann::json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  added.push_back(special(0, "<pad>"));
  added.push_back(special(1, "</s>"));
  added.push_back(special(2, "<unk>"));
  for (int64_t i = out.n_sentinels - 1; i >= 0; --i) {
    const std::string name = fmt::format("<extra_id_{}>", i);
    const int64_t id = vocab_size - 1 - i;
    vocab.push_back(entry(name, 0.0));
    added.push_back(special(id, name));
  }
  nlohmann::json metaspace = nlohmann::json::object();
  metaspace["type"] = "Metaspace";
  metaspace["replacement"] = kMeta;
  metaspace["prepend_scheme"] = "always";
  metaspace["split"] = true;
  const auto piece = [](const char* kind, const char* id) {
    nlohmann::json inner = nlohmann::json::object();
    inner["id"] = id;
    inner["type_id"] = 0;
    nlohmann::json j = nlohmann::json::object();
    j[kind] = inner;
    return j;
  };
  nlohmann::json post = nlohmann::json::object();
  post["type"] = "TemplateProcessing";
  post["single"] = nlohmann::json::array({piece("Sequence", "A"), piece("SpecialToken", "</s>")});
  post["pair"] = nlohmann::json::array(
      {piece("Sequence", "A"), piece("SpecialToken", "</s>"), piece("Sequence", "B"), piece("SpecialToken", "</s>")});
  nlohmann::json eos_entry = nlohmann::json::object();
  eos_entry["id"] = "</s>";
  eos_entry["ids"] = nlohmann::json::array({1});
  eos_entry["tokens"] = nlohmann::json::array({"</s>"});
  post["special_tokens"] = nlohmann::json::object();
  post["special_tokens"]["</s>"] = eos_entry;
  nlohmann::json model = nlohmann::json::object();
  model["type"] = "Unigram";
  model["unk_id"] = 2;
  model["vocab"] = vocab;
  model["byte_fallback"] = false;
  nlohmann::json tok = nlohmann::json::object();
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  tok["normalizer"] = nullptr;
  tok["pre_tokenizer"] = metaspace;
  tok["post_processor"] = post;
  tok["decoder"] = metaspace;
  tok["model"] = model;
  out.json_text = tok.dump(2) + "\n";
  return out;
}

}  // namespace zipmoe::synth
