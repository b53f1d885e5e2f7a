// UnigramModel: the "model" of a Hugging Face tokenizer.json with type "Unigram", the SentencePiece
// unigram language model (Kudo 2018) as T5, Switch Transformers, mT5, XLNet and ALBERT ship it.
//
// Encodes one pre-tokenized piece by Viterbi over its byte positions: each vocabulary piece that
// starts at a character boundary adds its log-probability score; a character that no single-character
// piece covers is an "unknown" edge of score min_score - 10 (min_score: the lowest vocabulary score,
// SentencePiece's kUnkPenalty). The best path wins; on equal scores the edge that starts earliest
// (HF tokenizers' encode_optimized and transformers.js agree on this). Consecutive unknown
// characters are fused into one string (HF's Unigram always fuses), which becomes
//   its id, if that string happens to be a vocabulary piece;
//   else its UTF-8 bytes as "<0xXX>" pieces, if byte_fallback and every byte piece exists;
//   else unk_id.
// As HF tokenizers (not transformers.js, which gives it min_score - 10), a vocabulary piece equal
// to the unk token keeps its own score when the text spells it out.
//
// Thread-safety: immutable after FromJson; Tokenize may be called from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/tokenizer/tokenizer_model.h"

namespace zipmoe::tokenizer {

class UnigramModel : public Model {
 public:
  // Parses tokenizer.json's "model" object: {"type": "Unigram", "vocab": [[piece, score], ...],
  // "unk_id": int or null, "byte_fallback": bool}. Ids are the vocab positions; a piece listed
  // twice keeps its last id (as HF). Errors: kCorruption naming `where` and the field: not type
  // "Unigram", vocab not an array of [string, number] pairs, unk_id outside the vocabulary, more
  // than 2^31 - 1 pieces.
  static Result<std::unique_ptr<UnigramModel>> FromJson(const nlohmann::json& model,
                                                        const std::string& where);

  // Appends the ids of `piece` (valid UTF-8; "" gives none) to *ids. Errors: kCorruption if a
  // character has no single-character piece and the model has no unk_id (HF's MissingUnkId, also
  // with byte_fallback).
  Status Tokenize(std::string_view piece, std::vector<int32_t>* ids) const override;

  // The Viterbi segmentation of `piece` as strings, unknown runs fused (before the id lookup), into
  // *out. Errors: as Tokenize.
  Status Segment(std::string_view piece, std::vector<std::string>* out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const override;
  const std::string* IdToToken(int32_t id) const override;
  int32_t id_limit() const override { return static_cast<int32_t>(pieces_.size()); }
  double score(int32_t id) const { return scores_[static_cast<size_t>(id)]; }
  double unk_score() const { return min_score_ - kUnkPenalty; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  bool byte_fallback() const { return byte_fallback_; }

  // SentencePiece's penalty of an unknown character below the lowest piece score.
  static constexpr double kUnkPenalty = 10.0;

 private:
  // Byte trie of the pieces: node 0 is the root; node_token_[n] is the id of the piece that ends at
  // node n, or -1.
  int32_t Child(int32_t node, unsigned char byte) const;

  // Constant after FromJson.
  std::vector<std::string> pieces_;  // by id
  std::vector<double> scores_;       // by id
  std::unordered_map<std::string, int32_t> vocab_;
  std::array<int32_t, 256> root_children_{};
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child, below the root
  std::vector<int32_t> node_token_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = 0.0;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xXX>" for each byte, -1 if absent
};

}  // namespace zipmoe::tokenizer
