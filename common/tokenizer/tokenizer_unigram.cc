// Unigram model: vocabulary parsing, the byte trie, Viterbi segmentation, unknown fusion and byte
// fallback (see tokenizer_unigram.h). Follows HF tokenizers' models/unigram/model.rs
// (encode_optimized, tokenize).
#include "common/tokenizer/tokenizer_unigram.h"

#include <algorithm>
#include <climits>
#include <utility>

#include <fmt/format.h>

#include "common/tokenizer/tokenizer_json.h"
#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {
namespace {

using nlohmann::json;

// Length in bytes of the UTF-8 character that starts with byte `lead` (1 for a stray byte, which
// valid UTF-8 never has at a character boundary).
size_t Utf8CharLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// The best path that ends at one byte position: its last edge and total score.
struct BestPath {
  int32_t id = -1;          // token id of the last edge; -1 for an unknown character
  double score = 0.0;       // sum of the edge scores from position 0
  int64_t starts_at = -1;   // start of the last edge; -1 while no path reaches here
};

}  // namespace

Result<std::unique_ptr<UnigramModel>> UnigramModel::FromJson(const json& model, const std::string& where) {
  ZM_ASSIGN_OR_RETURN(std::string type, GetString(model, "type", where));
  if (type != "Unigram") return Status::Corruption(fmt::format("{}.type: expected 'Unigram', found '{}'", where, type));
  auto unigram = std::make_unique<UnigramModel>();
  ZM_ASSIGN_OR_RETURN(const json* vocab, GetField(model, "vocab", where));
  if (!vocab->is_array()) {
    return Status::Corruption(fmt::format("{}.vocab: expected an array of [piece, score], found {}", where,
                                          vocab->type_name()));
  }
  if (vocab->size() > static_cast<size_t>(INT32_MAX)) {
    return Status::Corruption(fmt::format("{}.vocab: {} pieces, at most 2^31 - 1 allowed", where, vocab->size()));
  }
  unigram->root_children_.fill(-1);
  unigram->byte_ids_.fill(-1);
  unigram->node_token_.push_back(-1);  // the root
  unigram->pieces_.reserve(vocab->size());
  unigram->scores_.reserve(vocab->size());
  unigram->vocab_.reserve(vocab->size());
  for (size_t i = 0; i < vocab->size(); ++i) {
    const json& entry = (*vocab)[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number()) {
      return Status::Corruption(fmt::format("{}.vocab[{}]: expected [piece, score], found {}", where, i,
                                            entry.dump().substr(0, 80)));
    }
    std::string piece = entry[0].get<std::string>();
    if (!IsValidUtf8(piece)) return Status::Corruption(fmt::format("{}.vocab[{}]: piece is not valid UTF-8", where, i));
    const auto id = static_cast<int32_t>(i);
    const double score = entry[1].get<double>();
    unigram->min_score_ = i == 0 ? score : std::min(unigram->min_score_, score);
    unigram->vocab_[piece] = id;  // a repeated piece keeps its last id, as HF's token_to_ids
    // Trie insertion (the empty piece can never match: HF's trie yields only non-empty prefixes).
    int32_t node = 0;
    for (unsigned char byte : piece) {
      int32_t child = unigram->Child(node, byte);
      if (child < 0) {
        child = static_cast<int32_t>(unigram->node_token_.size());
        unigram->node_token_.push_back(-1);
        if (node == 0) {
          unigram->root_children_[byte] = child;
        } else {
          unigram->edges_[(static_cast<uint64_t>(node) << 8) | byte] = child;
        }
      }
      node = child;
    }
    if (node != 0) unigram->node_token_[node] = id;
    unigram->pieces_.push_back(std::move(piece));
    unigram->scores_.push_back(score);
  }
  ZM_ASSIGN_OR_RETURN(int64_t unk_id, GetIntOr(model, "unk_id", -1, where));
  if (model.contains("unk_id") && !model["unk_id"].is_null()) {
    if (unk_id < 0 || unk_id >= static_cast<int64_t>(vocab->size())) {
      return Status::Corruption(fmt::format("{}.unk_id: {} is not an id of the {}-piece vocab", where, unk_id,
                                            vocab->size()));
    }
    unigram->unk_id_ = static_cast<int32_t>(unk_id);
  }
  ZM_ASSIGN_OR_RETURN(unigram->byte_fallback_, GetBoolOr(model, "byte_fallback", false, where));
  for (int b = 0; b < 256; ++b) {
    auto it = unigram->vocab_.find(fmt::format("<0x{:02X}>", b));
    if (it != unigram->vocab_.end()) unigram->byte_ids_[b] = it->second;
  }
  return unigram;
}

