// Built-in filters of the template engine (common/jinja/filters.h).
#include "common/jinja/filters.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "common/jinja/methods.h"
#include "common/jinja/tests.h"
#include "common/jinja/text.h"

namespace zipmoe::jinja {
namespace {

using FilterFn = std::function<Result<Value>(const Value&, const Args&)>;

Status Bad(const std::string& filter, const std::string& what) {
  return Status::InvalidArgument(fmt::format("filter '{}': {}", filter, what));
}

Status WrongOperand(const std::string& filter, const Value& v) {
  return Bad(filter, fmt::format("cannot apply to {}", v.KindName()));
}

Result<bool> BoolArg(const Args& args, size_t index, const char* name, bool fallback, const std::string& filter) {
  const Value* v = args.Get(index, name);
  if (v == nullptr) return fallback;
  if (v->kind() != Value::Kind::kBool) return Bad(filter, fmt::format("'{}' must be a boolean", name));
  return v->as_bool();
}

// `item`'s attribute or key at a dotted `path` ("a.b", "items.0"); undefined when absent.
Value AttributePath(const Value& item, const std::string& path) {
  Value v = item;
  const std::string dot = ".";
  for (const std::string& part : Split(path, &dot, -1)) {
    if (v.is_mapping_like()) {
      const Value* next = v.dict().Find(part);
      if (next == nullptr) return Value();
      v = *next;
    } else if (const std::optional<uint64_t> index = v.is_list() ? ParseDecimal(part) : std::nullopt) {
      if (*index >= v.list().size()) return Value();  // "items.99999999999999999999" too: past the end
      v = v.list()[static_cast<size_t>(*index)];
    } else {
      return Value();
    }
  }
  return v;
}

// jinja2's string filters take str() of any operand (soft_str: undefined is "", none "None"): ToString.
FilterFn StringFilter(std::function<std::string(const std::string&)> fn) {
  return [fn](const Value& v, const Args&) -> Result<Value> { return Value::String(fn(v.ToString())); };
}

// The elements of a list, a string (characters) or a dict (keys); none for undefined (jinja2's
// Undefined iterates as empty).
Result<ValueList> Items(const std::string& filter, const Value& v) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return ValueList();
  if (v.is_string()) {
    ValueList out;
    for (const std::string& c : Utf8Chars(v.str())) out.push_back(Value::String(c));
    return out;
  }
  if (v.is_dict()) {
    ValueList out;
    for (const auto& [k, item] : v.dict().items()) out.push_back(Value::String(k));
    return out;
  }
  return WrongOperand(filter, v);
}

Result<Value> Sorted(const std::string& filter, ValueList items, bool reverse, bool case_sensitive,
                     const Value* attribute) {
  Status error;
  auto key = [&](const Value& v) {
    if (attribute == nullptr || attribute->is_none()) return v;
    return AttributePath(v, attribute->is_string() ? attribute->str() : attribute->ToString());
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    if (!error.ok()) return false;
    Result<int> c = CompareValues(key(a), key(b), case_sensitive);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!error.ok()) return Bad(filter, error.message());
  return Value::List(std::move(items));
}

Result<Value> Tojson(const Value& v, const Args& args) {
  JsonOptions options;
  if (const Value* indent = args.Get(0, "indent"); indent != nullptr && !indent->is_none()) {
    if (indent->kind() != Value::Kind::kInt) return Bad("tojson", "indent must be an integer");
    options.indent = static_cast<int>(indent->as_int());
  }
  ZM_ASSIGN_OR_RETURN(options.ensure_ascii, BoolArg(args, 99, "ensure_ascii", false, "tojson"));
  ZM_ASSIGN_OR_RETURN(options.sort_keys, BoolArg(args, 99, "sort_keys", false, "tojson"));
  if (const Value* seps = args.Keyword("separators"); seps != nullptr && !seps->is_none()) {
    if (!seps->is_list() || seps->list().size() != 2 || !seps->list()[0].is_string() ||
        !seps->list()[1].is_string()) {
      return Bad("tojson", "separators must be a tuple of two strings");
    }
    options.item_separator = seps->list()[0].str();
    options.key_separator = seps->list()[1].str();
  }
  ZM_ASSIGN_OR_RETURN(std::string json, ToJson(v, options));
  return Value::String(std::move(json));
}

Result<Value> Join(const Value& v, const Args& args) {
  ZM_ASSIGN_OR_RETURN(ValueList items, Items("join", v));
  std::string sep;
  if (const Value* s = args.Get(0, "d"); s != nullptr) {
    if (!s->is_string()) return Bad("join", "separator must be a string");
    sep = s->str();
  }
  const Value* attribute = args.Get(1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += (attribute != nullptr ? AttributePath(items[i], attribute->ToString()) : items[i]).ToString();
  }
  return Value::String(std::move(out));
}

Result<Value> Indent(const Value& v, const Args& args) {
  const std::string s = v.ToString();
  std::string pad = "    ";
  if (const Value* width = args.Get(0, "width"); width != nullptr) {
    if (width->kind() == Value::Kind::kInt) {
      pad = std::string(static_cast<size_t>(std::max<int64_t>(0, width->as_int())), ' ');
    } else if (width->is_string()) {
      pad = width->str();
    } else {
      return Bad("indent", "width must be an integer or a string");
    }
  }
  ZM_ASSIGN_OR_RETURN(bool first, BoolArg(args, 1, "first", false, "indent"));
  ZM_ASSIGN_OR_RETURN(bool blank, BoolArg(args, 2, "blank", false, "indent"));
  const std::string nl = "\n";
  const std::vector<std::string> lines = Split(s, &nl, -1);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool skip = (!first && i == 0) || (!blank && lines[i].empty());
    if (!skip) out += pad;
    out += lines[i];
  }
  return Value::String(std::move(out));
}

