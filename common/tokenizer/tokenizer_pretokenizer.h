// Normalizers and pre-tokenizers of a Hugging Face tokenizer.json (HF tokenizers semantics).
//
// A normalizer rewrites the text of one input segment (the text between added tokens); a
// pre-tokenizer splits it into pieces that the BPE model encodes independently. Supported:
//   normalizer:    NFC, NFD, NFKC, NFKD (libutf8proc), Lowercase, Strip, Prepend,
//                  Replace (String or Regex pattern), Precompiled (SentencePiece charsmap,
//                  tokenizer_precompiled.h), Sequence
//   pre_tokenizer: ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern), Split (String or
//                  Regex pattern; behavior Removed/Isolated/MergedWithPrevious/MergedWithNext/
//                  Contiguous; invert), Metaspace (replacement, prepend_scheme always/first/never,
//                  split; legacy add_prefix_space), Digits, Punctuation, Whitespace,
//                  WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, Sequence
// Anything else (e.g. BertNormalizer, UnicodeScripts) is rejected when parsing.
//
// Parsed objects are immutable: callable from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/tokenizer/tokenizer_regex.h"

namespace zipmoe::tokenizer {

// A piece of text on its way through the pre-tokenizers.
struct Piece {
  std::string text;       // valid UTF-8
  bool at_start = false;  // begins at byte 0 of the input text (Metaspace prepend_scheme "first")
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites *text (valid UTF-8 in and out). Errors: kInternal from regex matching.
  virtual Status Normalize(std::string* text) const = 0;
};

// Parses a tokenizer.json "normalizer" value; JSON null gives nullptr (no normalization).
// `where` names the file and JSON path in messages. Errors: kInvalidArgument naming an
// unsupported type; kCorruption for a missing or mistyped field.
Result<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j, const std::string& where);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece further (in order); empty pieces are dropped. Errors: kInternal (regex).
  virtual Status PreTokenize(std::vector<Piece>* pieces) const = 0;
};

// Parses a tokenizer.json "pre_tokenizer" value; JSON null gives nullptr (the whole segment is
// one piece). Errors: as ParseNormalizer.
Result<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j,
                                                        const std::string& where);

// The GPT-2 pre-tokenizer regex used by ByteLevel with use_regex = true.
extern const char kGpt2PreTokenizerRegex[];

// Split behaviour of a delimiter (a "match") relative to the text around it.
enum class SplitBehavior : uint8_t {
  kRemoved,             // matches are dropped
  kIsolated,            // every match is its own piece
  kMergedWithPrevious,  // a match is appended to the piece before it
  kMergedWithNext,      // a match is prepended to the piece after it
  kContiguous,          // runs of consecutive matches (and of non-matches) form one piece
};

// A byte range of a text flagged as a delimiter match or not; a text's segments cover it in order.
struct Segment {
  size_t begin = 0;
  size_t end = 0;
  bool is_match = false;
};

// Regex matches of `text` and the gaps between them, in order (HF Pattern::find_matches). An empty
// text gives one empty non-match segment.
Result<std::vector<Segment>> RegexSegments(const Regex& regex, std::string_view text);

// The byte ranges of the pieces that `behavior` makes from `segments` (empty ranges included).
std::vector<ByteRange> ApplySplitBehavior(const std::vector<Segment>& segments,
                                          SplitBehavior behavior);

}  // namespace zipmoe::tokenizer