int32_t UnigramModel::Child(int32_t node, unsigned char byte) const {
  if (node == 0) return root_children_[byte];
  auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

Status UnigramModel::Segment(std::string_view piece, std::vector<std::string>* out) const {
  out->clear();
  const size_t size = piece.size();
  if (size == 0) return Status::Ok();
  const double unk_score = min_score_ - kUnkPenalty;
  std::vector<BestPath> best(size + 1);
  size_t start = 0;
  while (start < size) {
    const double score_here = best[start].score;
    const size_t char_len = std::min(Utf8CharLength(static_cast<unsigned char>(piece[start])), size - start);
    bool has_single_char = false;
    int32_t node = 0;
    for (size_t end = start; end < size; ++end) {
      node = Child(node, static_cast<unsigned char>(piece[end]));
      if (node < 0) break;
      const int32_t id = node_token_[node];
      if (id < 0) continue;
      const size_t key_pos = end + 1;
      const double candidate = score_here + scores_[id];
      BestPath& target = best[key_pos];
      if (target.starts_at < 0 || candidate > target.score) target = {id, candidate, static_cast<int64_t>(start)};
      if (key_pos - start == char_len) has_single_char = true;
    }
    if (!has_single_char) {
      if (!unk_id_) {
        return Status::Corruption(fmt::format(
            "Unigram model: '{}' is not in the vocabulary and the model has no unk_id",
            std::string(piece.substr(start, char_len))));
      }
      BestPath& target = best[start + char_len];
      const double candidate = score_here + unk_score;
      if (target.starts_at < 0 || candidate > target.score) target = {*unk_id_, candidate, static_cast<int64_t>(start)};
    }
    start += char_len;
  }
  // Backtrack from the end; runs of unk_id edges (unknown characters, or the unk piece itself, as
  // HF compares ids) become one string.
  size_t end = size;
  size_t unknown_begin = size;  // start of the pending unknown run; == unknown_end while none
  size_t unknown_end = size;
  while (end > 0) {
    const BestPath& node_at = best[end];
    const auto begin = static_cast<size_t>(node_at.starts_at);
    if (unk_id_ && node_at.id == *unk_id_) {
      if (unknown_begin == unknown_end) unknown_end = end;
      unknown_begin = begin;
    } else {
      if (unknown_begin != unknown_end) out->emplace_back(piece.substr(unknown_begin, unknown_end - unknown_begin));
      unknown_begin = unknown_end = begin;
      out->emplace_back(piece.substr(begin, end - begin));
    }
    end = begin;
  }
  if (unknown_begin != unknown_end) out->emplace_back(piece.substr(unknown_begin, unknown_end - unknown_begin));
  std::reverse(out->begin(), out->end());
  return Status::Ok();
}

Status UnigramModel::Tokenize(std::string_view piece, std::vector<int32_t>* ids) const {
  std::vector<std::string> tokens;
  ZM_RETURN_IF_ERROR(Segment(piece, &tokens));
  for (const std::string& token : tokens) {
    auto it = vocab_.find(token);
    if (it != vocab_.end()) {
      ids->push_back(it->second);
    } else if (byte_fallback_ && std::all_of(token.begin(), token.end(), [&](char c) {
                 return byte_ids_[static_cast<unsigned char>(c)] >= 0;
               })) {
      for (char c : token) ids->push_back(byte_ids_[static_cast<unsigned char>(c)]);
    } else {
      ids->push_back(*unk_id_);  // Segment made `token` from unk_id edges, so unk_id is set
    }
  }
  return Status::Ok();
}

std::optional<int32_t> UnigramModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* UnigramModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return nullptr;
  return &pieces_[static_cast<size_t>(id)];
}

}  // namespace zipmoe::tokenizer
