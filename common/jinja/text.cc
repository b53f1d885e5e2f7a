// String helpers of the template engine (common/jinja/text.h).
#include "common/jinja/text.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace zipmoe::jinja {

std::optional<uint64_t> ParseDecimal(std::string_view s, uint64_t max) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

double ParseFloatLiteral(const std::string& s) { return std::strtod(s.c_str(), nullptr); }

uint32_t DecodeUtf8(std::string_view s, size_t pos, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || pos + n > s.size()) {
    *len = 1;
    return c;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t i = 1; i < n; ++i) {
    const unsigned char cc = static_cast<unsigned char>(s[pos + i]);
    if ((cc >> 6) != 2) {
      *len = 1;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  *len = n;
  return cp;
}

std::vector<std::string> Utf8Chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    DecodeUtf8(s, i, &len);
    out.emplace_back(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    DecodeUtf8(s, i, &len);
    i += len;
    ++n;
  }
  return n;
}

static char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
static char Upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
static bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(c);
  return out;
}

std::string AsciiUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Upper(c);
  return out;
}

std::string TitleCase(std::string_view s) {
  std::string out(s);
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = IsAlpha(c);
    c = letter ? (prev_letter ? Lower(c) : Upper(c)) : c;
    prev_letter = letter;
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  std::string out = AsciiLower(s);
  if (!out.empty()) out[0] = Upper(out[0]);
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

bool IsPythonSpace(uint32_t cp) {
  if (cp < 0x80) return IsSpace(static_cast<char>(cp)) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t PythonSpaceLength(std::string_view s, size_t pos) {
  size_t len = 0;
  return IsPythonSpace(DecodeUtf8(s, pos, &len)) ? len : 0;
}

namespace {

// The character that ends at s[end - 1] (end > 0): true and *begin = its lead byte when the bytes before
// `end` form one whole UTF-8 character, else false and *begin = end - 1 (the last byte alone).
bool CharBefore(std::string_view s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) >> 6) == 2) --b;
  size_t len = 0;
  DecodeUtf8(s, b, &len);
  *begin = b + len == end ? b : end - 1;
  return b + len == end;
}

// Byte length of the Python whitespace character ending at s[end - 1], or 0.
size_t SpaceLenBefore(std::string_view s, size_t end) {
  size_t begin = 0;
  if (!CharBefore(s, end, &begin)) return 0;
  return PythonSpaceLength(s, begin) == end - begin ? end - begin : 0;
}

// Byte length of the character starting at s[pos] (or ending at s[end - 1]) if it is one of `chars`
// (code points), else 0.
size_t CharLenAt(std::string_view s, size_t pos, const std::vector<std::string>& chars) {
  size_t len = 0;
  DecodeUtf8(s, pos, &len);
  return std::find(chars.begin(), chars.end(), s.substr(pos, len)) != chars.end() ? len : 0;
}

size_t CharLenBefore(std::string_view s, size_t end, const std::vector<std::string>& chars) {
  size_t begin = 0;
  CharBefore(s, end, &begin);
  return CharLenAt(s, begin, chars) == end - begin ? end - begin : 0;
}

}  // namespace

std::string Strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<std::string> set = chars != nullptr ? Utf8Chars(*chars) : std::vector<std::string>();
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      const size_t n = chars == nullptr ? PythonSpaceLength(s, begin) : CharLenAt(s, begin, set);
      if (n == 0 || begin + n > end) break;
      begin += n;
    }
  }
  if (right) {
    while (end > begin) {
      const size_t n = chars == nullptr ? SpaceLenBefore(s, end) : CharLenBefore(s, end, set);
      if (n == 0 || end - n < begin) break;
      end -= n;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> Split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr) {
    size_t i = 0;
    while (i < s.size()) {
      for (size_t n; i < s.size() && (n = PythonSpaceLength(s, i)) > 0;) i += n;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.emplace_back(s.substr(i));  // Python keeps the rest, trailing whitespace included
        return out;
      }
      size_t j = i;
      while (j < s.size() && PythonSpaceLength(s, j) == 0) {
        size_t len = 0;
        DecodeUtf8(s, j, &len);
        j += len;
      }
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t at = s.find(*sep, start);
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> RSplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0 || sep == nullptr) {
    if (sep == nullptr && maxsplit >= 0) {
      // whitespace rsplit with a limit: split from the right
      std::vector<std::string> out;
      size_t end = s.size();
      while (end > 0) {
        for (size_t n; end > 0 && (n = SpaceLenBefore(s, end)) > 0;) end -= n;
        if (end == 0) break;
        if (static_cast<int64_t>(out.size()) >= maxsplit) {
          out.emplace_back(s.substr(0, end));
          break;
        }
        size_t b = end;
        while (b > 0 && SpaceLenBefore(s, b) == 0) --b;
        out.emplace_back(s.substr(b, end - b));
        end = b;
      }
      std::reverse(out.begin(), out.end());
      return out;
    }
    return Split(s, sep, maxsplit);
  }
  std::vector<std::string> out;
  size_t end = s.size();
  while (static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::string Replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {  // Python inserts `new_text` between every character
    const std::vector<std::string> chars = Utf8Chars(s);
    int64_t done = 0;
    for (const std::string& c : chars) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      out += c;
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old_text, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += new_text;
    start = at + old_text.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

int64_t CountOccurrences(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(Utf8Length(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::vector<int64_t> SliceIndices(int64_t size, bool has_start, int64_t start, bool has_stop, int64_t stop,
                                  int64_t step) {
  std::vector<int64_t> out;
  if (step > 0) {
    start = !has_start ? 0 : start < 0 ? std::max<int64_t>(size + start, 0) : std::min(start, size);
    stop = !has_stop ? size : stop < 0 ? std::max<int64_t>(size + stop, 0) : std::min(stop, size);
    for (int64_t i = start; i < stop; i += step) out.push_back(i);
  } else {
    start = !has_start ? size - 1 : start < 0 ? std::max<int64_t>(size + start, -1) : std::min(start, size - 1);
    stop = !has_stop ? -1 : stop < 0 ? std::max<int64_t>(size + stop, -1) : std::min(stop, size - 1);
    for (int64_t i = start; i > stop; i += step) out.push_back(i);
  }
  return out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace zipmoe::jinja
