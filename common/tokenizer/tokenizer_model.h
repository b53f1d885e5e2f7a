// Model: the "model" stage of a Hugging Face tokenizer.json (HF tokenizers semantics), which turns
// one pre-tokenized piece into token ids. Implementations: BpeModel (tokenizer_bpe.h, type "BPE")
// and UnigramModel (tokenizer_unigram.h, type "Unigram").
//
// Thread-safety: a parsed Model is immutable to its callers (any cache inside is locked), so every
// method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe::tokenizer {

// A model's ids index a table of tokens (id -> token), so a vocabulary's largest id stays below its
// entry count plus this gap, which no real vocabulary has: one id near 2^31 would otherwise make the
// table GiBs (found by fuzzing, tokenizer.json's BPE vocab and tiktoken.model's ranks alike).
inline constexpr int64_t kMaxIdGap = int64_t{1} << 20;

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `piece` (a pre-tokenized piece, valid UTF-8) to *ids.
  virtual Status Tokenize(std::string_view piece, std::vector<int32_t>* ids) const = 0;
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  // The token string of `id`, or nullptr if no vocabulary entry has that id.
  virtual const std::string* IdToToken(int32_t id) const = 0;
  // 1 + the largest vocabulary id (0 for an empty vocabulary).
  virtual int32_t id_limit() const = 0;
};

// Parses tokenizer.json's "model" object by its "type" ("BPE" when absent, or "Unigram").
// `where` names the file and JSON path in messages. Errors: kInvalidArgument naming an
// unsupported type (WordPiece, WordLevel); kCorruption as the models' FromJson.
Result<std::unique_ptr<Model>> ParseModel(const nlohmann::json& model, const std::string& where);

}  // namespace zipmoe::tokenizer