// select / reject / selectattr / rejectattr: keep items whose test (or truthiness) is `keep`.
// As jinja2's select_or_reject: a false operand (undefined, none, empty) selects nothing; the result is
// a generator (Value::Generator).
Result<Value> SelectFilter(const std::string& filter, const Value& v, const Args& args, bool by_attribute, bool keep) {
  if (!v.Truthy()) return Value::Generator({});
  if (!v.is_list()) return WrongOperand(filter, v);
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string()) return Bad(filter, "needs an attribute name");
    attribute = args.positional[next++].str();
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return Bad(filter, "test name must be a string");
    test = args.positional[next++].str();
    if (!IsKnownTest(test)) return Bad(filter, fmt::format("unknown test '{}'", test));
  }
  Args test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  ValueList out;
  for (const Value& item : v.list()) {
    Value subject = item;
    bool result = false;
    if (by_attribute) {
      subject = AttributePath(item, attribute);  // undefined when missing, then tested as jinja2 does
    }
    if (test.empty()) {
      result = subject.Truthy();
    } else {
      ZM_ASSIGN_OR_RETURN(result, ApplyTest(test, subject, test_args));
    }
    if (result == keep) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

Result<Value> Map(const Value& v, const Args& args) {
  if (!v.Truthy()) return Value::Generator({});  // jinja2's do_map: a false operand maps to nothing
  if (!v.is_list()) return WrongOperand("map", v);
  ValueList out;
  if (const Value* attribute = args.Keyword("attribute"); attribute != nullptr) {
    const Value* fallback = args.Keyword("default");
    for (const Value& item : v.list()) {
      Value got = AttributePath(item, attribute->ToString());
      out.push_back(got.is_undefined() && fallback != nullptr ? *fallback : got);
    }
    return Value::Generator(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) return Bad("map", "needs attribute= or a filter name");
  const std::string filter = args.positional[0].str();
  if (!IsKnownFilter(filter)) return Bad("map", fmt::format("unknown filter '{}'", filter));
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : v.list()) {
    ZM_ASSIGN_OR_RETURN(Value mapped, ApplyFilter(filter, item, rest));
    out.push_back(std::move(mapped));
  }
  return Value::Generator(std::move(out));
}

Result<Value> Dictsort(const Value& v, const Args& args) {
  if (!v.is_mapping_like()) return WrongOperand("dictsort", v);
  ZM_ASSIGN_OR_RETURN(bool case_sensitive, BoolArg(args, 0, "case_sensitive", false, "dictsort"));
  const Value* by = args.Get(1, "by");
  const bool by_value = by != nullptr && by->is_string() && by->str() == "value";
  if (by != nullptr && !(by->is_string() && (by->str() == "key" || by->str() == "value"))) {
    return Bad("dictsort", "by must be 'key' or 'value'");
  }
  ZM_ASSIGN_OR_RETURN(bool reverse, BoolArg(args, 2, "reverse", false, "dictsort"));
  ValueList pairs;
  for (const auto& [k, item] : v.dict().items()) pairs.push_back(Value::List({Value::String(k), item}));
  const Value attribute = Value::String(by_value ? "1" : "0");
  return Sorted("dictsort", std::move(pairs), reverse, case_sensitive, &attribute);
}

Result<Value> Number(const std::string& filter, const Value& v, const Args& args) {
  const bool to_int = filter == "int";
  const Value* fallback = args.Get(0, "default");
  const Value dflt = fallback != nullptr ? *fallback : (to_int ? Value::Int(0) : Value::Float(0));
  switch (v.kind()) {
    case Value::Kind::kInt:
      return to_int ? v : Value::Float(static_cast<double>(v.as_int()));
    case Value::Kind::kFloat:
      return to_int ? Value::Int(static_cast<int64_t>(std::trunc(v.as_float()))) : v;
    case Value::Kind::kBool:
      return to_int ? Value::Int(v.as_bool() ? 1 : 0) : Value::Float(v.as_bool() ? 1 : 0);
    case Value::Kind::kString: {
      const std::string s = Strip(v.str(), nullptr, true, true);
      if (s.empty()) return dflt;
      char* end = nullptr;
      if (to_int) {
        const long long i = std::strtoll(s.c_str(), &end, 10);
        if (end != s.c_str() + s.size()) {
          const double d = std::strtod(s.c_str(), &end);  // jinja2: int("1.5") → 1
          if (end != s.c_str() + s.size()) return dflt;
          return Value::Int(static_cast<int64_t>(std::trunc(d)));
        }
        return Value::Int(i);
      }
      const double d = std::strtod(s.c_str(), &end);
      if (end != s.c_str() + s.size()) return dflt;
      return Value::Float(d);
    }
    default:
      return WrongOperand(filter, v);
  }
}

Result<Value> Aggregate(const std::string& filter, const Value& v, const Args& args) {
  ZM_ASSIGN_OR_RETURN(ValueList items, Items(filter, v));
  const Value* attribute = args.Keyword("attribute");
  if (attribute != nullptr) {
    for (Value& item : items) item = AttributePath(item, attribute->ToString());
  }
  if (filter == "sum") {
    const Value* start = args.Keyword("start");
    Value total = start != nullptr ? *start : Value::Int(0);
    for (const Value& item : items) {
      if (!item.is_number() || !total.is_number()) return Bad("sum", "items must be numbers");
      total = total.kind() == Value::Kind::kInt && item.kind() == Value::Kind::kInt
                  ? Value::Int(total.as_int() + item.as_int())
                  : Value::Float(total.AsDouble() + item.AsDouble());
    }
    return total;
  }
  if (items.empty()) return Value();
  ZM_ASSIGN_OR_RETURN(bool case_sensitive, BoolArg(args, 0, "case_sensitive", false, filter));
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    Result<int> c = CompareValues(items[i], best, case_sensitive);
    if (!c.ok()) return Bad(filter, c.status().message());
    if (filter == "min" ? *c < 0 : *c > 0) best = items[i];
  }
  return best;
}

