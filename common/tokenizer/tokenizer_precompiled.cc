// The Precompiled (SentencePiece charsmap) normalizer (see tokenizer_precompiled.h).
#include "common/tokenizer/tokenizer_precompiled.h"

#include <utf8proc.h>

#include <cstring>

#include <fmt/format.h>

#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {

namespace {

// Darts-clone unit fields (darts.h, DoubleArrayUnit).
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1u) != 0; }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xffu); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

int Base64Digit(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::optional<std::string> DecodeBase64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int d[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const unsigned char c = static_cast<unsigned char>(text[i + k]);
      if (c == '=' && last && k >= 2) {
        d[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return std::nullopt;  // a digit after padding
      d[k] = Base64Digit(c);
      if (d[k] < 0) return std::nullopt;
    }
    const uint32_t v = static_cast<uint32_t>(d[0] << 18 | d[1] << 12 | d[2] << 6 | d[3]);
    out.push_back(static_cast<char>(v >> 16));
    if (pad < 2) out.push_back(static_cast<char>((v >> 8) & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(v & 0xff));
  }
  return out;
}

Result<PrecompiledCharsMap> PrecompiledCharsMap::Parse(std::string_view bytes, const std::string& where) {
  if (bytes.size() < 4)
    return Status::Corruption(fmt::format("{}: precompiled_charsmap has {} bytes, fewer than its 4-byte header", where,
                                          bytes.size()));
  uint32_t trie_bytes = 0;
  for (int k = 3; k >= 0; --k) trie_bytes = trie_bytes << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(k)]);
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > bytes.size() - 4)
    return Status::Corruption(fmt::format("{}: precompiled_charsmap's trie size {} does not fit its {} bytes (or is "
                                          "not a positive multiple of 4)", where, trie_bytes, bytes.size()));
  PrecompiledCharsMap map;
  map.trie_.resize(trie_bytes / 4);
  for (size_t u = 0; u < map.trie_.size(); ++u) {
    uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = v << 8 | static_cast<unsigned char>(bytes[4 + 4 * u + static_cast<size_t>(k)]);
    map.trie_[u] = v;
  }
  map.normalized_ = std::string(bytes.substr(4 + trie_bytes));
  if (!map.normalized_.empty() && map.normalized_.back() != '\0')
    return Status::Corruption(fmt::format("{}: precompiled_charsmap's replacement strings do not end in NUL", where));
  return map;
}

Result<PrecompiledCharsMap> PrecompiledCharsMap::ParseBase64(std::string_view base64, const std::string& where) {
  std::optional<std::string> bytes = DecodeBase64(base64);
  if (!bytes) return Status::Corruption(fmt::format("{}: precompiled_charsmap is not valid base64", where));
  return Parse(*bytes, where);
}

std::optional<std::string_view> PrecompiledCharsMap::Transform(std::string_view chunk) const {
  // Darts-clone commonPrefixSearch, stopped at the first (shortest) result.
  size_t pos = Offset(trie_[0]);
  for (size_t i = 0; i < chunk.size(); ++i) {
    const uint32_t c = static_cast<unsigned char>(chunk[i]);
    if (c == 0) break;
    pos ^= c;
    if (pos >= trie_.size()) return std::nullopt;
    const uint32_t unit = trie_[pos];
    if (Label(unit) != c) return std::nullopt;
    pos ^= Offset(unit);
    if (pos >= trie_.size()) return std::nullopt;
    if (HasLeaf(unit)) {
      const uint32_t at = Value(trie_[pos]);
      if (at >= normalized_.size()) return std::nullopt;  // points outside the blob: treat as no rule
      const size_t end = normalized_.find('\0', at);
      return std::string_view(normalized_).substr(at, end - at);
    }
  }
  return std::nullopt;
}

std::string PrecompiledCharsMap::Normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  utf8proc_int32_t state = 0;
  while (pos < text.size()) {
    // One extended grapheme cluster [pos, end).
    size_t end = pos;
    char32_t prev = NextCodePoint(text, &end);
    const size_t first_end = end;
    while (end < text.size()) {
      size_t next = end;
      const char32_t cp = NextCodePoint(text, &next);
      if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev), static_cast<utf8proc_int32_t>(cp),
                                           &state))
        break;
      prev = cp;
      end = next;
    }
    const std::string_view cluster = text.substr(pos, end - pos);
    const bool one_code_point = end == first_end;
    pos = end;
    if (cluster.size() < 6) {
      if (std::optional<std::string_view> r = Transform(cluster)) {
        out.append(*r);
        continue;
      }
      if (one_code_point) {  // the per-code-point lookup below would repeat this one
        out.append(cluster);
        continue;
      }
    }
    for (size_t p = 0; p < cluster.size();) {
      size_t q = p;
      NextCodePoint(cluster, &q);
      const std::string_view ch = cluster.substr(p, q - p);
      if (std::optional<std::string_view> r = Transform(ch)) {
        out.append(*r);
      } else {
        out.append(ch);
      }
      p = q;
    }
  }
  return out;
}

}  // namespace zipmoe::tokenizer
