// Built-in tests of the template engine (common/jinja/): `value is [not] name(args)`.
//
// defined, undefined, none, string, number, integer, float, boolean, mapping (dicts), iterable
// (lists and strings), sequence (lists, dicts, strings), callable, even, odd, true, false,
// lower, upper, equalto/eq/==, ne/!=, gt/>, ge/>=, lt/<, le/<=, in, divisibleby, sameas.
// Type tests follow @huggingface/jinja (a boolean is not a number). Pure; any thread.
#pragma once

#include <string>

#include "common/jinja/value.h"
#include "common/status.h"

namespace zipmoe::jinja {

bool IsKnownTest(const std::string& name);

// Errors: kInvalidArgument (odd/even of a non-integer, a missing argument, unknown test).
Result<bool> ApplyTest(const std::string& name, const Value& operand, const Args& args);

}  // namespace zipmoe::jinja
