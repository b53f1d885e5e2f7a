// Methods and properties of values (common/jinja/): `value.name` when `name` is not a stored key.
//
//   string: upper lower strip lstrip rstrip (optional chars) title capitalize startswith endswith
//           (a string or a list of them) split rsplit replace find rfind count join format
//           length (a property, as @huggingface/jinja)
//   dict:   items keys values get(key, default=none) dictsort
//   list:   append extend insert pop index count; length (a property)
// A method is returned bound to its object (a function value); list methods mutate the list in
// place (as the Python list templates manipulate). Pure apart from that; any thread.
#pragma once

#include <string>

#include "common/jinja/value.h"

namespace zipmoe::jinja {

// The method or property `name` of `object`, or undefined when it has none.
Value GetMethod(const Value& object, const std::string& name);

}  // namespace zipmoe::jinja
