// jinja::Value (common/jinja/value.h): construction, truthiness, printing, JSON and comparison.
#include "common/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>
#include <utf8proc.h>

#include "common/jinja/text.h"

namespace zipmoe::jinja {

const Value* ValueDict::Find(const std::string& key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* ValueDict::Find(const std::string& key) {
  for (auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(const std::string& key, Value value) {
  if (Value* existing = Find(key)) {
    *existing = std::move(value);
  } else {
    items_.emplace_back(key, std::move(value));
  }
}

bool ValueDict::Erase(const std::string& key) {
  for (auto it = items_.begin(); it != items_.end(); ++it) {
    if (it->first == key) {
      items_.erase(it);
      return true;
    }
  }
  return false;
}

const Value* Args::Get(size_t index, const std::string& name) const {
  if (index < positional.size()) return &positional[index];
  return Keyword(name);
}

const Value* Args::Keyword(const std::string& name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::Markup(std::string s) {
  Value v = String(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::Generator(ValueList items) {
  Value v = List(std::move(items));
  v.generator_ = true;
  return v;
}

Value Value::Dict(ValueDict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(dict));
  return v;
}

Value Value::Namespace(ValueDict dict) {
  Value v = Dict(std::move(dict));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.string_ = std::make_shared<const std::string>(std::move(name));
  v.function_ = std::make_shared<const NativeFunction>(std::move(fn));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      // Above INT64_MAX: a float (Python keeps the exact integer; a float keeps at least the sign and
      // the magnitude, where a cast to int64 would wrap around to a negative number).
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict;
      for (const auto& [key, item] : json.items()) dict.Set(key, FromJson(item));
      return Dict(std::move(dict));
    }
    default:
      return Value();  // binary / discarded: not produced by parsing JSON text
  }
}

double Value::AsDouble() const {
  switch (kind_) {
    case Kind::kInt: return static_cast<double>(int_);
    case Kind::kFloat: return float_;
    case Kind::kBool: return bool_ ? 1 : 0;
    default: return 0;
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return bool_;
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !string_->empty();
    case Kind::kList: return generator_ || !list_->empty();
    case Kind::kDict: return dict_->size() > 0;
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  if (f == std::floor(f) && std::fabs(f) < 1e16) return fmt::format("{:.1f}", f);
  return fmt::format("{}", f);  // shortest round-trip, as Python's repr
}

namespace {

// Python's str.isprintable() for one code point: false for the general categories Cc, Cf, Cs, Co,
// Cn, Zl, Zp and Zs other than the space.
bool PythonPrintable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::string FloatStr(double f) {  // Python's str(float): repr, with inf / nan spelled as Python does
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  return FloatRepr(f);
}

}  // namespace

std::string PyStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    const uint32_t cp = DecodeUtf8(s, i, &len);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (len == 1 && cp >= 0x80) {  // a byte that is not UTF-8: shown as Python shows a surrogate escape
      out += fmt::format("\\udc{:02x}", cp);
    } else if (!PythonPrintable(cp)) {
      out += cp < 0x100 ? fmt::format("\\x{:02x}", cp) : cp < 0x10000 ? fmt::format("\\u{:04x}", cp)
                                                                      : fmt::format("\\U{:08x}", cp);
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out.push_back(quote);
  return out;
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kString: return PyStringRepr(*string_);
    case Kind::kList: {
      if (generator_) return "<generator object>";
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].Repr();
      }
      return out + "]";
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items()) {
        if (!first) out += ", ";
        first = false;
        out += PyStringRepr(k) + ": " + v.Repr();
      }
      return out + (kind_ == Kind::kNamespace ? "}>" : "}");
    }
    default: return ToString();
  }
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return bool_ ? "True" : "False";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kFloat: return FloatStr(float_);
    case Kind::kString: return *string_;
    case Kind::kList:
    case Kind::kDict:
    case Kind::kNamespace: return Repr();
    case Kind::kFunction: return "<function " + *string_ + ">";
  }
  return "";
}

const char* Value::KindName() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

static bool IsNumeric(Value::Kind k) {
  return k == Value::Kind::kInt || k == Value::Kind::kFloat || k == Value::Kind::kBool;
}

