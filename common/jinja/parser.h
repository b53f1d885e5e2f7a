// Template parser (common/jinja/): tokens (lexer.h) → syntax tree (ast.h).
//
// Grammar and precedence follow @huggingface/jinja's parser (lowest first): ternary `a if c else
// b`; `or`; `and`; `not`; comparisons and `in` / `not in` (chained as Python); `+ - ~`;
// `* / // %`; `**`; `is [not] test(args)`; `| filter(args)`; unary `- +`; calls, `.attr`,
// `[index]`, `[a:b:c]`; literals, names, `( )`, `[ ]`, `{ }`. Statements: if/elif/else, for (with
// `if` filter and else), set (also block set and `ns.attr =`), macro, call, filter, break,
// continue. Filter and test names are checked against the known ones here, so an unknown filter
// fails at parse time. Pure; callable from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/jinja/ast.h"
#include "common/jinja/lexer.h"
#include "common/status.h"

namespace zipmoe::jinja {

// Parses `tokens` of `source` into the template body. Errors: kInvalidArgument
// "<name> line L, column C: ..." (unexpected token, unclosed block, unknown filter or test).
Result<std::vector<NodePtr>> Parse(const std::vector<Token>& tokens, std::string_view source,
                                   const std::string& name);

}  // namespace zipmoe::jinja
