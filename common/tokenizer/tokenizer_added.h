// Added tokens of a Hugging Face tokenizer.json ("added_tokens") and the splitting of input text
// on them, before normalization and pre-tokenization (HF AddedVocabulary semantics).
//
// Matching is leftmost-longest over the token contents (as HF's aho-corasick with
// MatchKind::LeftmostLongest): the match starting earliest wins, the longest among those. Then
//   single_word: a match touching a word character ([alphanumeric or '_']) on either side is
//                skipped, and the search resumes after it;
//   lstrip / rstrip: the match swallows the whitespace before / after it.
// Immutable after construction: Split may be called from many threads at once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zipmoe::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;      // skipped by Decode(skip_special_tokens)
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;   // matched in normalized text (else in the raw input)
};

// One part of a text split on added tokens: plain text or one added token.
struct AddedSplit {
  size_t begin = 0;
  size_t end = 0;
  int32_t token_index = -1;  // index into the AddedToken list; -1 for plain text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { root_children_.fill(-1); nodes_.emplace_back(); }

  // Matches `pattern` (non-empty; usually the token content, or its normalized form) as token
  // `token_index`. A later pattern equal to an earlier one replaces it.
  void Add(std::string_view pattern, int32_t token_index);
  bool empty() const { return nodes_.size() == 1; }

  // Splits valid UTF-8 `text`; the parts cover it in order, plain parts are never empty.
  std::vector<AddedSplit> Split(std::string_view text, const std::vector<AddedToken>& tokens) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node index
    int32_t token_index = -1;
  };
  int32_t Child(int32_t node, unsigned char byte) const;
  // Length and token of the longest pattern starting at text[pos], or {0, -1}.
  std::pair<size_t, int32_t> LongestMatch(std::string_view text, size_t pos) const;

  std::vector<Node> nodes_;                 // nodes_[0] is the root
  std::array<int32_t, 256> root_children_;  // fast first-byte table of the root
};

}  // namespace zipmoe::tokenizer
