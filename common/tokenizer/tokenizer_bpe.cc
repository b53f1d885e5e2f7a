// BPE model: vocabulary/merges parsing, initial symbols with byte fallback, rank-ordered merging.
#include "common/tokenizer/tokenizer_bpe.h"

#include <algorithm>
#include <cstdint>
#include <queue>
#include <utility>

#include <fmt/format.h>

#include "common/tokenizer/tokenizer_json.h"
#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {
namespace {

using nlohmann::json;

// Word cache limits: pieces of at least kMaxCachedPieceBytes are never cached, and once the cache
// holds kWordCacheCapacity pieces new pieces are no longer added (as HF's BPE cache).
constexpr size_t kMaxCachedPieceBytes = 256;
constexpr size_t kWordCacheCapacity = 65536;

// A candidate merge of the symbol at `pos` with its right neighbour.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};
struct CandidateAfter {  // min-heap order: lowest rank, then leftmost position
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

Result<std::optional<std::string>> OptionalString(const json& model, const char* key,
                                                  const std::string& where) {
  if (!model.contains(key) || model[key].is_null()) return std::optional<std::string>();
  ZM_ASSIGN_OR_RETURN(std::string value, GetString(model, key, where));
  return std::optional<std::string>(std::move(value));
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& model, const std::string& where) {
  ZM_ASSIGN_OR_RETURN(std::string type, GetStringOr(model, "type", "BPE", where));
  if (type == "WordPiece" || type == "WordLevel") {
    return Status::InvalidArgument(fmt::format("{}.type: model type '{}' is not supported (BPE and Unigram only)", where, type));
  }
  if (type != "BPE") return Status::Corruption(fmt::format("{}.type: unknown model type '{}'", where, type));
  auto bpe = std::make_unique<BpeModel>();

  ZM_ASSIGN_OR_RETURN(const json* vocab, GetField(model, "vocab", where));
  if (!vocab->is_object()) {
    return Status::Corruption(fmt::format("{}.vocab: expected an object, found {}", where, vocab->type_name()));
  }
  bpe->vocab_.reserve(vocab->size());
  // id_to_token_ is indexed by id: ids stay below the entry count plus kMaxIdGap (tokenizer_model.h).
  const int64_t max_id = std::min<int64_t>(INT32_MAX, static_cast<int64_t>(vocab->size()) + kMaxIdGap);
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > max_id) {
      return Status::Corruption(fmt::format("{}.vocab: token '{}' has id {}, expected an integer in [0, {}]",
                                            where, Clip(it.key()), Clip(it->dump()), max_id));
    }
    const auto id = static_cast<int32_t>(it->get<int64_t>());
    bpe->vocab_[it.key()] = id;
    if (static_cast<size_t>(id) >= bpe->id_to_token_.size()) {
      bpe->id_to_token_.resize(static_cast<size_t>(id) + 1);
      bpe->id_used_.resize(static_cast<size_t>(id) + 1, false);
    }
    bpe->id_to_token_[id] = it.key();
    bpe->id_used_[id] = true;
  }

  ZM_ASSIGN_OR_RETURN(bpe->unk_token_, OptionalString(model, "unk_token", where));
  ZM_ASSIGN_OR_RETURN(bpe->continuing_subword_prefix_,
                      OptionalString(model, "continuing_subword_prefix", where));
  ZM_ASSIGN_OR_RETURN(bpe->end_of_word_suffix_, OptionalString(model, "end_of_word_suffix", where));
  ZM_ASSIGN_OR_RETURN(bpe->byte_fallback_, GetBoolOr(model, "byte_fallback", false, where));
  ZM_ASSIGN_OR_RETURN(bpe->fuse_unk_, GetBoolOr(model, "fuse_unk", false, where));
  ZM_ASSIGN_OR_RETURN(bpe->ignore_merges_, GetBoolOr(model, "ignore_merges", false, where));

