// Built-in filters of the template engine (common/jinja/): `value | name(args)`.
//
// Semantics follow @huggingface/jinja where it implements a filter (tojson, trim, upper, lower,
// title, capitalize, length/count, first, last, join, default/d, items, list, string, int, float,
// abs, replace, selectattr, rejectattr, map(attribute=...), unique, sort, reverse, indent, safe,
// dictsort) and jinja2 for the ones it lacks (e/escape, wordcount, select, reject, map(filter),
// batch, sum, min, max, round, bool). String filters need a string operand (none is not "None").
// Pure; callable from any thread.
#pragma once

#include <string>

#include "common/jinja/value.h"
#include "common/status.h"

namespace zipmoe::jinja {

bool IsKnownFilter(const std::string& name);

// Applies filter `name` to `operand`. Errors: kInvalidArgument (wrong operand or argument type,
// unknown filter) without a template position; the evaluator adds the line.
Result<Value> ApplyFilter(const std::string& name, const Value& operand, const Args& args);

}  // namespace zipmoe::jinja
