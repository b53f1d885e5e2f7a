// Template lexer (common/jinja/lexer.h).
#include "common/jinja/lexer.h"

#include <fmt/format.h>

#include "common/jinja/text.h"

namespace zipmoe::jinja {
namespace {

// Text with the original offset of each byte (at[i] for s[i]; at[s.size()] = end of source).
struct Mapped {
  std::string s;
  std::vector<uint32_t> at;
  void Push(char c, uint32_t offset) {
    s.push_back(c);
    at.push_back(offset);
  }
};

Mapped Preprocess(std::string_view source) {
  Mapped in;
  for (size_t i = 0; i < source.size(); ++i) in.Push(source[i], static_cast<uint32_t>(i));
  if (!in.s.empty() && in.s.back() == '\n') {
    in.s.pop_back();
    in.at.pop_back();
  }
  // lstrip_blocks
  Mapped a;
  for (size_t i = 0; i < in.s.size();) {
    const bool line_start = i == 0 || in.s[i - 1] == '\n' || in.s[i - 1] == '\r';
    if (line_start) {
      size_t j = i;
      while (j < in.s.size() && (in.s[j] == ' ' || in.s[j] == '\t')) ++j;
      if (j > i && j + 1 < in.s.size() && in.s[j] == '{' &&
          (in.s[j + 1] == '#' || in.s[j + 1] == '%' || in.s[j + 1] == '-')) {
        i = j;
      }
    }
    a.Push(in.s[i], in.at[i]);
    ++i;
  }
  // trim_blocks
  Mapped b;
  for (size_t i = 0; i < a.s.size(); ++i) {
    b.Push(a.s[i], a.at[i]);
    if (a.s[i] == '}' && i > 0 && (a.s[i - 1] == '#' || a.s[i - 1] == '%' || a.s[i - 1] == '-') &&
        i + 1 < a.s.size() && a.s[i + 1] == '\n') {
      ++i;  // drop the newline
    }
  }
  // {% generation %} / {% endgeneration %}
  Mapped c;
  for (size_t i = 0; i < b.s.size();) {
    if (b.s.compare(i, 2, "{%") == 0) {
      size_t j = i + 2;
      const bool lstrip = j < b.s.size() && b.s[j] == '-';
      if (lstrip) ++j;
      while (j < b.s.size() && IsSpace(b.s[j])) ++j;
      if (b.s.compare(j, 3, "end") == 0) j += 3;
      if (b.s.compare(j, 10, "generation") == 0) {
        j += 10;
        while (j < b.s.size() && IsSpace(b.s[j])) ++j;
        const bool rstrip = j < b.s.size() && b.s[j] == '-';
        if (rstrip) ++j;
        if (b.s.compare(j, 2, "%}") == 0) {
          j += 2;
          if (lstrip) {
            while (!c.s.empty() && IsSpace(c.s.back())) {
              c.s.pop_back();
              c.at.pop_back();
            }
          }
          if (rstrip) {
            while (j < b.s.size() && IsSpace(b.s[j])) ++j;
          }
          i = j;
          continue;
        }
      }
    }
    c.Push(b.s[i], b.at[i]);
    ++i;
  }
  c.at.push_back(static_cast<uint32_t>(source.size()));
  return c;
}

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : source_(source), name_(name), m_(Preprocess(source)) {}

  Result<std::vector<Token>> Run() {
    const std::string& s = m_.s;
    bool in_tag = false;
    TokenKind tag_close = TokenKind::kCloseStmt;
    while (pos_ < s.size()) {
      if (!in_tag) {
        const size_t start = pos_;
        while (pos_ < s.size() && !(s[pos_] == '{' && pos_ + 1 < s.size() &&
                                    (s[pos_ + 1] == '%' || s[pos_ + 1] == '{' || s[pos_ + 1] == '#'))) {
          ++pos_;
        }
        if (pos_ > start) {
          Emit(TokenKind::kText, s.substr(start, pos_ - start), start);
          last_text_end_ = pos_;
        }
        if (pos_ >= s.size()) break;
        const char kind = s[pos_ + 1];
        const size_t open = pos_;
        pos_ += 2;
        const bool strip_before = pos_ < s.size() && s[pos_] == '-';
        if (strip_before || (pos_ < s.size() && s[pos_] == '+')) ++pos_;
        if (strip_before) StripTrailingText(open);
        if (kind == '#') {
          const size_t end = s.find("#}", pos_);
          if (end == std::string::npos) return Error(open, "unclosed comment '{#'");
          const bool strip_after = end > pos_ && s[end - 1] == '-';
          pos_ = end + 2;
          if (strip_after) SkipTextWhitespace();
          continue;
        }
        Emit(kind == '%' ? TokenKind::kOpenStmt : TokenKind::kOpenExpr, kind == '%' ? "{%" : "{{", open);
        tag_close = kind == '%' ? TokenKind::kCloseStmt : TokenKind::kCloseExpr;
        in_tag = true;
        curly_depth_ = 0;
        continue;
      }
      SkipWhitespace();
      if (pos_ >= s.size()) break;
      const char* close = tag_close == TokenKind::kCloseStmt ? "%}" : "}}";
      if (s[pos_] == '-' && s.compare(pos_ + 1, 2, close) == 0) {
        Emit(tag_close, close, pos_);
        pos_ += 3;
        SkipTextWhitespace();
        in_tag = false;
        continue;
      }
      if (s.compare(pos_, 2, close) == 0 && (tag_close == TokenKind::kCloseStmt || curly_depth_ == 0)) {
        Emit(tag_close, close, pos_);
        pos_ += 2;
        in_tag = false;
        continue;
      }
      ZM_RETURN_IF_ERROR(LexInsideTag());
    }
    if (in_tag) return Error(s.size(), "unexpected end of template inside a tag");
    return std::move(tokens_);
  }

