// Structured outputs, the token level: which vocabulary entries may come next so that the text stays
// a prefix of a JSON value valid for the schema (json_grammar.h), applied to each step's logits as a
// mask (executor::TokenConstraint). Exact: a token is allowed iff the matcher accepts all of its bytes;
// EOS only once the value is complete. Incremental: the matcher advances by the sampled token only,
// and a step does not test every token from scratch. Inside a string the ordinary tokens (no '"',
// '\\', control bytes or partial UTF-8: ConstraintVocabulary's plain class, sorted by length in code
// points) are allowed as a class and only the rest are tried; elsewhere the vocabulary's byte trie is
// walked and pruned at the first byte the matcher refuses.
// Thread-safety: a ConstraintVocabulary is immutable and shared; a JsonConstraint belongs to one
// sequence (the batch loop's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "services/api/json_grammar.h"
#include "services/executor/generator.h"

namespace zipmoe::api {

class ConstraintVocabulary {
 public:
  // The bytes every token id in [0, model_vocab) adds to a text (decoded after an anchor token, so a
  // SentencePiece "▁" keeps its space); ids the tokenizer lacks get none (never allowed). Special
  // tokens get none either: they are allowed only where their text completes part of the grammar's
  // fixed texts (e.g. Mistral's [TOOL_CALLS] as a forced call's prefix, GLM's special </think> ending
  // the free thinking text), never inside a JSON value. `eos_ids`: the tokens that end a sequence
  // (allowed once the value is complete).
  static std::shared_ptr<const ConstraintVocabulary> Build(const Tokenizer& tokenizer, int64_t model_vocab,
                                                           std::vector<int32_t> eos_ids);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

 private:
  friend class JsonConstraint;
  struct TrieNode {
    int32_t first_child = -1, next_sibling = -1;
    int32_t tokens_begin = 0, tokens_end = 0;  // ids ending here: trie_tokens_[begin, end)
    uint8_t byte = 0;
  };
  std::vector<std::string> bytes_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  std::vector<int32_t> plain_ids_;   // sorted by code points
  std::vector<int32_t> plain_cps_;   // their code points
  std::vector<int32_t> other_ids_;   // non-empty tokens that are not plain
  std::vector<int32_t> eos_;
  std::vector<std::pair<int32_t, std::string>> specials_;  // special tokens (EOS aside) and their text
};

class JsonConstraint : public executor::TokenConstraint {
 public:
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const ConstraintVocabulary> vocab);

  // logits[t] = -inf for every token that cannot come next (vocab = the model's row length).
  void Mask(float* logits, int64_t vocab) override;
  void Accept(int32_t token) override;

  // The allowed set of the current state (for tests; Mask uses it).
  const std::vector<uint8_t>& Allowed();
  bool complete() const { return matcher_.Accepting(); }

 private:
  void Walk(int32_t node, const JsonMatcher& state);
  void Allow(int32_t id) {  // each id is marked at most once per step (trie, plain and other are disjoint)
    allowed_[static_cast<size_t>(id)] = 1;
    ++allowed_count_;
  }

  std::shared_ptr<const ConstraintVocabulary> vocab_;
  JsonMatcher matcher_;
  bool broken_ = false;  // a token outside the mask was accepted (not by us): only EOS from here
  // The free text before the grammar's free_until (json_grammar.h): the tokens holding the marker's
  // first byte (tried one by one) and every other non-empty token (allowed as a class), made once.
  void AllowFreeText();
  bool free_classes_ready_ = false;
  std::vector<int32_t> free_marked_ids_;
  std::vector<uint8_t> free_allowed_;
  int64_t free_allowed_count_ = 0;
  std::vector<uint8_t> allowed_;
  int64_t allowed_count_ = 0;  // tokens Allowed() marked this step, EOS aside
};

}  // namespace zipmoe::api