bool Value::Equals(const Value& other) const {
  // jinja2: Undefined equals only Undefined (Undefined.__eq__ compares types), None only None.
  const bool nullish = kind_ == Kind::kUndefined || kind_ == Kind::kNone;
  const bool other_nullish = other.kind_ == Kind::kUndefined || other.kind_ == Kind::kNone;
  if (nullish || other_nullish) return kind_ == other.kind_;
  if (IsNumeric(kind_) && IsNumeric(other.kind_)) {
    if (kind_ == Kind::kInt && other.kind_ == Kind::kInt) return int_ == other.int_;
    return AsDouble() == other.AsDouble();
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kString: return *string_ == *other.string_;
    case Kind::kList: {
      if (list_->size() != other.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*other.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      if (dict_->size() != other.dict_->size()) return false;
      for (const auto& [k, v] : dict_->items()) {
        const Value* o = other.dict_->Find(k);
        if (o == nullptr || !v.Equals(*o)) return false;
      }
      return true;
    }
    case Kind::kFunction: return function_ == other.function_;
    default: return false;
  }
}

bool Value::Identical(const Value& other) const {
  if (kind_ == Kind::kList || kind_ == Kind::kDict || kind_ == Kind::kNamespace) {
    return kind_ == other.kind_ && (kind_ == Kind::kList ? list_ == other.list_ : dict_ == other.dict_);
  }
  if (kind_ != other.kind_ && !(IsNumeric(kind_) && IsNumeric(other.kind_))) return false;
  return Equals(other);
}

namespace {

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': *out += "\\\""; ++i; continue;
      case '\\': *out += "\\\\"; ++i; continue;
      case '\n': *out += "\\n"; ++i; continue;
      case '\r': *out += "\\r"; ++i; continue;
      case '\t': *out += "\\t"; ++i; continue;
      case '\b': *out += "\\b"; ++i; continue;
      case '\f': *out += "\\f"; ++i; continue;
      default: break;
    }
    if (c < 0x20) {
      *out += fmt::format("\\u{:04x}", c);
      ++i;
    } else if (c < 0x80 || !ensure_ascii) {
      out->push_back(static_cast<char>(c));
      ++i;
    } else {
      size_t len = 0;
      const uint32_t cp = DecodeUtf8(s, i, &len);
      i += len;
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        *out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        *out += fmt::format("\\u{:04x}", cp);
      }
    }
  }
  out->push_back('"');
}

Status AppendJson(const Value& value, const JsonOptions& options, int depth, std::string* out) {
  const std::string item_sep =
      !options.item_separator.empty() ? options.item_separator : (options.indent > 0 ? "," : ", ");
  const std::string key_sep = !options.key_separator.empty() ? options.key_separator : ": ";
  const std::string indent_unit(static_cast<size_t>(std::max(options.indent, 0)), ' ');
  auto newline = [&](int level) {
    if (options.indent <= 0) return;
    out->push_back('\n');
    for (int i = 0; i < level; ++i) *out += indent_unit;
  };
  switch (value.kind()) {
    case Value::Kind::kUndefined: *out += options.undefined_as_null ? "null" : "undefined"; return Status::Ok();
    case Value::Kind::kNone: *out += "null"; return Status::Ok();
    case Value::Kind::kBool: *out += value.as_bool() ? "true" : "false"; return Status::Ok();
    case Value::Kind::kInt: *out += std::to_string(value.as_int()); return Status::Ok();
    case Value::Kind::kFloat: *out += FloatRepr(value.as_float()); return Status::Ok();
    case Value::Kind::kString: AppendJsonString(value.str(), options.ensure_ascii, out); return Status::Ok();
    case Value::Kind::kList: {
      if (value.is_generator()) return Status::InvalidArgument("TypeError: Object of type generator is not JSON serializable");
      const ValueList& items = value.list();
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        ZM_RETURN_IF_ERROR(AppendJson(items[i], options, depth + 1, out));
      }
      if (!items.empty()) newline(depth);
      out->push_back(']');
      return Status::Ok();
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.dict().items()) entries.push_back(&entry);
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(entries[i]->first, options.ensure_ascii, out);
        *out += key_sep;
        ZM_RETURN_IF_ERROR(AppendJson(entries[i]->second, options, depth + 1, out));
      }
      if (!entries.empty()) newline(depth);
      out->push_back('}');
      return Status::Ok();
    }
    case Value::Kind::kFunction:
      return Status::InvalidArgument("cannot convert a function to JSON");
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  ZM_RETURN_IF_ERROR(AppendJson(value, options, 0, &out));
  return out;
}

Result<int> CompareValues(const Value& a, const Value& b, bool case_sensitive) {
  const bool a_nullish = a.is_none() || a.is_undefined();
  if (a_nullish || b.is_none() || b.is_undefined()) {
    if (a.kind() == b.kind()) return 0;
    return Status::InvalidArgument(fmt::format("cannot compare {} with {}", a.KindName(), b.KindName()));
  }
  if (IsNumeric(a.kind()) && IsNumeric(b.kind())) {
    if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt) {
      return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    }
    const double x = a.AsDouble(), y = b.AsDouble();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const std::string x = case_sensitive ? a.str() : AsciiLower(a.str());
    const std::string y = case_sensitive ? b.str() : AsciiLower(b.str());
    return x.compare(y) < 0 ? -1 : (x.compare(y) > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {  // Python's lexicographic tuple order
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      ZM_ASSIGN_OR_RETURN(int c, CompareValues(x[i], y[i], case_sensitive));
      if (c != 0) return c;
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return Status::InvalidArgument(fmt::format("cannot compare {} with {}", a.KindName(), b.KindName()));
}

}  // namespace zipmoe::jinja
