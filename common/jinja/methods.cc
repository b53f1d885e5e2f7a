// Methods and properties of values (common/jinja/methods.h).
#include "common/jinja/methods.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "common/jinja/filters.h"
#include "common/jinja/text.h"

namespace zipmoe::jinja {
namespace {

Status TypeError(const std::string& method, const char* what) {
  return Status::InvalidArgument(fmt::format("{}() {}", method, what));
}

// The optional string argument `index`/`name`: null when absent or none.
Result<const std::string*> OptionalString(const Args& args, size_t index, const char* name, const std::string& method) {
  const Value* v = args.Get(index, name);
  if (v == nullptr || v->is_none()) return static_cast<const std::string*>(nullptr);
  if (!v->is_string()) return TypeError(method, "argument must be a string or none");
  return &v->str();
}

Result<int64_t> OptionalInt(const Args& args, size_t index, const char* name, int64_t fallback,
                            const std::string& method) {
  const Value* v = args.Get(index, name);
  if (v == nullptr || v->is_none()) return fallback;
  if (v->kind() != Value::Kind::kInt) return TypeError(method, "argument must be an integer");
  return v->as_int();
}

Value StringList(const std::vector<std::string>& parts) {
  ValueList items;
  for (const std::string& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

// Python str.format with "{}" / "{0}" / "{name}" fields ("{{" and "}}" are braces).
Result<std::string> Format(const std::string& pattern, const Args& args) {
  std::string out;
  size_t next_auto = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '{' && i + 1 < pattern.size() && pattern[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < pattern.size() && pattern[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      const size_t end = pattern.find('}', i);
      if (end == std::string::npos) return TypeError("format", "has an unclosed '{'");
      const std::string field = pattern.substr(i + 1, end - i - 1);
      const Value* v = nullptr;
      if (field.empty()) {
        v = next_auto < args.positional.size() ? &args.positional[next_auto++] : nullptr;
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const std::optional<uint64_t> index = ParseDecimal(field);  // nullopt past UINT64_MAX: no such argument
        v = index && *index < args.positional.size() ? &args.positional[static_cast<size_t>(*index)] : nullptr;
      } else {
        v = args.Keyword(field);
      }
      if (v == nullptr) return TypeError("format", "has a field without an argument");
      out += v->ToString();
      i = end;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Value StringMethod(const Value& object, const std::string& name) {
  const std::string s = object.str();
  auto bind = [&](NativeFunction fn) { return Value::Function("str." + name, std::move(fn)); };
  if (name == "length") return Value::Int(static_cast<int64_t>(Utf8Length(s)));
  if (name == "upper") return bind([s](const Args&) -> Result<Value> { return Value::String(AsciiUpper(s)); });
  if (name == "lower") return bind([s](const Args&) -> Result<Value> { return Value::String(AsciiLower(s)); });
  if (name == "title") return bind([s](const Args&) -> Result<Value> { return Value::String(TitleCase(s)); });
  if (name == "capitalize") {
    return bind([s](const Args&) -> Result<Value> { return Value::String(Capitalize(s)); });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bind([s, name, left, right](const Args& args) -> Result<Value> {
      ZM_ASSIGN_OR_RETURN(const std::string* chars, OptionalString(args, 0, "chars", name));
      return Value::String(Strip(s, chars, left, right));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bind([s, name, starts](const Args& args) -> Result<Value> {
      const Value* arg = args.Get(0, "prefix");
      if (arg == nullptr) return TypeError(name, "needs an argument");
      auto match = [&](const std::string& p) { return starts ? StartsWith(s, p) : EndsWith(s, p); };
      if (arg->is_string()) return Value::Bool(match(arg->str()));
      if (arg->is_list()) {
        for (const Value& item : arg->list()) {
          if (!item.is_string()) return TypeError(name, "tuple elements must be strings");
          if (match(item.str())) return Value::Bool(true);
        }
        return Value::Bool(false);
      }
      return TypeError(name, "argument must be a string or a tuple of strings");
    });
  }
  if (name == "split" || name == "rsplit") {
    return bind([s, name](const Args& args) -> Result<Value> {
      ZM_ASSIGN_OR_RETURN(const std::string* sep, OptionalString(args, 0, "sep", name));
      ZM_ASSIGN_OR_RETURN(int64_t maxsplit, OptionalInt(args, 1, "maxsplit", -1, name));
      if (sep != nullptr && sep->empty()) return TypeError(name, "empty separator");
      return StringList(name == "split" ? Split(s, sep, maxsplit) : RSplit(s, sep, maxsplit));
    });
  }
  if (name == "replace") {
    return bind([s](const Args& args) -> Result<Value> {
      const Value* old_text = args.Get(0, "old");
      const Value* new_text = args.Get(1, "new");
      if (old_text == nullptr || new_text == nullptr || !old_text->is_string() || !new_text->is_string()) {
        return TypeError("replace", "needs two string arguments");
      }
      ZM_ASSIGN_OR_RETURN(int64_t count, OptionalInt(args, 2, "count", -1, "replace"));
      return Value::String(Replace(s, old_text->str(), new_text->str(), count));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return bind([s, name](const Args& args) -> Result<Value> {
      const Value* sub = args.Get(0, "sub");
      if (sub == nullptr || !sub->is_string()) return TypeError(name, "needs a string argument");
      if (name == "count") return Value::Int(CountOccurrences(s, sub->str()));
      const size_t at = name == "find" ? s.find(sub->str()) : s.rfind(sub->str());
      return Value::Int(at == std::string::npos ? -1 : static_cast<int64_t>(at));
    });
  }
  if (name == "join") {
    return bind([s](const Args& args) -> Result<Value> {
      const Value* items = args.Get(0, "iterable");
      if (items == nullptr || !items->is_list()) return TypeError("join", "needs a list");
      std::string out;
      for (size_t i = 0; i < items->list().size(); ++i) {
        if (i > 0) out += s;
        out += items->list()[i].ToString();
      }
      return Value::String(std::move(out));
    });
  }
  if (name == "format") {
    return bind([s](const Args& args) -> Result<Value> {
      ZM_ASSIGN_OR_RETURN(std::string out, Format(s, args));
      return Value::String(std::move(out));
    });
  }
  return Value();
}

// transformers renders templates in jinja2's ImmutableSandboxedEnvironment, where the methods that
// modify a list or dict in place are unsafe: using one raises a SecurityError.
bool IsUnsafeMutator(const Value& object, const std::string& name) {
  static const char* const kList[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  static const char* const kDict[] = {"pop", "popitem", "setdefault", "update", "clear"};
  if (object.is_list()) return std::find(std::begin(kList), std::end(kList), name) != std::end(kList);
  if (object.is_dict()) return std::find(std::begin(kDict), std::end(kDict), name) != std::end(kDict);
  return false;
}

Value Unsafe(const Value& object, const std::string& name) {
  const std::string type = object.is_list() ? "list" : "dict";
  return Value::Function(type + "." + name, [name, type](const Args&) -> Result<Value> {
    return Status::InvalidArgument(
        fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name, type));
  });
}

Value DictMethod(const Value& object, const std::string& name) {
  auto bind = [&](NativeFunction fn) { return Value::Function("dict." + name, std::move(fn)); };
  if (name == "items" || name == "keys" || name == "values") {
    return bind([object, name](const Args&) -> Result<Value> {
      ValueList out;
      for (const auto& [k, v] : object.dict().items()) {
        if (name == "items") {
          out.push_back(Value::List({Value::String(k), v}));
        } else {
          out.push_back(name == "keys" ? Value::String(k) : v);
        }
      }
      return Value::List(std::move(out));
    });
  }
  if (name == "get") {
    return bind([object](const Args& args) -> Result<Value> {
      const Value* key = args.Get(0, "key");
      if (key == nullptr || !key->is_string()) return TypeError("get", "needs a string key");
      if (const Value* v = object.dict().Find(key->str())) return *v;
      const Value* fallback = args.Get(1, "default");
      return fallback != nullptr ? *fallback : Value::None();
    });
  }
  if (name == "dictsort") {
    return bind([object](const Args& args) -> Result<Value> { return ApplyFilter("dictsort", object, args); });
  }
  return Value();
}

Value ListMethod(const Value& object, const std::string& name) {
  auto bind = [&](NativeFunction fn) { return Value::Function("list." + name, std::move(fn)); };
  if (name == "length") return Value::Int(static_cast<int64_t>(object.list().size()));
  if (name == "index" || name == "count") {
    return bind([object, name](const Args& args) -> Result<Value> {
      const Value* needle = args.Get(0, "value");
      if (needle == nullptr) return TypeError(name, "needs an argument");
      int64_t count = 0;
      for (size_t i = 0; i < object.list().size(); ++i) {
        if (!object.list()[i].Equals(*needle)) continue;
        if (name == "index") return Value::Int(static_cast<int64_t>(i));
        ++count;
      }
      if (name == "index") return TypeError("index", "value is not in the list");
      return Value::Int(count);
    });
  }
  return Value();
}

}  // namespace

Value GetMethod(const Value& object, const std::string& name) {
  if (IsUnsafeMutator(object, name)) return Unsafe(object, name);
  switch (object.kind()) {
    case Value::Kind::kString: return StringMethod(object, name);
    case Value::Kind::kDict: return DictMethod(object, name);
    case Value::Kind::kList: return ListMethod(object, name);
    default: return Value();
  }
}

bool IsDictMethodName(const std::string& name) {
  static const char* const kNames[] = {"items", "keys",   "values",     "get",    "copy", "fromkeys",
                                       "pop",   "popitem", "setdefault", "update", "clear"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

}  // namespace zipmoe::jinja
