// UTF-8 and Unicode helpers for the tokenizer (common/tokenizer/tokenizer.h): lossy UTF-8 repair, code point
// iteration, character classes, normalization forms (libutf8proc) and the GPT-2 byte-level alphabet.
//
// All functions are pure and callable from any thread. "Valid UTF-8" means well-formed per the
// Unicode Standard, Table 3-7 (no surrogates, no overlong forms, nothing above U+10FFFF).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace zipmoe::tokenizer {

// UTF-8 of U+FFFD REPLACEMENT CHARACTER.
inline constexpr char kReplacementUtf8[] = "\xEF\xBF\xBD";

// True if `bytes` is valid UTF-8.
bool IsValidUtf8(std::string_view bytes);

// Appends `bytes` to *out, replacing each maximal ill-formed subsequence by one U+FFFD (Unicode
// §3.9 "substitution of maximal subparts": the behaviour of Rust's String::from_utf8_lossy, Python's
// bytes.decode(errors="replace") and WHATWG). Valid input is appended unchanged.
void AppendUtf8Lossy(std::string_view bytes, std::string* out);
inline std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, &out);
  return out;
}

// Length in bytes of the well-formed UTF-8 sequence starting at bytes[pos], or 0 if the bytes there
// are ill-formed or truncated.
size_t ValidUtf8SequenceLength(std::string_view bytes, size_t pos);

// Decodes the code point at text[*pos] and advances *pos past it. `text` must be valid UTF-8.
char32_t NextCodePoint(std::string_view text, size_t* pos);
// Appends the UTF-8 encoding of `cp` (cp <= 0x10FFFF, not a surrogate) to *out.
void AppendUtf8(char32_t cp, std::string* out);
// Byte length of the UTF-8 sequence whose lead byte is `lead` (1 for continuation/invalid bytes).
size_t Utf8LeadLength(unsigned char lead);

// Character classes, as Rust's char methods (which the HF tokenizers library uses):
//   IsWhitespace: the White_Space property; IsNumeric: general category Nd, Nl or No;
//   IsAlphanumeric: general category L* or N* (Rust's Other_Alphabetic marks are not included);
//   IsPunctuation: ASCII punctuation or general category P*.
bool IsWhitespace(char32_t cp);
bool IsNumeric(char32_t cp);
bool IsAlphanumeric(char32_t cp);
bool IsPunctuation(char32_t cp);

enum class NormalizationForm : uint8_t { kNfc, kNfd, kNfkc, kNfkd };

// Unicode normalization (UAX #15) of valid UTF-8 `text` via libutf8proc.
// Errors: kInvalidArgument if libutf8proc rejects the text (it is not valid UTF-8).
Result<std::string> Normalize(std::string_view text, NormalizationForm form);

// Simple lowercase mapping of each code point (utf8proc_tolower). `text` must be valid UTF-8.
std::string Lowercase(std::string_view text);

// GPT-2 bytes_to_unicode: byte b maps to a printable code point. The 188 bytes in '!'..'~',
// '¡'..'¬' and '®'..'ÿ' map to themselves; the other 68 map to U+0100 + n in ascending byte order
// (so ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ', 0xAD -> U+0143 'Ń').
char32_t ByteToUnicode(uint8_t b);
// UTF-8 strings of ByteToUnicode(b) for all 256 bytes.
const std::array<std::string, 256>& ByteToUnicodeUtf8();
// Inverse of ByteToUnicode: the byte for `cp`, or -1 if cp is not in the byte-level alphabet.
int UnicodeToByte(char32_t cp);

}  // namespace zipmoe::tokenizer
