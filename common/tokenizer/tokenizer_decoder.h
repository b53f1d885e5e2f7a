// Decoders of a Hugging Face tokenizer.json: token strings -> text (HF tokenizers semantics).
//
// A decoder rewrites the list of token strings ("decode_chain"); the tokenizer then concatenates
// the result. Supported: ByteLevel (GPT-2 alphabet -> bytes -> UTF-8 with U+FFFD for invalid
// bytes, as String::from_utf8_lossy), Metaspace, Replace (String or Regex pattern), ByteFallback
// ("<0xXX>" runs -> bytes; an invalid run gives one U+FFFD per byte), Fuse, Strip, BPEDecoder
// (suffix), Sequence. Anything else (WordPiece, CTC) is rejected when parsing.
//
// Parsed decoders are immutable: callable from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites *tokens in place; the output may have a different number of strings. Byte runs that
  // are not valid UTF-8 (ByteLevel, ByteFallback) become U+FFFD as in HF's decoders, or stay raw
  // bytes with `keep_bytes` (Tokenizer::DecodeBytes).
  virtual void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const = 0;
};

// Parses a tokenizer.json "decoder" value; JSON null gives nullptr (the tokenizer then joins the
// token strings with " ", as HF does). `where` names the file and JSON path in messages.
// Errors: kInvalidArgument naming an unsupported type; kCorruption for a missing/mistyped field.
Result<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j, const std::string& where);

}  // namespace zipmoe::tokenizer
