// A T5-style tokenizer.json for synthetic switch_transformers checkpoints: a SentencePiece Unigram
// model (byte_fallback off, as T5) with a Metaspace pre-tokenizer and decoder, `<pad>` = 0, `</s>` = 1,
// `<unk>` = 2, the sentinels `<extra_id_0>`.. as added special tokens on the LAST ids
// (`<extra_id_0>` = vocab_size - 1, as in t5-base), and T5's TemplateProcessing post-processor that
// appends `</s>`. Pieces are the words of the embedded English corpus and their character n-grams
// (with the "▁" word-start marker), plus every printable ASCII character, scored by the log of their
// corpus frequency; a vocabulary the corpus cannot fill (mini's 32128) is completed with lower-case
// letter strings of 2-4 letters (with and without "▁"), scored as single occurrences. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace zipmoe::synth {

struct UnigramTokenizer {
  std::string json_text;   // tokenizer.json
  int64_t n_sentinels = 0; // <extra_id_N> tokens
};

// vocab_size ids exactly: 3 specials + pieces + min(100, vocab_size / 16) sentinels.
// Errors: kInvalidArgument if vocab_size < 256 or vocab_size is beyond what corpus + filler can fill
// (~950 k).
Result<UnigramTokenizer> BuildUnigramTokenizer(int64_t vocab_size, std::string_view corpus);

}  // namespace zipmoe::synth
