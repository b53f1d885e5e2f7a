// Syntax tree of a parsed template (common/jinja/): one Node type whose `kind` says which fields
// are used. Built once by the parser, then read-only (renders on many threads may share it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/jinja/value.h"

namespace zipmoe::jinja {

struct Node;
using NodePtr = std::unique_ptr<Node>;

enum class NodeKind {
  // Statements
  kText,         // text: literal output
  kOutput,       // {{ a }}
  kIf,           // if a: body, else: alt (an elif is an If inside alt)
  kFor,          // for a (target) in b (iterable) [if c (filter, may be null)]: body, else: alt
  kSet,          // set a (target) = b; or block set (b null): body
  kMacro,        // macro text(params): body
  kCallBlock,    // call(params) a (a Call node): body; `caller()` renders body
  kFilterBlock,  // filter a (a Filter node with no operand): body
  kBreak,
  kContinue,
  // Expressions
  kLiteral,      // literal
  kName,         // text
  kList,         // children
  kTuple,        // children
  kDict,         // children: key, value, key, value, ...
  kAttr,         // a.text
  kIndex,        // a[b]
  kSlice,        // a[b:c:d], absent parts null
  kCall,         // a(args)
  kFilter,       // a | text(args); a null in a filter block
  kTest,         // a is [not] text(args); negate
  kUnary,        // text a: "-", "+", "not"
  kBinary,       // a text b: + - * / // % ** ~ in "not in" and or
  kCompare,      // children[0] ops[0] children[1] ops[1] ... (Python chained comparison)
  kTernary,      // a if b else c (c null: undefined when b is false)
};

struct Arg {
  std::string name;  // keyword name; empty for a positional argument
  NodePtr value;     // a default value, for macro parameters (may be null)
  bool star = false;         // *value
  bool double_star = false;  // **value
};

struct Node {
  NodeKind kind;
  uint32_t offset = 0;  // byte offset in the template source (for error lines)
  std::string text;
  Value literal;
  NodePtr a, b, c, d;
  std::vector<NodePtr> children;
  std::vector<std::string> ops;
  std::vector<Arg> args;
  std::vector<NodePtr> body, alt;
  bool negate = false;
};

}  // namespace zipmoe::jinja
