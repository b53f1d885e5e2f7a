// Builds a Hugging Face tokenizer.json: byte-level BPE exactly in the GPT-2 / Qwen2 format.
//
//   vocab    256 byte tokens (GPT-2 bytes_to_unicode characters, in GPT-2's id order), then merges
//            learned from an embedded English corpus until every corpus word is a single token (or
//            the vocabulary is full), then deterministic synthetic merges (prefix-token + lowercase
//            suffix-token, both already in the vocabulary, each producing a new unique string) until
//            BPE tokens + special tokens == vocab_size exactly.
//   special  added_tokens at the ids of SpecialTokenLayout (tokenizer_files.h).
//   pipeline normalizer NFC, pre_tokenizer Sequence[Split(Qwen2 regex, Isolated), ByteLevel(no prefix
//            space, no regex)], decoder ByteLevel, post_processor ByteLevel or, where the model adds a
//            BOS (mixtral, deepseek_v2), TemplateProcessing "<bos> $A".
// Merges are written in the "a b" string form, in rank order. Pure; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "services/synth/tokenizer_files.h"

namespace zipmoe::synth {

// The Qwen2 pre-tokenizer regex (tokenizer.json "Split" pattern).
extern const char kQwen2PreTokenizerRegex[];

// GPT-2 bytes_to_unicode: the UTF-8 encoding of the printable character standing for byte b.
const std::array<std::string, 256>& ByteToUnicode();
// GPT-2 vocabulary order of the byte tokens: id i (0..255) is byte ByteIdOrder()[i]
// ('!'..'~', '¡'..'¬', '®'..'ÿ', then the remaining bytes ascending).
const std::array<uint8_t, 256>& ByteIdOrder();

// Splits text as the Qwen2 regex would, for ASCII input: letters are [A-Za-z], numbers [0-9],
// whitespace [ \t\n\v\f\r]; any byte >= 0x80 is treated as punctuation. Used on the embedded corpus.
std::vector<std::string> PreTokenizeQwen2Ascii(std::string_view text);

// A few KB of plain English prose (services/synth/english_corpus.cc) that the merges are learned from.
std::string_view EnglishCorpus();

struct BpeModel {
  std::vector<std::string> tokens;          // BPE token strings (byte-level characters), index = rank id
  std::vector<std::pair<int32_t, int32_t>> merges;  // in rank order, as token indices
  int64_t n_learned_merges = 0;             // merges[0 .. n_learned) come from the corpus
};

// Learns and fills a BPE model with exactly n_tokens tokens (>= 256).
// Errors: kInvalidArgument (n_tokens < 256); kInternal if the synthetic fill cannot find new strings.
Result<BpeModel> BuildBpeModel(int64_t n_tokens, std::string_view corpus);

struct BpeTokenizer {
  std::string json_text;  // contents of tokenizer.json
  int64_t n_bpe_tokens = 0;
  int64_t n_learned_merges = 0;
  int64_t n_synthetic_merges = 0;
};

// tokenizer.json for `layout` (vocab_size and special tokens). Errors: as BuildBpeModel.
Result<BpeTokenizer> BuildBpeTokenizer(const SpecialTokenLayout& layout,
                                       std::string_view corpus = EnglishCorpus());

}  // namespace zipmoe::synth
