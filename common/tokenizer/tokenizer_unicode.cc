// UTF-8 repair and iteration, character classes, normalization (libutf8proc), GPT-2 byte alphabet.
#include "common/tokenizer/tokenizer_unicode.h"

#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <utf8proc.h>

namespace zipmoe::tokenizer {
namespace {

bool InRange(unsigned char b, unsigned char lo, unsigned char hi) { return b >= lo && b <= hi; }

// Number of bytes of a well-formed prefix of the sequence at bytes[pos] (Unicode Table 3-7), and
// the length the sequence would need. `*complete` is true if prefix == needed.
size_t WellFormedPrefix(std::string_view bytes, size_t pos, bool* complete) {
  const auto b0 = static_cast<unsigned char>(bytes[pos]);
  *complete = false;
  size_t needed = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 < 0x80) {
    *complete = true;
    return 1;
  } else if (InRange(b0, 0xC2, 0xDF)) {
    needed = 2;
  } else if (b0 == 0xE0) {
    needed = 3, lo = 0xA0;
  } else if (InRange(b0, 0xE1, 0xEC) || InRange(b0, 0xEE, 0xEF)) {
    needed = 3;
  } else if (b0 == 0xED) {
    needed = 3, hi = 0x9F;
  } else if (b0 == 0xF0) {
    needed = 4, lo = 0x90;
  } else if (InRange(b0, 0xF1, 0xF3)) {
    needed = 4;
  } else if (b0 == 0xF4) {
    needed = 4, hi = 0x8F;
  } else {
    return 0;  // 0x80..0xC1, 0xF5..0xFF never start a sequence
  }
  size_t n = 1;
  while (n < needed && pos + n < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[pos + n]);
    if (n == 1 ? !InRange(b, lo, hi) : !InRange(b, 0x80, 0xBF)) break;
    ++n;
  }
  *complete = n == needed;
  return n;
}

// Builds the GPT-2 byte <-> code point tables once.
struct ByteTables {
  std::array<char32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 512> from_cp{};  // code points < 512 only; -1 = not in the alphabet

  ByteTables() {
    from_cp.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? static_cast<char32_t>(b) : next_extra++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
      AppendUtf8(to_cp[b], &to_utf8[b]);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

size_t ValidUtf8SequenceLength(std::string_view bytes, size_t pos) {
  bool complete = false;
  const size_t n = WellFormedPrefix(bytes, pos, &complete);
  return complete ? n : 0;
}

bool IsValidUtf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = ValidUtf8SequenceLength(bytes, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

void AppendUtf8Lossy(std::string_view bytes, std::string* out) {
  out->reserve(out->size() + bytes.size());
  size_t pos = 0;
  size_t run_start = 0;  // start of the current run of valid bytes not yet copied
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    bool complete = false;
    const size_t n = WellFormedPrefix(bytes, pos, &complete);
    if (complete) {
      pos += n;
      continue;
    }
    out->append(bytes.data() + run_start, pos - run_start);
    out->append(kReplacementUtf8);
    pos += n == 0 ? 1 : n;  // a maximal subpart is at least one byte
    run_start = pos;
  }
  out->append(bytes.data() + run_start, pos - run_start);
}

size_t Utf8LeadLength(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto b0 = static_cast<unsigned char>(text[*pos]);
  size_t n = Utf8LeadLength(b0);
  if (*pos + n > text.size()) n = 1;  // defensive: never read past the end
  char32_t cp = n == 1 ? b0 : (b0 & (0x7F >> n));
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[*pos + i]) & 0x3F);
  *pos += n;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsWhitespace(char32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85) return true;
  if (cp < 0xA0) return false;
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

bool IsNumeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool IsAlphanumeric(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  }
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

bool IsPunctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') || (cp >= '[' && cp <= '`') ||
           (cp >= '{' && cp <= '~');
  }
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

Result<std::string> Normalize(std::string_view text, NormalizationForm form) {
  bool ascii = true;
  for (char ch : text) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return std::string(text);  // every normalization form leaves ASCII unchanged
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalizationForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalizationForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalizationForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalizationForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* dest = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &dest,
                   static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(dest, &std::free);
  if (n < 0) {
    return Status::InvalidArgument(
        fmt::format("unicode normalization failed: {}", utf8proc_errmsg(n)));
  }
  return std::string(reinterpret_cast<const char*>(dest), static_cast<size_t>(n));
}

std::string Lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = NextCodePoint(text, &pos);
    AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
  }
  return out;
}

char32_t ByteToUnicode(uint8_t b) { return Tables().to_cp[b]; }

const std::array<std::string, 256>& ByteToUnicodeUtf8() { return Tables().to_utf8; }

int UnicodeToByte(char32_t cp) { return cp < 512 ? Tables().from_cp[cp] : -1; }

}  // namespace zipmoe::tokenizer
