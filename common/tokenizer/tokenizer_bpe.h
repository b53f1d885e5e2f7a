// BpeModel: the "model" of a Hugging Face tokenizer.json with type "BPE" (HF tokenizers semantics).
//
// Encodes one pre-tokenized piece: the piece's characters are looked up in the vocabulary
// (continuing_subword_prefix before all but the first, end_of_word_suffix after the last), a
// character not in the vocabulary becomes its "<0xXX>" byte tokens (byte_fallback) or the unknown
// token (unk_token, fused with neighbouring unknowns if fuse_unk) or is dropped (neither set, as
// HF does); then pairs are merged by merge rank, lowest first and leftmost among equal ranks
// (Sennrich et al. 2016, as GPT-2). With ignore_merges, a piece that is itself in the vocabulary is
// one token. BPE dropout is ignored (inference never uses it).
//
// Thread-safety: Tokenize may be called from many threads at once; its word cache is guarded by a
// mutex. Immutable otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "common/tokenizer/tokenizer_model.h"

namespace zipmoe::tokenizer {

class BpeModel : public Model {
 public:
  // Parses tokenizer.json's "model" object. `where` names the file and JSON path in messages.
  // Errors: kCorruption if the type is not "BPE", vocab/merges are malformed, a vocab id is negative
  // or beyond the entry count + 2^20, or a merge refers to a token that is not in the vocabulary
  // (the token is named).
  static Result<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model,
                                                    const std::string& where);

  // Appends the ids of `piece` (a pre-tokenized piece, valid UTF-8) to *ids.
  // Errors: kCorruption if unk_token is needed but not in the vocabulary.
  Status Tokenize(std::string_view piece, std::vector<int32_t>* ids) const override;

  std::optional<int32_t> TokenToId(std::string_view token) const override;
  // The token string of `id`, or nullptr if no vocabulary entry has that id.
  const std::string* IdToToken(int32_t id) const override;
  // 1 + the largest vocabulary id (0 for an empty vocabulary).
  int32_t id_limit() const override { return static_cast<int32_t>(id_to_token_.size()); }
  size_t n_merges() const { return merges_.size(); }

 private:
  struct MergeTarget {
    int32_t rank = 0;
    int32_t new_id = 0;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Initial symbols of `piece` (characters, byte fallback, unknowns), then the merge loop.
  Status MergeWord(std::string_view piece, std::vector<int32_t>* ids) const;

  // Constant after FromJson.
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // "" where no token has the id
  std::vector<bool> id_used_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  std::optional<std::string> unk_token_;
  std::optional<std::string> continuing_subword_prefix_;
  std::optional<std::string> end_of_word_suffix_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // id of "<0xXX>" for each byte, -1 if absent

  // Word cache: piece -> ids, for pieces shorter than kMaxCachedPieceBytes.
  mutable Mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_ ZM_GUARDED_BY(cache_mu_);
};

}  // namespace zipmoe::tokenizer
