// Built-in tests of the template engine (common/jinja/tests.h).
#include "common/jinja/tests.h"

#include <cmath>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "common/jinja/text.h"

namespace zipmoe::jinja {
namespace {

using TestFn = std::function<Result<bool>(const Value&, const Args&)>;

Result<const Value*> Arg0(const Args& args, const char* test) {
  const Value* v = args.Get(0, "value");
  if (v == nullptr) return Status::InvalidArgument(fmt::format("test '{}' needs an argument", test));
  return v;
}

TestFn Kind(std::function<bool(const Value&)> pred) {
  return [pred](const Value& v, const Args&) -> Result<bool> { return pred(v); };
}

TestFn Comparison(const char* name, std::function<bool(int)> accept) {
  return [name, accept](const Value& v, const Args& args) -> Result<bool> {
    ZM_ASSIGN_OR_RETURN(const Value* other, Arg0(args, name));
    ZM_ASSIGN_OR_RETURN(int c, CompareValues(v, *other, /*case_sensitive=*/true));
    return accept(c);
  };
}

const std::map<std::string, TestFn>& Registry() {
  static const auto registry = [] {
    std::map<std::string, TestFn> r;
    r["defined"] = Kind([](const Value& v) { return !v.is_undefined(); });
    r["undefined"] = Kind([](const Value& v) { return v.is_undefined(); });
    r["none"] = Kind([](const Value& v) { return v.is_none(); });
    r["string"] = Kind([](const Value& v) { return v.is_string(); });
    r["number"] = Kind([](const Value& v) { return v.is_number(); });
    r["integer"] = Kind([](const Value& v) { return v.kind() == Value::Kind::kInt; });
    r["float"] = Kind([](const Value& v) { return v.kind() == Value::Kind::kFloat; });
    r["boolean"] = Kind([](const Value& v) { return v.kind() == Value::Kind::kBool; });
    r["mapping"] = Kind([](const Value& v) { return v.is_dict(); });
    // jinja2: iterable = iter() works (Undefined iterates as empty, a dict over its keys); sequence = has
    // len() and __getitem__ (a generator has neither; Undefined has both)
    r["iterable"] = Kind([](const Value& v) { return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined(); });
    r["sequence"] = Kind([](const Value& v) {
      return (v.is_list() && !v.is_generator()) || v.is_dict() || v.is_string() || v.is_undefined();
    });
    r["callable"] = Kind([](const Value& v) { return v.is_function(); });
    r["true"] = Kind([](const Value& v) { return v.kind() == Value::Kind::kBool && v.as_bool(); });
    r["false"] = Kind([](const Value& v) { return v.kind() == Value::Kind::kBool && !v.as_bool(); });
    r["lower"] = Kind([](const Value& v) { return v.is_string() && AsciiLower(v.str()) == v.str(); });
    r["upper"] = Kind([](const Value& v) { return v.is_string() && AsciiUpper(v.str()) == v.str(); });
    auto parity = [](int want) {
      return [want](const Value& v, const Args&) -> Result<bool> {
        if (v.kind() != Value::Kind::kInt) {
          return Status::InvalidArgument(fmt::format("test '{}' needs an integer, got {}", want ? "odd" : "even",
                                                     v.KindName()));
        }
        return (v.as_int() % 2 != 0) == (want == 1);
      };
    };
    r["odd"] = parity(1);
    r["even"] = parity(0);
    TestFn eq = [](const Value& v, const Args& args) -> Result<bool> {
      ZM_ASSIGN_OR_RETURN(const Value* other, Arg0(args, "eq"));
      return v.Equals(*other);
    };
    r["equalto"] = eq;
    r["eq"] = eq;
    r["=="] = eq;
    TestFn ne = [](const Value& v, const Args& args) -> Result<bool> {
      ZM_ASSIGN_OR_RETURN(const Value* other, Arg0(args, "ne"));
      return !v.Equals(*other);
    };
    r["ne"] = ne;
    r["!="] = ne;
    r["gt"] = r["greaterthan"] = Comparison("gt", [](int c) { return c > 0; });
    r["ge"] = Comparison("ge", [](int c) { return c >= 0; });
    r["lt"] = r["lessthan"] = Comparison("lt", [](int c) { return c < 0; });
    r["le"] = Comparison("le", [](int c) { return c <= 0; });
    r["sameas"] = [](const Value& v, const Args& args) -> Result<bool> {
      ZM_ASSIGN_OR_RETURN(const Value* other, Arg0(args, "sameas"));
      return v.kind() == other->kind() && v.Identical(*other);
    };
    r["divisibleby"] = [](const Value& v, const Args& args) -> Result<bool> {
      ZM_ASSIGN_OR_RETURN(const Value* other, Arg0(args, "divisibleby"));
      if (v.kind() != Value::Kind::kInt || other->kind() != Value::Kind::kInt || other->as_int() == 0) {
        return Status::InvalidArgument("test 'divisibleby' needs two integers, the second non-zero");
      }
      return v.as_int() % other->as_int() == 0;
    };
    r["in"] = [](const Value& v, const Args& args) -> Result<bool> {
      ZM_ASSIGN_OR_RETURN(const Value* seq, Arg0(args, "in"));
      if (seq->is_list()) {
        for (const Value& item : seq->list()) {
          if (item.Equals(v)) return true;
        }
        return false;
      }
      if (seq->is_string() && v.is_string()) return seq->str().find(v.str()) != std::string::npos;
      if (seq->is_mapping_like() && v.is_string()) return seq->dict().Find(v.str()) != nullptr;
      return Status::InvalidArgument(fmt::format("test 'in' cannot look in a {}", seq->KindName()));
    };
    return r;
  }();
  return registry;
}

}  // namespace

bool IsKnownTest(const std::string& name) { return Registry().count(name) > 0; }

Result<bool> ApplyTest(const std::string& name, const Value& operand, const Args& args) {
  auto it = Registry().find(name);
  if (it == Registry().end()) return Status::InvalidArgument(fmt::format("unknown test '{}'", name));
  return it->second(operand, args);
}

}  // namespace zipmoe::jinja
