// jinja::Template (common/jinja/jinja.h): parse once, render with globals and a context.
#include "common/jinja/jinja.h"

#include <ctime>
#include <vector>

#include <fmt/format.h>

#include "common/jinja/ast.h"
#include "common/jinja/evaluator.h"
#include "common/jinja/lexer.h"
#include "common/jinja/parser.h"

namespace zipmoe::jinja {

struct Template::Parsed {
  std::string source;
  std::string name;
  std::vector<NodePtr> body;
};

namespace {

Result<Value> Range(const Args& args) {
  int64_t v[3] = {0, 0, 1};
  if (args.positional.empty() || args.positional.size() > 3) {
    return Status::InvalidArgument("range() takes 1 to 3 integer arguments");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (args.positional[i].kind() != Value::Kind::kInt) return Status::InvalidArgument("range() needs integers");
  }
  if (args.positional.size() == 1) {
    v[1] = args.positional[0].as_int();
  } else {
    v[0] = args.positional[0].as_int();
    v[1] = args.positional[1].as_int();
    if (args.positional.size() == 3) v[2] = args.positional[2].as_int();
  }
  if (v[2] == 0) return Status::InvalidArgument("range() step must not be zero");
  ValueList out;
  for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
    if (out.size() >= 1000000) return Status::InvalidArgument("range() longer than 1000000");
    out.push_back(Value::Int(i));
  }
  return Value::List(std::move(out));
}

Result<Value> MakeNamespace(const Args& args, bool is_namespace) {
  ValueDict dict;
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (init.is_mapping_like()) {
      for (const auto& [k, v] : init.dict().items()) dict.Set(k, v);
    } else if (init.is_list()) {
      for (const Value& pair : init.list()) {
        if (!pair.is_list() || pair.list().size() != 2 || !pair.list()[0].is_string()) {
          return Status::InvalidArgument("namespace()/dict() expects [key, value] pairs");
        }
        dict.Set(pair.list()[0].str(), pair.list()[1]);
      }
    } else {
      return Status::InvalidArgument(fmt::format("namespace()/dict() cannot take a {}", init.KindName()));
    }
  }
  for (const auto& [k, v] : args.keyword) dict.Set(k, v);
  return is_namespace ? Value::Namespace(std::move(dict)) : Value::Dict(std::move(dict));
}

}  // namespace

Result<Template> Template::Parse(std::string_view source, std::string name) {
  auto parsed = std::make_shared<Parsed>();
  parsed->source = std::string(source);
  parsed->name = std::move(name);
  ZM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(parsed->source, parsed->name));
  ZM_ASSIGN_OR_RETURN(parsed->body, jinja::Parse(tokens, parsed->source, parsed->name));
  Template t;
  t.parsed_ = std::move(parsed);
  t.globals_["range"] = Value::Function("range", Range);
  t.globals_["namespace"] = Value::Function("namespace", [](const Args& a) { return MakeNamespace(a, true); });
  t.globals_["dict"] = Value::Function("dict", [](const Args& a) { return MakeNamespace(a, false); });
  t.globals_["raise_exception"] = Value::Function("raise_exception", [](const Args& args) -> Result<Value> {
    const std::string message = args.positional.empty() ? "" : args.positional[0].ToString();
    return Status::InvalidArgument("raise_exception: " + message);
  });
  return t;
}

void Template::SetGlobal(const std::string& name, Value value) { globals_[name] = std::move(value); }

void Template::SetClock(Clock clock) { clock_ = std::move(clock); }

Result<std::string> Template::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object() && !context.is_null()) {
    return Status::InvalidArgument(parsed_->name + ": the render context must be a JSON object");
  }
  auto globals = std::make_shared<Scope>(nullptr);
  for (const auto& [k, v] : globals_) globals->vars[k] = v;
  const Clock clock = clock_ ? clock_ : Clock([] { return std::chrono::system_clock::now(); });
  globals->vars["strftime_now"] = Value::Function("strftime_now", [clock](const Args& args) -> Result<Value> {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return Status::InvalidArgument("strftime_now() needs a format string");
    }
    const std::time_t t = std::chrono::system_clock::to_time_t(clock());
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), args.positional[0].str().c_str(), &tm);
    return Value::String(std::string(buf, n));
  });
  auto scope = std::make_shared<Scope>(globals);
  if (context.is_object()) {
    for (const auto& [k, v] : context.items()) scope->vars[k] = Value::FromJson(v);
  }
  return jinja::Render(parsed_->body, parsed_->source, parsed_->name, scope);
}

Result<std::string> Template::Render(const nlohmann::json& context) const {
  return Render(nlohmann::ordered_json::parse(context.dump()));
}

}  // namespace zipmoe::jinja
