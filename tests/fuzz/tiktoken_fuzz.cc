// libFuzzer target: the tiktoken tokenizer's parsers and merge (common/tokenizer/tokenizer_tiktoken.h).
// The first byte picks what the rest is:
//   0: a tiktoken.model rank file -> TiktokenModel::Parse; a model that loads tokenizes the file's own
//      bytes: every id has a token, and a lone byte always tokenizes;
//   1: Python source -> ExtractTiktokenPattern, ExtractPythonInt, and TranslateClassSetOperations of
//      the pattern found (and of the source itself);
//   2: a text -> SplitLongRuns with limits from the next two bytes: the pieces are contiguous, cover
//      the text and are valid UTF-8;
//   3: a piece tokenized with a fixed rank table (every byte, then merges of common pairs): the ids'
//      bytes concatenate to the piece and equal tiktoken's byte_pair_merge as its Python/Rust scan
//      does it (the lowest-ranked adjacent concatenation, leftmost on ties, until none is a token).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/tokenizer/tokenizer_tiktoken.h"
#include "common/tokenizer/tokenizer_unicode.h"
#include "tests/common/tiktoken_test_util.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using zipmoe::fuzz::Fail;
using zipmoe::tokenizer::TiktokenModel;
using zipmoe::tokenizer::test::Base64;

// The fixed rank table of mode 3: ranks 0-255 are the bytes in a shuffled order (so byte value and
// rank differ), then merges built from pairs of earlier tokens.
struct FixedTable {
  std::vector<std::string> bytes_of_rank;
  std::unordered_map<std::string, int32_t> rank_of;
  std::unique_ptr<TiktokenModel> model;
};

const FixedTable& Table() {
  static const FixedTable* table = [] {
    auto* t = new FixedTable;
    for (int i = 0; i < 256; ++i) t->bytes_of_rank.push_back(std::string(1, char((i * 167 + 13) & 255)));
    const char* merges[] = {"th", "he", "the", "in", "an", " t", " the", "er", "aa", "aaa", "aaaa", "ab", "ba",
                            "aba", "bab", "  ", "    ", "\xc3\xa9", "\xe4\xbd", "\xe4\xbd\xa0", "e ", "re", "ing",
                            "on", "..", "...", "ll", "hell", "hello", "o ", " w", "or", "ld", "wor", "world"};
    for (const char* m : merges) t->bytes_of_rank.push_back(m);
    std::string file;
    for (size_t r = 0; r < t->bytes_of_rank.size(); ++r) {
      t->rank_of.emplace(t->bytes_of_rank[r], static_cast<int32_t>(r));
      file += Base64(t->bytes_of_rank[r]) + " " + std::to_string(r) + "\n";
    }
    auto model = TiktokenModel::Parse(file, "fuzz/fixed.tiktoken");
    if (!model.ok()) Fail("the fixed rank table does not load: " + model.status().ToString());
    t->model = std::move(*model);
    return t;
  }();
  return *table;
}

// tiktoken's byte_pair_merge as a plain rescan after every merge.
std::vector<int32_t> ScanMerge(const FixedTable& t, std::string_view piece) {
  if (auto it = t.rank_of.find(std::string(piece)); it != t.rank_of.end()) return {it->second};
  std::vector<std::string> parts;
  for (char c : piece) parts.push_back(std::string(1, c));
  for (;;) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = t.rank_of.find(parts[i] + parts[i + 1]);
      if (it != t.rank_of.end() && it->second < best) best = it->second, at = i;
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(t.rank_of.at(p));
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (mode) {
    case 0: {
      auto model = TiktokenModel::Parse(rest, "fuzz/tiktoken.model");
      if (!model.ok()) return 0;
      const TiktokenModel& m = **model;
      std::vector<int32_t> ids;
      const std::string_view piece = rest.substr(0, 256);
      if (!m.Tokenize(piece, &ids).ok()) Fail("Tokenize failed with a loaded model (every byte has a rank)");
      if (ids.size() > piece.size()) Fail("more ids than bytes");
      for (int32_t id : ids)
        if (id < 0 || id >= m.id_limit() || m.IdToToken(id) == nullptr) Fail("an id without a token");
      for (int b = 0; b < 256; b += 37) {
        ids.clear();
        const char byte = static_cast<char>(b);
        if (!m.Tokenize(std::string_view(&byte, 1), &ids).ok() || ids.size() != 1) Fail("a lone byte is not one id");
        const std::string* token = m.IdToToken(ids[0]);
        if (token == nullptr || m.TokenToId(*token) != ids[0]) Fail("IdToToken / TokenToId disagree");
      }
      return 0;
    }
    case 1: {
      for (const char* name : {"num_reserved_special_tokens", "TIKTOKEN_MAX_ENCODE_CHARS"})
        (void)zipmoe::tokenizer::ExtractPythonInt(rest, name);
      (void)zipmoe::tokenizer::TranslateClassSetOperations(rest, "fuzz/source");
      auto pattern = zipmoe::tokenizer::ExtractTiktokenPattern(rest, "fuzz/tokenization_fuzz.py");
      if (pattern.ok()) (void)zipmoe::tokenizer::TranslateClassSetOperations(*pattern, "fuzz/pat_str");
      return 0;
    }
    case 2: {
      if (rest.size() < 2) return 0;
      const int64_t max_chars = uint8_t(rest[0]) % 17;
      const int64_t max_run = uint8_t(rest[1]) % 9;
      std::string_view text = rest.substr(2);
      if (!zipmoe::tokenizer::IsValidUtf8(text)) return 0;
      const auto pieces = zipmoe::tokenizer::SplitLongRuns(text, max_chars, max_run);
      if (pieces.empty()) Fail("SplitLongRuns returned nothing");
      size_t at = 0;
      for (std::string_view p : pieces) {
        if (p.data() != text.data() + at) Fail("SplitLongRuns pieces are not contiguous");
        if (!zipmoe::tokenizer::IsValidUtf8(p)) Fail("SplitLongRuns cut inside a character");
        at += p.size();
      }
      if (at != text.size()) Fail("SplitLongRuns pieces do not cover the text");
      return 0;
    }
    default: {
      const FixedTable& t = Table();
      const std::string_view piece = rest.substr(0, 512);
      std::vector<int32_t> ids;
      if (!t.model->Tokenize(piece, &ids).ok()) Fail("Tokenize failed on the fixed table");
      std::string joined;
      for (int32_t id : ids) {
        if (id < 0 || static_cast<size_t>(id) >= t.bytes_of_rank.size()) Fail("an id outside the fixed table");
        joined += t.bytes_of_rank[static_cast<size_t>(id)];
      }
      if (joined != piece) Fail("the ids' bytes do not concatenate to the piece");
      if (ids != ScanMerge(t, piece)) Fail("the heap merge differs from tiktoken's scan");
      return 0;
    }
  }
}
