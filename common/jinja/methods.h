// Methods and properties of values (common/jinja/): `value.name` when `name` is not a stored key.
//
//   string: upper lower strip lstrip rstrip (optional chars) title capitalize startswith endswith
//           (a string or a list of them) split rsplit replace find rfind count join format
//           length (a property, as @huggingface/jinja)
//   dict:   items keys values get(key, default=none) dictsort
//   list:   index count; length (a property)
// A method is returned bound to its object (a function value). The methods that would modify a list
// (append extend insert pop remove reverse sort clear) or a dict (pop popitem setdefault update clear)
// are functions that fail with jinja2's SecurityError, as in the ImmutableSandboxedEnvironment
// transformers renders chat templates in. Pure; any thread.
#pragma once

#include <string>

#include "common/jinja/value.h"

namespace zipmoe::jinja {

// The method or property `name` of `object`, or undefined when it has none.
Value GetMethod(const Value& object, const std::string& name);

// True if `name` is a method of Python's dict (items keys values get copy fromkeys pop popitem
// setdefault update clear): jinja2's `d.name` finds the method before the key of that name.
bool IsDictMethodName(const std::string& name);

}  // namespace zipmoe::jinja
