// Leftmost-longest splitting of text on added tokens (see tokenizer_added.h).
#include "common/tokenizer/tokenizer_added.h"

#include <algorithm>

#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {
namespace {

bool IsWordCharacter(char32_t cp) { return cp == '_' || IsAlphanumeric(cp); }

// Start of the UTF-8 character that ends at text[end - 1].
size_t PreviousCharStart(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

}  // namespace

int32_t AddedTokenMatcher::Child(int32_t node, unsigned char byte) const {
  if (node == 0) return root_children_[byte];
  for (const auto& [b, child] : nodes_[node].children) {
    if (b == byte) return child;
  }
  return -1;
}

void AddedTokenMatcher::Add(std::string_view pattern, int32_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char ch : pattern) {
    const auto byte = static_cast<unsigned char>(ch);
    int32_t child = Child(node, byte);
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) {
        root_children_[byte] = child;
      } else {
        nodes_[node].children.emplace_back(byte, child);
      }
    }
    node = child;
  }
  nodes_[node].token_index = token_index;
}

std::pair<size_t, int32_t> AddedTokenMatcher::LongestMatch(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best(0, -1);
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token_index >= 0) best = {i + 1 - pos, nodes_[node].token_index};
  }
  return best;
}

std::vector<AddedSplit> AddedTokenMatcher::Split(std::string_view text,
                                                 const std::vector<AddedToken>& tokens) const {
  std::vector<AddedSplit> splits;
  size_t plain_start = 0;  // start of the text not yet assigned to a split
  size_t pos = 0;
  while (pos < text.size()) {
    if (root_children_[static_cast<unsigned char>(text[pos])] < 0) {
      ++pos;
      continue;
    }
    const auto [length, token_index] = LongestMatch(text, pos);
    if (token_index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens[token_index];
    size_t start = pos, stop = pos + length;
    if (token.single_word) {
      size_t after = stop;
      const bool word_before =
          start > 0 && [&] {
            size_t p = PreviousCharStart(text, start);
            return IsWordCharacter(NextCodePoint(text, &p));
          }();
      const bool word_after = stop < text.size() && IsWordCharacter(NextCodePoint(text, &after));
      if (word_before || word_after) {
        pos = stop;  // the match is consumed, as HF's find_iter does
        continue;
      }
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > plain_start) {
        size_t p = PreviousCharStart(text, new_start);
        const size_t char_start = p;
        if (!IsWhitespace(NextCodePoint(text, &p))) break;
        new_start = char_start;
      }
      start = new_start;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t p = stop;
        if (!IsWhitespace(NextCodePoint(text, &p))) break;
        stop = p;
      }
    }
    if (plain_start < start) splits.push_back({plain_start, start, -1});
    splits.push_back({start, stop, token_index});
    plain_start = stop;
    pos = stop;
  }
  if (plain_start < text.size()) splits.push_back({plain_start, text.size(), -1});
  return splits;
}

}  // namespace zipmoe::tokenizer