  bpe->byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    auto it = bpe->vocab_.find(fmt::format("<0x{:02X}>", b));
    if (it != bpe->vocab_.end()) bpe->byte_ids_[b] = it->second;
  }

  const json empty = json::array();
  const json& merges = model.contains("merges") && !model["merges"].is_null() ? model["merges"] : empty;
  if (!merges.is_array()) {
    return Status::Corruption(fmt::format("{}.merges: expected an array, found {}", where, merges.type_name()));
  }
  const size_t prefix_len = bpe->continuing_subword_prefix_ ? bpe->continuing_subword_prefix_->size() : 0;
  bpe->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) {
        return Status::Corruption(fmt::format("{}.merges[{}]: '{}' is not two tokens separated by a space", where, rank, Clip(s)));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return Status::Corruption(fmt::format("{}.merges[{}]: expected \"a b\" or [\"a\", \"b\"], found {}", where, rank, Clip(m.dump())));
    }
    const std::string merged = left + right.substr(std::min(prefix_len, right.size()));
    int32_t ids[3];
    const std::string* parts[3] = {&left, &right, &merged};
    for (int k = 0; k < 3; ++k) {
      auto it = bpe->vocab_.find(*parts[k]);
      if (it == bpe->vocab_.end()) {
        return Status::Corruption(fmt::format("{}.merges[{}]: token '{}' of merge '{} {}' is not in the vocab",
                                              where, rank, Clip(*parts[k]), Clip(left), Clip(right)));
      }
      ids[k] = it->second;
    }
    bpe->merges_[PairKey(ids[0], ids[1])] = MergeTarget{static_cast<int32_t>(rank), ids[2]};
  }
  return bpe;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_used_[id]) return nullptr;
  return &id_to_token_[id];
}

Status BpeModel::Tokenize(std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return Status::Ok();
  if (ignore_merges_) {
    if (std::optional<int32_t> id = TokenToId(piece)) {
      ids->push_back(*id);
      return Status::Ok();
    }
  }
  const bool cacheable = piece.size() < kMaxCachedPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    MutexLock lock(&cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return Status::Ok();
    }
  }
  std::vector<int32_t> word;
  ZM_RETURN_IF_ERROR(MergeWord(piece, &word));
  ids->insert(ids->end(), word.begin(), word.end());
  if (cacheable) {
    MutexLock lock(&cache_mu_);
    if (cache_.size() < kWordCacheCapacity) cache_.emplace(std::move(key), std::move(word));
  }
  return Status::Ok();
}

Status BpeModel::MergeWord(std::string_view piece, std::vector<int32_t>* ids) const {
  // 1. Initial symbols, one per character (or per byte with byte fallback).
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  std::optional<int32_t> pending_unk;
  size_t pos = 0;
  std::string s;
  while (pos < piece.size()) {
    const size_t begin = pos;
    pos += std::min(Utf8LeadLength(static_cast<unsigned char>(piece[pos])), piece.size() - pos);
    s.clear();
    if (begin != 0 && continuing_subword_prefix_) s += *continuing_subword_prefix_;
    s.append(piece.data() + begin, pos - begin);
    if (pos == piece.size() && end_of_word_suffix_) s += *end_of_word_suffix_;

    auto it = vocab_.find(s);
    if (it != vocab_.end()) {
      if (pending_unk) symbols.push_back(*pending_unk);
      pending_unk.reset();
      symbols.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char ch : s) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(ch)] >= 0;
      if (all_bytes) {
        if (pending_unk) symbols.push_back(*pending_unk);
        pending_unk.reset();
        for (char ch : s) symbols.push_back(byte_ids_[static_cast<unsigned char>(ch)]);
        continue;
      }
    }
    if (!unk_token_) continue;  // no unk token: the character is dropped, as HF does
    auto unk = vocab_.find(*unk_token_);
    if (unk == vocab_.end()) {
      return Status::Corruption(fmt::format("unk_token '{}' is not in the vocab", *unk_token_));
    }
    if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
    pending_unk = unk->second;
  }
  if (pending_unk) symbols.push_back(*pending_unk);

  // 2. Merge loop: a linked list over `symbols` and a heap of candidate merges.
  const auto n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> removed(n, false);
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> heap;
  auto push_candidate = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges_.find(PairKey(symbols[left], symbols[next[left]]));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  for (int32_t i = 0; i + 1 < n; ++i) push_candidate(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    if (removed[top.pos] || next[top.pos] < 0) continue;
    const int32_t right = next[top.pos];
    auto it = merges_.find(PairKey(symbols[top.pos], symbols[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id || it->second.rank != top.rank) continue;
    symbols[top.pos] = top.new_id;
    removed[right] = true;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push_candidate(prev[top.pos]);
    push_candidate(top.pos);
  }
  for (int32_t i = 0; i < n; ++i) {
    if (!removed[i]) ids->push_back(symbols[i]);
  }
  return Status::Ok();
}

}  // namespace zipmoe::tokenizer
