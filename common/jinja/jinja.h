// jinja::Template: a Jinja template engine for Hugging Face chat templates (tokenizer_config.json
// "chat_template", chat_template.jinja).
//
// Renders as transformers' apply_chat_template does: jinja2 in an ImmutableSandboxedEnvironment with
// trim_blocks + lstrip_blocks (transformers/utils/chat_template_utils.py). The tests compare byte for
// byte with jinja2 itself (Debian's python3-jinja2, in that environment) and with @huggingface/jinja on
// ~90 real templates (tests/chat_template_reference); where the two engines differ, jinja2 is followed:
// values print as Python's str() (None, True, ['a', 1], {'k': 2}), undefined prints nothing and
// iterates as empty but refuses attribute access, list/dict mutators raise SecurityError, select /
// map / ... return generators (always true, no length, not JSON), `safe` / `escape` make markupsafe
// Markup, an unknown filter fails at parse time outside `if` branches, tojson keeps non-ASCII and does
// not escape HTML. Not done: tuples (they are lists, printed with brackets), dict views (keys() /
// items() print as lists), dict literals with non-string keys (refused).
// Supported: {{ }}, {% %}, {# #}, "-" whitespace control;
// if/elif/else, for (loop.*, `if` filter, else, tuple unpacking), set (block set, namespace
// attributes), macro (defaults, keyword arguments, caller), call, filter blocks, break/continue,
// generation; the expression grammar of parser.h; the filters of filters.h, the tests of tests.h
// and the methods of methods.h; globals range, namespace, dict, raise_exception, strftime_now.
//
// Thread-safety: Parse once, then Render from any number of threads at once (Render is const
// and each render has its own variables). SetGlobal/SetClock are not thread-safe: call them
// before sharing the Template. Copies share the parsed tree (cheap).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/jinja/value.h"
#include "common/status.h"

namespace zipmoe::jinja {

class Template {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  // Parses `source`; `name` prefixes error messages ("chat_template line 12, column 5: ...").
  // Errors: kInvalidArgument for bad syntax, an unclosed block, an unknown filter or test.
  static Result<Template> Parse(std::string_view source, std::string name = "template");

  // Renders with `context`'s top-level keys as variables (a JSON object; object key order is
  // kept, which tojson output depends on). Errors: kInvalidArgument "<name> line L, column C:
  // ..." for a failing operation, or raise_exception('msg') (the message contains msg).
  Result<std::string> Render(const nlohmann::ordered_json& context) const;
  // Same, for an nlohmann::json (whose objects iterate in sorted key order).
  Result<std::string> Render(const nlohmann::json& context) const;

  // Adds or replaces a global variable or function (seen by every render, below the context).
  void SetGlobal(const std::string& name, Value value);
  // The clock of strftime_now (local time); default: the system clock.
  void SetClock(Clock clock);

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;
  std::map<std::string, Value> globals_;
  Clock clock_;
};

}  // namespace zipmoe::jinja