 private:
  Status LexInsideTag() {
    const std::string& s = m_.s;
    const char c = s[pos_];
    const size_t start = pos_;
    if (c == '\'' || c == '"') return LexString();
    if (IsDigit(c)) {
      while (pos_ < s.size() && IsDigit(s[pos_])) ++pos_;
      const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator && tokens_.back().text == ".";
      bool is_float = false;
      if (!after_dot && pos_ + 1 < s.size() && s[pos_] == '.' && IsDigit(s[pos_ + 1])) {
        ++pos_;
        while (pos_ < s.size() && IsDigit(s[pos_])) ++pos_;
        is_float = true;
      }
      if (!after_dot && pos_ < s.size() && (s[pos_] == 'e' || s[pos_] == 'E')) {  // 1e3, 1.5e-7 (jinja2's float_re)
        size_t j = pos_ + 1;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        if (j < s.size() && IsDigit(s[j])) {
          while (j < s.size() && IsDigit(s[j])) ++j;
          pos_ = j;
          is_float = true;
        }
      }
      if (is_float) {
        Emit(TokenKind::kFloat, s.substr(start, pos_ - start), start);
      } else {
        Emit(TokenKind::kInt, s.substr(start, pos_ - start), start);
      }
      return Status::Ok();
    }
    if (IsWordChar(c)) {
      while (pos_ < s.size() && IsWordChar(s[pos_])) ++pos_;
      Emit(TokenKind::kName, s.substr(start, pos_ - start), start);
      return Status::Ok();
    }
    static const char* const kTwoChar[] = {"**", "//", "==", "!=", "<=", ">="};
    for (const char* op : kTwoChar) {
      if (s.compare(pos_, 2, op) == 0) {
        Emit(TokenKind::kOperator, op, start);
        pos_ += 2;
        return Status::Ok();
      }
    }
    static const std::string kOneChar = "()[]{},.:|+-~*/%<>=";
    if (kOneChar.find(c) != std::string::npos) {
      if (c == '{') ++curly_depth_;
      if (c == '}') --curly_depth_;
      Emit(TokenKind::kOperator, std::string(1, c), start);
      ++pos_;
      return Status::Ok();
    }
    return Error(start, fmt::format("unexpected character '{}'", c));
  }

  Status LexString() {
    const std::string& s = m_.s;
    const char quote = s[pos_];
    const size_t start = pos_++;
    std::string value;
    while (true) {
      if (pos_ >= s.size()) return Error(start, "unclosed string literal");
      const char c = s[pos_];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= s.size()) return Error(start, "unclosed string literal");
      const char e = s[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': value.push_back('\n'); break;
        case 't': value.push_back('\t'); break;
        case 'r': value.push_back('\r'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'v': value.push_back('\v'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case '\\': value.push_back('\\'); break;
        case 'x':
        case 'u': {
          const size_t n = e == 'x' ? 2 : 4;
          if (pos_ + n > s.size()) return Error(pos_ - 2, "bad hexadecimal escape");
          uint32_t cp = 0;
          for (size_t i = 0; i < n; ++i) {
            const char h = s[pos_ + i];
            const int d = IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) return Error(pos_ - 2, "bad hexadecimal escape");
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          pos_ += n;
          AppendUtf8(cp, &value);
          break;
        }
        default:  // Python keeps an unknown escape as written
          value.push_back('\\');
          value.push_back(e);
      }
    }
    ++pos_;  // closing quote
    Emit(TokenKind::kString, value, start);
    return Status::Ok();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  void SkipWhitespace() {
    while (pos_ < m_.s.size() && IsSpace(m_.s[pos_])) ++pos_;
  }

  // `{%-`, `{{-`, `{#-` at mapped position `open`: strips the whitespace (Python's \s: IsPythonSpace) at
  // the end of the text right before the tag; text before a comment that ends there is not touched,
  // as jinja2 strips only the data token preceding the tag.
  void StripTrailingText(size_t open) {
    if (tokens_.empty() || tokens_.back().kind != TokenKind::kText || last_text_end_ != open) return;
    std::string& text = tokens_.back().text;
    text = Strip(text, nullptr, /*left=*/false, /*right=*/true);
    if (text.empty()) tokens_.pop_back();
  }

  // `-%}`, `-}}`, `-#}`: skips the whitespace (Python's \s) of the text after the tag.
  void SkipTextWhitespace() {
    for (size_t n; pos_ < m_.s.size() && (n = PythonSpaceLength(m_.s, pos_)) > 0;) pos_ += n;
  }

  void Emit(TokenKind kind, std::string text, size_t mapped_pos) {
    tokens_.push_back(Token{kind, std::move(text), m_.at[mapped_pos]});
  }

  Status Error(size_t mapped_pos, const std::string& what) const {
    const SourcePosition p = PositionOf(source_, m_.at[std::min(mapped_pos, m_.at.size() - 1)]);
    return Status::InvalidArgument(fmt::format("{} line {}, column {}: {}", name_, p.line, p.column, what));
  }

  size_t last_text_end_ = 0;  // mapped position just past the last text token
  std::string_view source_;
  const std::string& name_;
  Mapped m_;
  size_t pos_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

SourcePosition PositionOf(std::string_view source, uint32_t offset) {
  SourcePosition p{1, 1};
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

Result<std::vector<Token>> Tokenize(std::string_view source, const std::string& name) {
  return Lexer(source, name).Run();
}

}  // namespace zipmoe::jinja
