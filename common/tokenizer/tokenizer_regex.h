// Regex: a compiled PCRE2 pattern used by tokenizer pre-tokenizers, normalizers and decoders.
//
// The HF tokenizers library runs its patterns on Oniguruma (Ruby syntax). To match it, patterns are
// compiled with PCRE2_UTF | PCRE2_UCP (\s, \w, \d and \p{..} are Unicode-aware) and
// PCRE2_MULTILINE (Ruby's ^ and $ are line anchors), and JIT-compiled when the JIT is available.
// \s and \S are rewritten to \p{White_Space} / \P{White_Space} (Oniguruma's definition; PCRE2's
// own \s also matches U+180E), and a bare script name \p{Han} to \p{sc:Han} (Oniguruma and Rust's
// regex, under tiktoken, read it as the Script property; PCRE2 >= 10.40 as Script_Extensions, which
// puts e.g. U+3002 IDEOGRAPHIC FULL STOP in Han). Known differences from Oniguruma: Ruby's \h (hex digit) is PCRE2's
// horizontal space; \w follows PCRE2 (letters, numbers and '_').
//
// Ownership: move-only owner of the pcre2_code. Thread-safety: a compiled Regex may be used by
// many threads at once (each FindAll call allocates its own match data).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

struct pcre2_real_code_8;  // pcre2.h's pcre2_code (8-bit), kept out of this header

namespace zipmoe::tokenizer {

// A byte range [begin, end) of a subject string.
using ByteRange = std::pair<size_t, size_t>;

class Regex {
 public:
  // Compiles `pattern`; with `literal`, the pattern is matched as a plain string (PCRE2_LITERAL),
  // as the HF {"String": ...} pattern form. Errors: kInvalidArgument with PCRE2's message and the
  // offset of the error in the pattern.
  static Result<Regex> Compile(std::string_view pattern, bool literal);

  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&& other) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

  // All non-overlapping matches in `text` (valid UTF-8), left to right, as Oniguruma's find_iter:
  // after a match ending at e the search resumes at e; an empty match directly at the end of the
  // previous match is skipped by advancing one character.
  // Errors: kInternal if PCRE2 fails while matching (match or JIT stack limit).
  Result<std::vector<ByteRange>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex(pcre2_real_code_8* code, std::string pattern) : code_(code), pattern_(std::move(pattern)) {}
  pcre2_real_code_8* code_ = nullptr;
  std::string pattern_;
};

// Replaces every match of `regex` in `text` by `content`.
// Errors: as Regex::FindAll.
Result<std::string> ReplaceAll(const Regex& regex, std::string_view text, std::string_view content);

}  // namespace zipmoe::tokenizer
