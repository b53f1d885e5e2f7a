// Template lexer (common/jinja/): turns template source into tokens.
//
// Whitespace handling is that of @huggingface/jinja's Template, which transformers' own settings
// (trim_blocks=True, lstrip_blocks=True) are meant to reproduce, applied before tokenizing:
//   1. one trailing "\n" of the template is dropped (jinja2's keep_trailing_newline=False);
//   2. lstrip_blocks: spaces/tabs between a line start and "{%", "{#" or "{-" are dropped;
//   3. trim_blocks: a "\n" right after "%}", "#}" or "-}" is dropped;
//   4. {% generation %} / {% endgeneration %} tags are removed (their body renders), a "-" on
//      either side strips the whitespace on that side.
// Then "{%-", "{{-", "{#-" strip all whitespace before the tag and "-%}", "-}}", "-#}" all
// whitespace after it. Every token keeps its byte offset in the ORIGINAL source, so errors can
// name the original line and column. Pure; callable from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace zipmoe::jinja {

enum class TokenKind {
  kText,        // text outside tags (text = the text)
  kOpenStmt,    // {%
  kCloseStmt,   // %}
  kOpenExpr,    // {{
  kCloseExpr,   // }}
  kName,        // identifier or keyword (text = the word)
  kString,      // string literal (text = the decoded value)
  kInt,         // integer literal (text = digits)
  kFloat,       // float literal (text = digits.digits)
  kOperator,    // punctuation and operators: ( ) [ ] { } , . : | + - ~ * / // % ** == != < <= > >= =
};

struct Token {
  TokenKind kind;
  std::string text;
  uint32_t offset;  // byte offset of the token in the original source
};

// 1-based line and column of byte `offset` of `source`.
struct SourcePosition {
  int line;
  int column;
};
SourcePosition PositionOf(std::string_view source, uint32_t offset);

// Tokenizes `source`. Errors: kInvalidArgument "<name> line L, column C: ..." for an unclosed
// comment or string, an unknown character or a bad escape.
Result<std::vector<Token>> Tokenize(std::string_view source, const std::string& name);

}  // namespace zipmoe::jinja
