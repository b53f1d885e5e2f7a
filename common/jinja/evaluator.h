// Template evaluator (common/jinja/): renders a syntax tree (ast.h) against variables.
//
// Scoping follows @huggingface/jinja (and jinja2 for the cases chat templates rely on): `for`
// and macro bodies get a child scope, so a `set` inside a loop is not seen after it (use a
// namespace); `if` bodies share their parent's scope; macros see the scope they were defined in.
// Undefined values print nothing and are falsy; their attributes are undefined too; arithmetic
// or a filter that needs a value fails on them. One Evaluator serves one render on one thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/jinja/ast.h"
#include "common/jinja/value.h"
#include "common/status.h"

namespace zipmoe::jinja {

// Variables of one scope, chained to the enclosing one.
struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent_scope) : parent(std::move(parent_scope)) {}
  const Value* Lookup(const std::string& name) const;
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

// Renders `body` (of template `name`, from `source`) in `scope`.
// Errors: kInvalidArgument "<name> line L, column C: ..." naming the node that failed
// (raise_exception's message included verbatim).
Result<std::string> Render(const std::vector<NodePtr>& body, std::string_view source, const std::string& name,
                           const ScopePtr& scope);

}  // namespace zipmoe::jinja
