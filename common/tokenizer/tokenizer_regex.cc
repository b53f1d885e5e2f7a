// PCRE2 wrapper with Oniguruma-style find_iter semantics (see tokenizer_regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/tokenizer/tokenizer_regex.h"

#include <memory>

#include <fmt/format.h>
#include <pcre2.h>

#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {
namespace {

// JIT stack used only when a match overflows PCRE2's default 32 KiB JIT stack.
constexpr size_t kJitStackStartBytes = 32 * 1024;
constexpr size_t kJitStackMaxBytes = 16 * 1024 * 1024;

std::string ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return fmt::format("PCRE2 error {}", code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* p) const { pcre2_match_data_free(p); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* p) const { pcre2_match_context_free(p); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* p) const { pcre2_jit_stack_free(p); }
};

// Owns a match context with a large JIT stack, created on the first JIT stack overflow.
class LargeJitStack {
 public:
  pcre2_match_context* Get() {
    if (context_ == nullptr) {
      stack_.reset(pcre2_jit_stack_create(kJitStackStartBytes, kJitStackMaxBytes, nullptr));
      context_.reset(pcre2_match_context_create(nullptr));
      if (stack_ == nullptr || context_ == nullptr) return nullptr;
      pcre2_jit_stack_assign(context_.get(), nullptr, stack_.get());
    }
    return context_.get();
  }

 private:
  std::unique_ptr<pcre2_jit_stack, JitStackDeleter> stack_;
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> context_;
};

// Whether PCRE2 knows `name` as a script (\p{sc:name} compiles). General categories (L, Lu, N, ...)
// and binary properties are not scripts.
bool IsPcre2Script(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  const std::string probe = "\\p{sc:" + std::string(name) + "}";
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(probe.data()), probe.size(), PCRE2_UTF | PCRE2_UCP,
                                   &error_code, &error_offset, nullptr);
  if (code == nullptr) return false;
  pcre2_code_free(code);
  return true;
}

// Rewrites the escapes whose meaning differs between PCRE2 and the engines tokenizers were written
// for (Oniguruma in HF tokenizers, Rust's regex under tiktoken):
//  - \s / \S as \p{White_Space} / \P{White_Space}: Oniguruma's \s is the White_Space property, while
//    PCRE2's UCP \s also matches U+180E MONGOLIAN VOWEL SEPARATOR;
//  - a bare script name \p{Han} / \P{Han} / \p{^Han} as \p{sc:Han}: both engines read it as the Script
//    property, PCRE2 (>= 10.40) as Script_Extensions, which adds shared punctuation such as U+3002
//    IDEOGRAPHIC FULL STOP (Script=Common) to Han.
// Works inside character classes too; an escaped backslash ("\\s") is left alone.
std::string RewriteEscapes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char next = pattern[++i];
    if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else if ((next == 'p' || next == 'P') && i + 1 < pattern.size() && pattern[i + 1] == '{') {
      const size_t close = pattern.find('}', i + 2);
      std::string_view name = close == std::string_view::npos ? std::string_view() : pattern.substr(i + 2, close - i - 2);
      const bool negated = !name.empty() && name.front() == '^';
      if (negated) name.remove_prefix(1);
      if (close != std::string_view::npos && name.find_first_of(":=") == std::string_view::npos && IsPcre2Script(name)) {
        out += fmt::format("\\{}{{{}sc:{}}}", next, negated ? "^" : "", name);
        i = close;
      } else {
        out.push_back('\\');
        out.push_back(next);
      }
    } else {
      out.push_back('\\');
      out.push_back(next);
    }
  }
  return out;
}

}  // namespace

Result<Regex> Regex::Compile(std::string_view pattern, bool literal) {
  // PCRE2_LITERAL admits only a few other options (UCP and MULTILINE would be rejected).
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  const std::string source = literal ? std::string(pattern) : RewriteEscapes(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return Status::InvalidArgument(fmt::format("regex '{}' does not compile (PCRE2 pattern '{}', offset {}): {}",
                                               pattern, source, error_offset, ErrorMessage(error_code)));
  }
  // A failed JIT compile (no JIT on this CPU/build) leaves the interpreter in use: not an error.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Regex(code, std::string(pattern));
}

Regex::Regex(Regex&& other) noexcept : code_(other.code_), pattern_(std::move(other.pattern_)) {
  other.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    if (code_ != nullptr) pcre2_code_free(code_);
    code_ = other.code_;
    pattern_ = std::move(other.pattern_);
    other.code_ = nullptr;
  }
  return *this;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(code_);
}

Result<std::vector<ByteRange>> Regex::FindAll(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match_data(
      pcre2_match_data_create_from_pattern(code_, nullptr));
  if (match_data == nullptr) return Status::Internal("pcre2_match_data_create failed");
  LargeJitStack large_stack;
  pcre2_match_context* context = nullptr;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());

  std::vector<ByteRange> matches;
  size_t start = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match_data.get(),
                         context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && context == nullptr) {
      context = large_stack.Get();
      if (context == nullptr) return Status::Internal("pcre2 JIT stack allocation failed");
      continue;  // retry the same search with the large stack
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return Status::Internal(fmt::format("regex '{}' failed at byte {} of a {}-byte text: {}",
                                          pattern_, start, text.size(), ErrorMessage(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (begin == end && have_last && last_end == end) {
      if (start >= text.size()) break;
      start += Utf8LeadLength(static_cast<unsigned char>(text[start]));
      continue;
    }
    matches.emplace_back(begin, end);
    start = end;
    have_last = true;
    last_end = end;
  }
  return matches;
}

Result<std::string> ReplaceAll(const Regex& regex, std::string_view text, std::string_view content) {
  ZM_ASSIGN_OR_RETURN(std::vector<ByteRange> matches, regex.FindAll(text));
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (const ByteRange& m : matches) {
    out.append(text.data() + pos, m.first - pos);
    out.append(content);
    pos = m.second;
  }
  out.append(text.data() + pos, text.size() - pos);
  return out;
}

}  // namespace zipmoe::tokenizer