const std::map<std::string, FilterFn>& Registry() {
  static const auto registry = [] {
    std::map<std::string, FilterFn> r;
    r["safe"] = [](const Value& v, const Args&) -> Result<Value> { return Value::Markup(v.ToString()); };
    r["tojson"] = Tojson;
    r["upper"] = StringFilter(AsciiUpper);
    r["lower"] = StringFilter(AsciiLower);
    r["title"] = StringFilter(TitleCase);
    r["capitalize"] = StringFilter(Capitalize);
    r["e"] = r["escape"] = [](const Value& v, const Args&) -> Result<Value> {
      return v.is_markup() ? v : Value::Markup(HtmlEscape(v.ToString()));
    };
    r["trim"] = [](const Value& v, const Args& args) -> Result<Value> {
      const std::string s = v.ToString();
      const Value* chars = args.Get(0, "chars");
      return Value::String(Strip(s, chars != nullptr && chars->is_string() ? &chars->str() : nullptr, true, true));
    };
    r["length"] = r["count"] = [](const Value& v, const Args&) -> Result<Value> {
      if (v.is_generator()) return Bad("length", "TypeError: object of type 'generator' has no len()");
      if (v.is_string()) return Value::Int(static_cast<int64_t>(Utf8Length(v.str())));
      if (v.is_list()) return Value::Int(static_cast<int64_t>(v.list().size()));
      if (v.is_mapping_like()) return Value::Int(static_cast<int64_t>(v.dict().size()));
      if (v.is_undefined()) return Value::Int(0);
      return WrongOperand("length", v);
    };
    r["wordcount"] = [](const Value& v, const Args&) -> Result<Value> {
      const std::string s = v.ToString();
      return Value::Int(static_cast<int64_t>(Split(s, nullptr, -1).size()));
    };
    for (const char* name : {"first", "last"}) {
      const bool first = std::string(name) == "first";
      r[name] = [first, name](const Value& v, const Args&) -> Result<Value> {
        ZM_ASSIGN_OR_RETURN(ValueList items, Items(name, v));
        if (items.empty()) return Value();
        return first ? items.front() : items.back();
      };
    }
    r["join"] = Join;
    r["default"] = r["d"] = [](const Value& v, const Args& args) -> Result<Value> {
      const Value* fallback = args.Get(0, "default_value");
      ZM_ASSIGN_OR_RETURN(bool boolean, BoolArg(args, 1, "boolean", false, "default"));
      if (v.is_undefined() || (boolean && !v.Truthy())) return fallback != nullptr ? *fallback : Value::String("");
      return v;
    };
    r["items"] = [](const Value& v, const Args&) -> Result<Value> {
      if (v.is_undefined()) return Value::List();
      if (!v.is_mapping_like()) return WrongOperand("items", v);
      ValueList out;
      for (const auto& [k, item] : v.dict().items()) out.push_back(Value::List({Value::String(k), item}));
      return Value::List(std::move(out));
    };
    r["list"] = [](const Value& v, const Args&) -> Result<Value> {
      ZM_ASSIGN_OR_RETURN(ValueList items, Items("list", v));
      return Value::List(std::move(items));
    };
    r["string"] = [](const Value& v, const Args&) -> Result<Value> { return Value::String(v.ToString()); };
    r["int"] = [](const Value& v, const Args& args) { return Number("int", v, args); };
    r["float"] = [](const Value& v, const Args& args) { return Number("float", v, args); };
    r["bool"] = [](const Value& v, const Args&) -> Result<Value> { return Value::Bool(v.Truthy()); };
    r["abs"] = [](const Value& v, const Args&) -> Result<Value> {
      if (v.kind() == Value::Kind::kInt) return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
      if (v.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(v.as_float()));
      return WrongOperand("abs", v);
    };
    r["round"] = [](const Value& v, const Args& args) -> Result<Value> {
      if (!v.is_number()) return WrongOperand("round", v);
      const Value* precision = args.Get(0, "precision");
      const Value* method = args.Get(1, "method");
      const int64_t digits = precision != nullptr && precision->kind() == Value::Kind::kInt ? precision->as_int() : 0;
      const std::string how = method != nullptr && method->is_string() ? method->str() : "common";
      const double scale = std::pow(10.0, static_cast<double>(digits));
      const double x = v.AsDouble() * scale;
      const double rounded = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::round(x);
      return Value::Float(rounded / scale);
    };
    r["replace"] = [](const Value& v, const Args& args) -> Result<Value> {
      if (!v.is_string()) return WrongOperand("replace", v);
      return GetMethod(v, "replace").function()(args);
    };
    r["selectattr"] = [](const Value& v, const Args& a) { return SelectFilter("selectattr", v, a, true, true); };
    r["rejectattr"] = [](const Value& v, const Args& a) { return SelectFilter("rejectattr", v, a, true, false); };
    r["select"] = [](const Value& v, const Args& a) { return SelectFilter("select", v, a, false, true); };
    r["reject"] = [](const Value& v, const Args& a) { return SelectFilter("reject", v, a, false, false); };
    r["map"] = Map;
    r["unique"] = [](const Value& v, const Args&) -> Result<Value> {
      ZM_ASSIGN_OR_RETURN(ValueList items, Items("unique", v));
      ValueList out;
      for (const Value& item : items) {
        if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.Equals(item); })) out.push_back(item);
      }
      return Value::Generator(std::move(out));
    };
    r["sort"] = [](const Value& v, const Args& args) -> Result<Value> {
      ZM_ASSIGN_OR_RETURN(ValueList items, Items("sort", v));
      ZM_ASSIGN_OR_RETURN(bool reverse, BoolArg(args, 0, "reverse", false, "sort"));
      ZM_ASSIGN_OR_RETURN(bool case_sensitive, BoolArg(args, 1, "case_sensitive", false, "sort"));
      return Sorted("sort", std::move(items), reverse, case_sensitive, args.Get(2, "attribute"));
    };
    r["reverse"] = [](const Value& v, const Args&) -> Result<Value> {
      if (v.is_string()) {
        std::vector<std::string> chars = Utf8Chars(v.str());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return Value::String(std::move(out));
      }
      ZM_ASSIGN_OR_RETURN(ValueList items, Items("reverse", v));
      std::reverse(items.begin(), items.end());
      return v.is_list() && !v.is_generator() ? Value::Generator(std::move(items))  // Python's reversed(list)
                                                : Value::List(std::move(items));
    };
    r["indent"] = Indent;
    r["dictsort"] = Dictsort;
    r["batch"] = [](const Value& v, const Args& args) -> Result<Value> {
      ZM_ASSIGN_OR_RETURN(ValueList items, Items("batch", v));
      const Value* size = args.Get(0, "linecount");
      if (size == nullptr || size->kind() != Value::Kind::kInt || size->as_int() <= 0) {
        return Bad("batch", "needs a positive size");
      }
      const Value* fill = args.Get(1, "fill_with");
      const size_t n = static_cast<size_t>(size->as_int());
      ValueList out;
      for (size_t i = 0; i < items.size(); i += n) {
        ValueList row(items.begin() + static_cast<std::ptrdiff_t>(i),
                      items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + n)));
        while (fill != nullptr && row.size() < n) row.push_back(*fill);
        out.push_back(Value::List(std::move(row)));
      }
      return Value::List(std::move(out));
    };
    for (const char* name : {"sum", "min", "max"}) {
      r[name] = [name](const Value& v, const Args& args) { return Aggregate(name, v, args); };
    }
    return r;
  }();
  return registry;
}

}  // namespace

bool IsKnownFilter(const std::string& name) { return Registry().count(name) > 0; }

Result<Value> ApplyFilter(const std::string& name, const Value& operand, const Args& args) {
  auto it = Registry().find(name);
  if (it == Registry().end()) return Status::InvalidArgument(fmt::format("unknown filter '{}'", name));
  return it->second(operand, args);
}

}  // namespace zipmoe::jinja
