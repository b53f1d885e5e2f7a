// String helpers of the template engine (common/jinja/): UTF-8 code points and the Python str
// methods chat templates call. Case mapping is ASCII-only (bytes >= 0x80 are kept as they are).
// Pure functions; callable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zipmoe::jinja {

// A run of ASCII decimal digits as an integer no greater than `max`; nullopt when `s` is empty, holds
// another character or exceeds `max`. Never throws (std::stoll / stoul throw out_of_range on a long run
// of digits, which a template may hold: "{{ x.99999999999999999999 }}").
std::optional<uint64_t> ParseDecimal(std::string_view s, uint64_t max = UINT64_MAX);
// A float literal of the lexer (digits, '.', an exponent) as Python's float() reads it: overflow gives
// infinity, underflow zero. Never throws (std::stod throws out_of_range on "1e999").
double ParseFloatLiteral(const std::string& s);

// Code point at byte `pos` of `s`; *len = its byte length (1 for an invalid byte, returned as is).
uint32_t DecodeUtf8(std::string_view s, size_t pos, size_t* len);
// `s` split into its UTF-8 characters (each a string of 1-4 bytes).
std::vector<std::string> Utf8Chars(std::string_view s);
size_t Utf8Length(std::string_view s);

std::string AsciiLower(std::string_view s);
std::string AsciiUpper(std::string_view s);
// Python str.title(): upper-cases the first letter of each run of letters, lower-cases the rest.
std::string TitleCase(std::string_view s);
// Python str.capitalize(): first character upper, the rest lower.
std::string Capitalize(std::string_view s);

bool IsSpace(char c);  // Python's ASCII whitespace: space, \t \n \v \f \r
// Python's str.isspace() for one code point: the ASCII ones, \x1c-\x1f, U+0085, U+00A0, U+1680,
// U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool IsPythonSpace(uint32_t cp);
// Byte length of the Python whitespace character starting at s[pos] (pos < s.size()), or 0.
size_t PythonSpaceLength(std::string_view s, size_t pos);
// Python str.strip/lstrip/rstrip: `chars` null strips whitespace (IsPythonSpace), else any code point
// of *chars.
std::string Strip(std::string_view s, const std::string* chars, bool left, bool right);
// Python str.split(sep, maxsplit) / rsplit: `sep` null splits on runs of whitespace (IsPythonSpace).
std::vector<std::string> Split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> RSplit(std::string_view s, const std::string* sep, int64_t maxsplit);
// Python str.replace(old, new, count); count < 0 replaces all.
std::string Replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count);
// Python str.count / str.find (byte offsets; -1 when absent).
int64_t CountOccurrences(std::string_view s, std::string_view sub);
bool StartsWith(std::string_view s, std::string_view prefix);
bool EndsWith(std::string_view s, std::string_view suffix);

// markupsafe's escape(): & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(std::string_view s);

// Python slice indices for a sequence of `size`: start/stop/step already defaulted by
// `has_*`; returns the selected indices (step != 0 checked by the caller).
std::vector<int64_t> SliceIndices(int64_t size, bool has_start, int64_t start, bool has_stop, int64_t stop,
                                  int64_t step);

}  // namespace zipmoe::jinja
