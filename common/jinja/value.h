// jinja::Value: the dynamically typed value of the template engine (common/jinja/jinja.h).
//
// Kinds follow jinja2's runtime on Python values (transformers renders chat templates with jinja2;
// tests/chat_template_reference compares with it and with @huggingface/jinja):
// undefined, none, bool, int (int64), float (double), string (UTF-8), list (tuples are lists),
// dict (insertion-ordered string keys), namespace (a dict that `set ns.x = ...` may write) and
// function (a built-in, a macro or a bound method). Lists, dicts and namespaces are shared by
// reference, as in Python: copying a Value copies the handle, not the elements.
// Not thread-safe: a Value belongs to one render on one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe::jinja {

class Value;
using ValueList = std::vector<Value>;

// Insertion-ordered string-keyed map (chat templates hold small dicts; lookups are linear).
class ValueDict {
 public:
  const Value* Find(const std::string& key) const;
  Value* Find(const std::string& key);
  void Set(const std::string& key, Value value);  // replaces in place, else appends
  bool Erase(const std::string& key);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

// Call arguments: positional values, then keyword arguments in call order.
struct Args {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` if given positionally, else keyword `name`, else nullptr.
  const Value* Get(size_t index, const std::string& name) const;
  const Value* Keyword(const std::string& name) const;
};

using NativeFunction = std::function<Result<Value>(const Args& args)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  // markupsafe's Markup (the `safe` and `escape` filters): a string that `+` joins with another string
  // by HTML-escaping the other one, as Markup.__add__ / __radd__ do.
  static Value Markup(std::string s);
  static Value List(ValueList items = {});
  // What jinja2's lazy filters return (select, reject, selectattr, rejectattr, map, unique, batch and
  // reverse of a list: Python generators / iterators): iterable like a list, but always true, without
  // a length, not indexable (undefined), not JSON-serializable, printed as "<generator object>".
  static Value Generator(ValueList items);
  static Value Dict(ValueDict dict = {});
  static Value Namespace(ValueDict dict = {});
  static Value Function(std::string name, NativeFunction fn);
  // JSON → Value: null → none, integers → int, other numbers → float, objects keep key order.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_generator() const { return kind_ == Kind::kList && generator_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_mapping_like() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  double as_float() const { return float_; }
  double AsDouble() const;  // int, float or bool as a double
  const std::string& str() const { return *string_; }
  ValueList& list() const { return *list_; }    // kList only
  ValueDict& dict() const { return *dict_; }    // kDict or kNamespace only
  const std::string& function_name() const { return *string_; }
  const NativeFunction& function() const { return *function_; }

  // Python truthiness: undefined/none/false/0/""/[]/{} are false.
  bool Truthy() const;
  // What {{ value }} prints: Python's str() of the value, as jinja2 (transformers' engine) prints it:
  // undefined prints nothing, none "None", booleans "True"/"False", floats as Python's repr ("1.0",
  // "1e-07", "inf"), lists and dicts as Python's repr ("['a', 1]", "{'k': True}").
  std::string ToString() const;
  // Python's repr(): strings quoted and escaped as Python does (PyStringRepr), the rest as ToString;
  // an undefined value inside a list shows as "Undefined".
  std::string Repr() const;
  // Kind name for error messages ("string", "list", ...).
  const char* KindName() const;
  // Deep equality: numbers (and booleans) by value, strings by bytes, none == undefined.
  bool Equals(const Value& other) const;
  // Same object: lists/dicts by handle, scalars by Equals (the `in` operator on lists).
  bool Identical(const Value& other) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  bool generator_ = false;  // kList made by a lazy filter (Generator)
  bool markup_ = false;     // kString made by Markup
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;  // kString; kFunction: its name
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const NativeFunction> function_;
};

// JSON text of `value` (the tojson filter, as Python's json.dumps(ensure_ascii=False) and
// @huggingface/jinja): separators ", " / ": ", or "," / ": " when `indent` > 0, or `separators`.
// Errors: kInvalidArgument for a function inside `value`.
struct JsonOptions {
  int indent = 0;  // 0: one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: the default for `indent`
  std::string key_separator;
  bool undefined_as_null = true;  // false: "undefined" (how a printed list shows it)
};
Result<std::string> ToJson(const Value& value, const JsonOptions& options);

// Python repr of a float as json.dumps and str() write it ("1.0", "0.1", "1e-07").
std::string FloatRepr(double f);
// Python's repr() of a str: single quotes unless the text holds a ' and no ", backslash escapes for
// the quote, \\, \\n, \\r, \\t, \\xNN / \\uNNNN / \\UNNNNNNNN for characters str.isprintable() rejects
// (general categories C* and Z* except the space; from libutf8proc's tables).
std::string PyStringRepr(const std::string& s);

// Orders two values for sort/dictsort/min/max: numbers (and booleans) numerically, strings
// bytewise (lower-cased first unless case_sensitive); none with none and undefined with undefined
// are equal. Errors: kInvalidArgument for other pairs. Returns <0, 0 or >0.
Result<int> CompareValues(const Value& a, const Value& b, bool case_sensitive);

}  // namespace zipmoe::jinja
