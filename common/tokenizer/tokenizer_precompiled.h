// The "Precompiled" normalizer of a Hugging Face tokenizer.json: SentencePiece's compiled
// normalization rules (`precompiled_charsmap`, e.g. nmt_nfkc in every T5 / Switch Transformers
// tokenizer), applied with the semantics of HF tokenizers' Precompiled normalizer.
//
// The charsmap (base64 in tokenizer.json) is SentencePiece's binary format (normalizer.cc,
// DecodePrecompiledCharsMap): a little-endian uint32 trie size in bytes, the trie (a Darts-clone
// double array of uint32 units over UTF-8 bytes; each key maps to a byte offset), then a blob of
// NUL-terminated replacement strings that the offsets point into.
// Normalization (HF semantics, which differ from SentencePiece's own longest-match loop): the text is
// walked one extended grapheme cluster at a time (UAX #29, libutf8proc); a cluster shorter than 6
// bytes with a trie match at its start is replaced as a whole by the replacement of the *shortest*
// matching key; otherwise each code point of the cluster is replaced by its shortest match, or kept.
// Thread-safety: immutable after Parse; Normalize is const and reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace zipmoe::tokenizer {

class PrecompiledCharsMap {
 public:
  // Parses the decoded charsmap bytes. `where` names the file and JSON path in messages.
  // Errors: kCorruption (shorter than its header, a trie size that is not a multiple of 4 or runs
  // past the end, an empty trie, a replacement blob that does not end in NUL).
  static Result<PrecompiledCharsMap> Parse(std::string_view bytes, const std::string& where);
  // Parses tokenizer.json's base64 `precompiled_charsmap` (standard alphabet, '=' padding).
  // Errors: kCorruption naming `where` for bad base64, then as Parse.
  static Result<PrecompiledCharsMap> ParseBase64(std::string_view base64, const std::string& where);

  // The replacement of the shortest key that is a prefix of `chunk`, or nullopt (no key matches).
  // A NUL byte in `chunk` ends the search, as in SentencePiece.
  std::optional<std::string_view> Transform(std::string_view chunk) const;
  // Normalizes valid UTF-8 `text` (see the file comment).
  std::string Normalize(std::string_view text) const;

 private:
  PrecompiledCharsMap() = default;
  std::vector<uint32_t> trie_;  // Darts-clone units
  std::string normalized_;      // replacement strings, each NUL-terminated
};

// Standard base64 (RFC 4648 §4) to bytes; whitespace is not allowed. nullopt for bad input.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace zipmoe::tokenizer
