// Template evaluator (common/jinja/evaluator.h).
#include "common/jinja/evaluator.h"

#include <cmath>

#include <fmt/format.h>

#include "common/jinja/filters.h"
#include "common/jinja/lexer.h"
#include "common/jinja/methods.h"
#include "common/jinja/tests.h"
#include "common/jinja/text.h"

namespace zipmoe::jinja {

const Value* Scope::Lookup(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

namespace {

constexpr int kMaxCallDepth = 200;  // macro recursion limit (a template bug, not a deep stack)

class Evaluator {
 public:
  Evaluator(std::string_view source, const std::string& name) : source_(source), name_(name) {}

  Status Exec(const std::vector<NodePtr>& body, const ScopePtr& scope, std::string* out) {
    for (const NodePtr& node : body) {
      ZM_RETURN_IF_ERROR(ExecOne(*node, scope, out));
      if (flow_ != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  // Prefixes a position-less error with the line of `node`.
  Status At(const Node& node, const Status& status) const {
    if (status.ok() || status.message().rfind(name_ + " line ", 0) == 0) return status;
    const SourcePosition p = PositionOf(source_, node.offset);
    return Status(status.code(), fmt::format("{} line {}, column {}: {}", name_, p.line, p.column, status.message()));
  }
  Status Error(const Node& node, const std::string& what) const { return At(node, Status::InvalidArgument(what)); }

  Status ExecOne(const Node& node, const ScopePtr& scope, std::string* out) {
    switch (node.kind) {
      case NodeKind::kText:
        *out += node.text;
        return Status::Ok();
      case NodeKind::kOutput: {
        ZM_ASSIGN_OR_RETURN(Value v, Eval(*node.a, scope));
        *out += v.ToString();
        return Status::Ok();
      }
      case NodeKind::kIf: {
        ZM_ASSIGN_OR_RETURN(Value test, Eval(*node.a, scope));
        return Exec(test.Truthy() ? node.body : node.alt, scope, out);
      }
      case NodeKind::kFor: return ExecFor(node, scope, out);
      case NodeKind::kSet: return ExecSet(node, scope);
      case NodeKind::kMacro: {
        scope->vars[node.text] = MakeMacro(node, scope, node.text);
        return Status::Ok();
      }
      case NodeKind::kCallBlock: {
        ZM_ASSIGN_OR_RETURN(Value callee, Eval(*node.a->a, scope));
        ZM_ASSIGN_OR_RETURN(Args args, EvalArgs(node.a->args, scope));
        args.keyword.emplace_back("caller", MakeMacro(node, scope, "caller"));
        ZM_ASSIGN_OR_RETURN(Value result, Call(node, callee, args));
        *out += result.ToString();
        return Status::Ok();
      }
      case NodeKind::kFilterBlock: {
        std::string text;
        ZM_RETURN_IF_ERROR(Exec(node.body, scope, &text));
        ZM_ASSIGN_OR_RETURN(Args args, EvalArgs(node.a->args, scope));
        Result<Value> v = ApplyFilter(node.a->text, Value::String(std::move(text)), args);
        if (!v.ok()) return At(node, v.status());
        *out += v->ToString();
        return Status::Ok();
      }
      case NodeKind::kBreak:
        flow_ = Flow::kBreak;
        return Status::Ok();
      case NodeKind::kContinue:
        flow_ = Flow::kContinue;
        return Status::Ok();
      default:
        return Error(node, "an expression where a statement belongs");
    }
  }

  Status ExecFor(const Node& node, const ScopePtr& scope, std::string* out) {
    auto loop_scope = std::make_shared<Scope>(scope);
    ZM_ASSIGN_OR_RETURN(Value iterable, Eval(*node.b, loop_scope));
    ValueList all;
    if (iterable.is_list()) {
      all = iterable.list();
    } else if (iterable.is_mapping_like()) {
      for (const auto& [k, v] : iterable.dict().items()) all.push_back(Value::String(k));
    } else if (iterable.is_string()) {
      for (const std::string& c : Utf8Chars(iterable.str())) all.push_back(Value::String(c));
    } else if (iterable.is_undefined()) {
      // jinja2's Undefined iterates as empty (a loop over a missing `tools` runs its else branch)
    } else {
      return Error(*node.b, fmt::format("cannot iterate over {}", iterable.KindName()));
    }
    ValueList items;
    for (const Value& item : all) {
      if (node.c) {
        ZM_RETURN_IF_ERROR(Assign(*node.a, item, loop_scope));
        ZM_ASSIGN_OR_RETURN(Value keep, Eval(*node.c, loop_scope));
        if (!keep.Truthy()) continue;
      }
      items.push_back(item);
    }
    if (items.empty()) return Exec(node.alt, loop_scope, out);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      ValueDict loop;
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(n - i));
      loop.Set("revindex0", Value::Int(n - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == n - 1));
      loop.Set("length", Value::Int(n));
      loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
      loop.Set("nextitem", i < n - 1 ? items[static_cast<size_t>(i + 1)] : Value());
      loop_scope->vars["loop"] = Value::Dict(std::move(loop));
      ZM_RETURN_IF_ERROR(Assign(*node.a, items[static_cast<size_t>(i)], loop_scope));
      ZM_RETURN_IF_ERROR(Exec(node.body, loop_scope, out));
      const Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kBreak) break;
    }
    return Status::Ok();
  }

  // Binds a name or a tuple of names (unpacking a list) in `scope`.
  Status Assign(const Node& target, const Value& value, const ScopePtr& scope) {
    if (target.kind == NodeKind::kName) {
      scope->vars[target.text] = value;
      return Status::Ok();
    }
    if (!value.is_list()) return Error(target, fmt::format("cannot unpack {}", value.KindName()));
    if (value.list().size() != target.children.size()) {
      return Error(target, fmt::format("cannot unpack {} values into {} names", value.list().size(),
                                       target.children.size()));
    }
    for (size_t i = 0; i < target.children.size(); ++i) scope->vars[target.children[i]->text] = value.list()[i];
    return Status::Ok();
  }

  Status ExecSet(const Node& node, const ScopePtr& scope) {
    Value value;
    if (node.b) {
      ZM_ASSIGN_OR_RETURN(value, Eval(*node.b, scope));
    } else {
      std::string text;
      ZM_RETURN_IF_ERROR(Exec(node.body, scope, &text));
      value = Value::String(std::move(text));
    }
    if (node.a->kind == NodeKind::kAttr) {
      ZM_ASSIGN_OR_RETURN(Value object, Eval(*node.a->a, scope));
      if (object.kind() != Value::Kind::kNamespace) {
        return Error(node, fmt::format("cannot set attribute '{}' of {} (only of a namespace)", node.a->text,
                                       object.KindName()));
      }
      object.dict().Set(node.a->text, std::move(value));
      return Status::Ok();
    }
    return Assign(*node.a, value, scope);
  }

  // A macro (or a call block's `caller`) as a function value. `def` is the defining scope.
  Value MakeMacro(const Node& node, const ScopePtr& def, const std::string& name) {
    std::weak_ptr<Scope> weak_def = def;  // the scope holds the macro: no cycle
    const Node* n = &node;
    return Value::Function(name, [this, n, weak_def, name](const Args& args) -> Result<Value> {
      if (depth_ >= kMaxCallDepth) return Error(*n, fmt::format("macro '{}' nested too deep", name));
      auto scope = std::make_shared<Scope>(weak_def.lock());
      size_t next = 0;
      std::vector<std::pair<std::string, Value>> extra_kwargs;
      for (const auto& [k, v] : args.keyword) {
        bool is_param = false;
        for (const Arg& p : n->args) is_param |= p.name == k;
        if (!is_param) extra_kwargs.emplace_back(k, v);
      }
      for (const Arg& param : n->args) {
        if (next < args.positional.size()) {
          scope->vars[param.name] = args.positional[next++];
        } else if (const Value* kw = args.Keyword(param.name)) {
          scope->vars[param.name] = *kw;
        } else if (param.value) {
          ZM_ASSIGN_OR_RETURN(scope->vars[param.name], Eval(*param.value, scope));
        } else {
          scope->vars[param.name] = Value();
        }
      }
      ValueDict kwargs;
      for (auto& [k, v] : extra_kwargs) {
        if (k == "caller") {
          scope->vars["caller"] = v;
        } else {
          kwargs.Set(k, v);
        }
      }
      scope->vars["kwargs"] = Value::Dict(std::move(kwargs));
      scope->vars["varargs"] = Value::List(ValueList(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                                                     args.positional.end()));
      std::string out;
      ++depth_;
      Status status = Exec(n->body, scope, &out);
      --depth_;
      flow_ = Flow::kNormal;
      ZM_RETURN_IF_ERROR(status);
      return Value::String(std::move(out));
    });
  }

  Result<Args> EvalArgs(const std::vector<Arg>& arg_nodes, const ScopePtr& scope) {
    Args args;
    for (const Arg& arg : arg_nodes) {
      ZM_ASSIGN_OR_RETURN(Value v, Eval(*arg.value, scope));
      if (arg.star) {
        if (!v.is_list()) return Error(*arg.value, fmt::format("cannot unpack {} with *", v.KindName()));
        for (const Value& item : v.list()) args.positional.push_back(item);
      } else if (arg.double_star) {
        if (!v.is_mapping_like()) return Error(*arg.value, fmt::format("cannot unpack {} with **", v.KindName()));
        for (const auto& [k, item] : v.dict().items()) args.keyword.emplace_back(k, item);
      } else if (arg.name.empty()) {
        args.positional.push_back(std::move(v));
      } else {
        args.keyword.emplace_back(arg.name, std::move(v));
      }
    }
    return args;
  }

  Result<Value> Call(const Node& node, const Value& callee, const Args& args) {
    if (!callee.is_function()) return Error(node, fmt::format("cannot call {}", callee.KindName()));
    Result<Value> result = callee.function()(args);
    if (!result.ok()) return At(node, result.status());
    return result;
  }

  Result<Value> Eval(const Node& node, const ScopePtr& scope) {
    switch (node.kind) {
      case NodeKind::kLiteral: return node.literal;
      case NodeKind::kName: {
        const Value* v = scope->Lookup(node.text);
        return v != nullptr ? *v : Value();
      }
      case NodeKind::kList:
      case NodeKind::kTuple: {
        ValueList items;
        for (const NodePtr& child : node.children) {
          ZM_ASSIGN_OR_RETURN(Value v, Eval(*child, scope));
          items.push_back(std::move(v));
        }
        return Value::List(std::move(items));
      }
      case NodeKind::kDict: {
        ValueDict dict;
        for (size_t i = 0; i + 1 < node.children.size(); i += 2) {
          ZM_ASSIGN_OR_RETURN(Value key, Eval(*node.children[i], scope));
          if (!key.is_string()) return Error(*node.children[i], "dict keys must be strings");
          ZM_ASSIGN_OR_RETURN(Value v, Eval(*node.children[i + 1], scope));
          dict.Set(key.str(), std::move(v));
        }
        return Value::Dict(std::move(dict));
      }
      case NodeKind::kAttr: {
        ZM_ASSIGN_OR_RETURN(Value object, Eval(*node.a, scope));
        // jinja2's Undefined raises on attribute access (only printing, iterating, testing and
        // `default` accept it); none.attr is undefined
        if (object.is_undefined()) return UndefinedError(node, *node.a, node.text);
        // jinja2's getattr tries the Python attribute first: `d.items` is the method even when the
        // dict has a key "items" (a JSON schema's); `d['items']` (Index) is the key.
        if (object.is_dict() && IsDictMethodName(node.text)) return GetMethod(object, node.text);
        return Member(object, node.text);
      }
      case NodeKind::kIndex: {
        ZM_ASSIGN_OR_RETURN(Value object, Eval(*node.a, scope));
        ZM_ASSIGN_OR_RETURN(Value index, Eval(*node.b, scope));
        if (object.is_undefined()) return UndefinedError(node, *node.a, index.ToString());
        return Index(object, index);
      }
      case NodeKind::kSlice: return EvalSlice(node, scope);
      case NodeKind::kCall: {
        ZM_ASSIGN_OR_RETURN(Value callee, Eval(*node.a, scope));
        ZM_ASSIGN_OR_RETURN(Args args, EvalArgs(node.args, scope));
        return Call(node, callee, args);
      }
      case NodeKind::kFilter: {
        ZM_ASSIGN_OR_RETURN(Value operand, Eval(*node.a, scope));
        ZM_ASSIGN_OR_RETURN(Args args, EvalArgs(node.args, scope));
        Result<Value> v = ApplyFilter(node.text, operand, args);
        if (!v.ok()) return At(node, v.status());
        return v;
      }
      case NodeKind::kTest: {
        ZM_ASSIGN_OR_RETURN(Value operand, Eval(*node.a, scope));
        ZM_ASSIGN_OR_RETURN(Args args, EvalArgs(node.args, scope));
        Result<bool> r = ApplyTest(node.text, operand, args);
        if (!r.ok()) return At(node, r.status());
        return Value::Bool(*r != node.negate);
      }
      case NodeKind::kUnary: {
        ZM_ASSIGN_OR_RETURN(Value v, Eval(*node.a, scope));
        if (node.text == "not") return Value::Bool(!v.Truthy());
        const bool neg = node.text == "-";
        if (v.kind() == Value::Kind::kFloat) return Value::Float(neg ? -v.as_float() : v.as_float());
        if (v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool) {
          const int64_t i = v.kind() == Value::Kind::kInt ? v.as_int() : (v.as_bool() ? 1 : 0);
          return Value::Int(neg ? -i : i);
        }
        return Error(node, fmt::format("bad operand for unary {}: {}", node.text, v.KindName()));
      }
      case NodeKind::kBinary: return EvalBinary(node, scope);
      case NodeKind::kCompare: {
        ZM_ASSIGN_OR_RETURN(Value left, Eval(*node.children[0], scope));
        for (size_t i = 0; i < node.ops.size(); ++i) {
          ZM_ASSIGN_OR_RETURN(Value right, Eval(*node.children[i + 1], scope));
          ZM_ASSIGN_OR_RETURN(bool ok, Compare(node, node.ops[i], left, right));
          if (!ok) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case NodeKind::kTernary: {
        ZM_ASSIGN_OR_RETURN(Value test, Eval(*node.b, scope));
        if (test.Truthy()) return Eval(*node.a, scope);
        if (node.c) return Eval(*node.c, scope);
        return Value();
      }
      default:
        return Error(node, "a statement where an expression belongs");
    }
  }

  static Value Member(const Value& object, const std::string& name) {
    if (object.is_mapping_like()) {
      if (const Value* v = object.dict().Find(name)) return *v;
    }
    return GetMethod(object, name);
  }

  // jinja2's UndefinedError for `x.name` / `x[name]` when x is undefined: names the expression.
  Status UndefinedError(const Node& node, const Node& object, const std::string& name) {
    const std::string what = object.kind == NodeKind::kName ? "'" + object.text + "' is undefined"
                                                             : "an undefined value has no attribute";
    return Error(node, fmt::format("UndefinedError: {} (accessing '{}')", what, name));
  }

  static Value Index(const Value& object, const Value& index) {
    if (object.is_generator()) return Value();  // jinja2: a generator has no items; getitem gives undefined
    if (index.is_string()) return Member(object, index.str());
    if (index.kind() == Value::Kind::kInt && (object.is_list() || object.is_string())) {
      if (object.is_list()) {
        const int64_t n = static_cast<int64_t>(object.list().size());
        const int64_t i = index.as_int() < 0 ? index.as_int() + n : index.as_int();
        if (i < 0 || i >= n) return Value();
        return object.list()[static_cast<size_t>(i)];
      }
      const std::vector<std::string> chars = Utf8Chars(object.str());
      const int64_t n = static_cast<int64_t>(chars.size());
      const int64_t i = index.as_int() < 0 ? index.as_int() + n : index.as_int();
      if (i < 0 || i >= n) return Value();
      return Value::String(chars[static_cast<size_t>(i)]);
    }
    return Value();  // jinja2's getitem: a missing key, a wrong key type, none[...]: undefined
  }

  Result<Value> EvalSlice(const Node& node, const ScopePtr& scope) {
    ZM_ASSIGN_OR_RETURN(Value object, Eval(*node.a, scope));
    int64_t parts[3] = {0, 0, 1};
    bool has[3] = {false, false, false};
    const Node* part_nodes[3] = {node.b.get(), node.c.get(), node.d.get()};
    for (int i = 0; i < 3; ++i) {
      if (part_nodes[i] == nullptr) continue;
      ZM_ASSIGN_OR_RETURN(Value v, Eval(*part_nodes[i], scope));
      if (v.is_none() || v.is_undefined()) continue;
      if (v.kind() != Value::Kind::kInt) return Error(node, "slice indices must be integers");
      parts[i] = v.as_int();
      has[i] = true;
    }
    if (parts[2] == 0) return Error(node, "slice step cannot be zero");
    if (object.is_list()) {
      const ValueList& list = object.list();
      ValueList out;
      for (int64_t i : SliceIndices(static_cast<int64_t>(list.size()), has[0], parts[0], has[1], parts[1], parts[2])) {
        out.push_back(list[static_cast<size_t>(i)]);
      }
      return Value::List(std::move(out));
    }
    if (object.is_string()) {
      const std::vector<std::string> chars = Utf8Chars(object.str());
      std::string out;
      for (int64_t i : SliceIndices(static_cast<int64_t>(chars.size()), has[0], parts[0], has[1], parts[1], parts[2])) {
        out += chars[static_cast<size_t>(i)];
      }
      return Value::String(std::move(out));
    }
    return Error(node, fmt::format("cannot slice {}", object.KindName()));
  }

  static bool Contains(const Value& container, const Value& item) {
    if (container.is_list()) {
      for (const Value& v : container.list()) {
        if (v.Identical(item)) return true;
      }
      return false;
    }
    if (container.is_string() && item.is_string()) return container.str().find(item.str()) != std::string::npos;
    if (container.is_mapping_like() && item.is_string()) return container.dict().Find(item.str()) != nullptr;
    return false;
  }

  Result<bool> Compare(const Node& node, const std::string& op, const Value& left, const Value& right) {
    if (op == "==") return left.Equals(right);
    if (op == "!=") return !left.Equals(right);
    if (op == "in" || op == "not in") {
      const bool searchable = right.is_list() || right.is_mapping_like() || (right.is_string() && left.is_string());
      if (right.is_undefined()) return op == "not in";
      if (!searchable) {
        return Error(node, fmt::format("cannot look for {} in {}", left.KindName(), right.KindName()));
      }
      return Contains(right, left) == (op == "in");
    }
    Result<int> c = CompareValues(left, right, /*case_sensitive=*/true);
    if (!c.ok() || left.is_none() || left.is_undefined()) {
      return Error(node, fmt::format("cannot compare {} {} {}", left.KindName(), op, right.KindName()));
    }
    if (op == "<") return *c < 0;
    if (op == "<=") return *c <= 0;
    if (op == ">") return *c > 0;
    return *c >= 0;
  }

  Result<Value> EvalBinary(const Node& node, const ScopePtr& scope) {
    ZM_ASSIGN_OR_RETURN(Value left, Eval(*node.a, scope));
    const std::string& op = node.text;
    if (op == "and") return left.Truthy() ? Eval(*node.b, scope) : left;
    if (op == "or") return left.Truthy() ? left : Eval(*node.b, scope);
    ZM_ASSIGN_OR_RETURN(Value right, Eval(*node.b, scope));
    auto bad = [&]() {
      return Error(node, fmt::format("unsupported operand types for {}: {} and {}", op, left.KindName(),
                                     right.KindName()));
    };
    // `~` concatenates str() of both sides, as jinja2 does: none prints "None", undefined nothing
    if (op == "~") return Value::String(left.ToString() + right.ToString());
    if (left.is_undefined() || right.is_undefined() || left.is_none() || right.is_none()) return bad();
    const bool numeric = (left.is_number() || left.kind() == Value::Kind::kBool) &&
                         (right.is_number() || right.kind() == Value::Kind::kBool);
    if (numeric) return Arithmetic(node, op, left, right);
    if (op == "+") {
      if (left.is_list() && right.is_list()) {
        ValueList items = left.list();
        items.insert(items.end(), right.list().begin(), right.list().end());
        return Value::List(std::move(items));
      }
      // str + str only (Python: a string plus a number is a TypeError); a Markup side escapes the other
      if (left.is_string() && right.is_string()) {
        if (!left.is_markup() && !right.is_markup()) return Value::String(left.str() + right.str());
        return Value::Markup((left.is_markup() ? left.str() : HtmlEscape(left.str())) +
                             (right.is_markup() ? right.str() : HtmlEscape(right.str())));
      }
    }
    if (op == "*") {
      const Value& seq = left.kind() == Value::Kind::kInt ? right : left;
      const Value& times = left.kind() == Value::Kind::kInt ? left : right;
      if (times.kind() == Value::Kind::kInt && (seq.is_string() || seq.is_list())) {
        if (seq.is_string()) {
          std::string out;
          for (int64_t i = 0; i < times.as_int(); ++i) out += seq.str();
          return Value::String(std::move(out));
        }
        ValueList out;
        for (int64_t i = 0; i < times.as_int(); ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
        return Value::List(std::move(out));
      }
    }
    return bad();
  }

  Result<Value> Arithmetic(const Node& node, const std::string& op, const Value& left, const Value& right) {
    const bool is_float = left.kind() == Value::Kind::kFloat || right.kind() == Value::Kind::kFloat;
    const int64_t a = left.kind() == Value::Kind::kInt ? left.as_int() : static_cast<int64_t>(left.AsDouble());
    const int64_t b = right.kind() == Value::Kind::kInt ? right.as_int() : static_cast<int64_t>(right.AsDouble());
    const double x = left.AsDouble(), y = right.AsDouble();
    if (op == "+") return is_float ? Value::Float(x + y) : Value::Int(a + b);
    if (op == "-") return is_float ? Value::Float(x - y) : Value::Int(a - b);
    if (op == "*") return is_float ? Value::Float(x * y) : Value::Int(a * b);
    if ((op == "/" || op == "//" || op == "%") && y == 0) return Error(node, "division by zero");
    if (op == "/") return Value::Float(x / y);
    if (op == "//") {
      if (is_float) return Value::Float(std::floor(x / y));
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return Value::Int(q);
    }
    if (op == "%") {
      if (is_float) {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::Float(m);
      }
      int64_t m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return Value::Int(m);
    }
    if (op == "**") {
      if (x == 0 && y < 0) return Error(node, "0 cannot be raised to a negative power");
      if (is_float || b < 0) return Value::Float(std::pow(x, y));
      int64_t r = 1;
      for (int64_t i = 0; i < b; ++i) r *= a;
      return Value::Int(r);
    }
    return Error(node, fmt::format("unknown operator {}", op));
  }

  std::string_view source_;
  const std::string& name_;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;
};

}  // namespace

Result<std::string> Render(const std::vector<NodePtr>& body, std::string_view source, const std::string& name,
                           const ScopePtr& scope) {
  Evaluator evaluator(source, name);
  std::string out;
  ZM_RETURN_IF_ERROR(evaluator.Exec(body, scope, &out));
  return out;
}

}  // namespace zipmoe::jinja
