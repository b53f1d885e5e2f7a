// Template parser (common/jinja/parser.h).
#include "common/jinja/parser.h"

#include <optional>

#include <fmt/format.h>

#include "common/jinja/filters.h"
#include "common/jinja/tests.h"
#include "common/jinja/text.h"

namespace zipmoe::jinja {
namespace {

constexpr int kMaxNesting = 100;  // expression nesting limit (real templates nest < 10)

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, std::string_view source, const std::string& name)
      : tokens_(tokens), source_(source), name_(name) {}

  Result<std::vector<NodePtr>> Run() {
    std::vector<NodePtr> body;
    std::string found;
    ZM_RETURN_IF_ERROR(ParseBody({}, "", 0, &body, &found));
    if (!unknown_.empty()) return ErrorAt(unknown_.front().first, unknown_.front().second);
    return body;
  }

 private:
  // ---- token helpers ----
  const Token* Peek(size_t ahead = 0) const {
    return pos_ + ahead < tokens_.size() ? &tokens_[pos_ + ahead] : nullptr;
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    const Token* t = Peek(ahead);
    return t != nullptr && t->kind == TokenKind::kOperator && t->text == op;
  }
  bool IsName(const char* word, size_t ahead = 0) const {
    const Token* t = Peek(ahead);
    return t != nullptr && t->kind == TokenKind::kName && t->text == word;
  }
  bool IsKind(TokenKind kind) const {
    const Token* t = Peek();
    return t != nullptr && t->kind == kind;
  }
  uint32_t Offset() const {
    const Token* t = Peek();
    return t != nullptr ? t->offset : static_cast<uint32_t>(source_.size());
  }
  Status ErrorAt(uint32_t offset, const std::string& what) const {
    const SourcePosition p = PositionOf(source_, offset);
    return Status::InvalidArgument(fmt::format("{} line {}, column {}: {}", name_, p.line, p.column, what));
  }
  Status Unexpected(const std::string& expected) const {
    const Token* t = Peek();
    if (t == nullptr) return ErrorAt(Offset(), fmt::format("unexpected end of template, expected {}", expected));
    return ErrorAt(t->offset, fmt::format("unexpected '{}', expected {}", Clip(t->text, 40), expected));
  }
  Status ExpectOp(const char* op) {
    if (!IsOp(op)) return Unexpected(fmt::format("'{}'", op));
    ++pos_;
    return Status::Ok();
  }
  Status ExpectKind(TokenKind kind, const char* what) {
    if (!IsKind(kind)) return Unexpected(what);
    ++pos_;
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (!IsKind(TokenKind::kName)) return Unexpected("a name");
    return tokens_[pos_++].text;
  }
  static NodePtr Make(NodeKind kind, uint32_t offset) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->offset = offset;
    return node;
  }

  // ---- statements ----

  // Parses nodes until "{% <one of stop> ...": consumes "{%" and the stop word, sets *found.
  // `opener` / `opener_offset` name the block for the "unclosed" error.
  Status ParseBody(const std::vector<std::string>& stop, const std::string& opener, uint32_t opener_offset,
                   std::vector<NodePtr>* body, std::string* found) {
    while (pos_ < tokens_.size()) {
      const Token& t = tokens_[pos_];
      if (t.kind == TokenKind::kText) {
        NodePtr node = Make(NodeKind::kText, t.offset);
        node->text = t.text;
        body->push_back(std::move(node));
        ++pos_;
      } else if (t.kind == TokenKind::kOpenExpr) {
        ++pos_;
        NodePtr node = Make(NodeKind::kOutput, t.offset);
        ZM_ASSIGN_OR_RETURN(node->a, ParseExpression());
        ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseExpr, "'}}'"));
        body->push_back(std::move(node));
      } else if (t.kind == TokenKind::kOpenStmt) {
        const Token* word = Peek(1);
        if (word != nullptr && word->kind == TokenKind::kName) {
          for (const std::string& s : stop) {
            if (word->text == s) {
              pos_ += 2;
              *found = s;
              return Status::Ok();
            }
          }
        }
        ++pos_;
        ZM_ASSIGN_OR_RETURN(NodePtr node, ParseStatement(t.offset));
        if (node) body->push_back(std::move(node));
      } else {
        return Unexpected("text, '{{' or '{%'");
      }
    }
    if (!stop.empty()) {
      const SourcePosition p = PositionOf(source_, opener_offset);
      return ErrorAt(static_cast<uint32_t>(source_.size()),
                     fmt::format("unclosed '{}' block opened at line {} (expected '{{% {} %}}')", opener, p.line,
                                 stop.back()));
    }
    return Status::Ok();
  }

  Result<NodePtr> ParseStatement(uint32_t offset) {
    struct DepthGuard {  // bounds the recursion of nested blocks
      int* depth;
      ~DepthGuard() { --*depth; }
    } guard{&(++depth_, depth_)};
    if (depth_ > kMaxNesting) return ErrorAt(offset, "blocks nested too deeply");
    if (!IsKind(TokenKind::kName)) return Unexpected("a statement name");
    const std::string word = tokens_[pos_].text;
    const uint32_t word_offset = tokens_[pos_].offset;
    ++pos_;
    if (word == "if") return ParseIf(offset);
    if (word == "for") return ParseFor(offset);
    if (word == "set") return ParseSet(offset);
    if (word == "macro") return ParseMacro(offset);
    if (word == "call") return ParseCallBlock(offset);
    if (word == "filter") return ParseFilterBlock(offset);
    if (word == "break" || word == "continue") {
      ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
      return Make(word == "break" ? NodeKind::kBreak : NodeKind::kContinue, offset);
    }
    return ErrorAt(word_offset, fmt::format("unknown or unexpected statement '{}'", word));
  }

  // jinja2 refuses a template naming an unknown filter or test when it compiles it, except inside an
  // `if` (test and branches) or a conditional expression, its "soft" frames, where the error waits
  // until the filter is applied; a `for` or macro body inside them is hard again. soft_ is that state.
  struct SoftScope {
    SoftScope(bool* soft, bool value) : soft(soft), saved(*soft) { *soft = value; }
    ~SoftScope() { *soft = saved; }
    bool* soft;
    bool saved;
  };
  void Unknown(uint32_t offset, std::string message) {
    if (!soft_) unknown_.emplace_back(offset, std::move(message));
  }

  Result<NodePtr> ParseIf(uint32_t offset) {
    SoftScope soft(&soft_, true);
    NodePtr node = Make(NodeKind::kIf, offset);
    ZM_ASSIGN_OR_RETURN(node->a, ParseExpression());
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    std::string found;
    ZM_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, "if", offset, &node->body, &found));
    if (found == "elif") {
      ZM_ASSIGN_OR_RETURN(NodePtr elif, ParseIf(tokens_[pos_ - 2].offset));
      node->alt.push_back(std::move(elif));
      return node;
    }
    if (found == "else") {
      ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
      ZM_RETURN_IF_ERROR(ParseBody({"endif"}, "if", offset, &node->alt, &found));
    }
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    return node;
  }

  // A loop or set target: name, or names separated by commas (optionally parenthesised).
  Result<NodePtr> ParseTarget() {
    const uint32_t offset = Offset();
    const bool paren = IsOp("(");
    if (paren) ++pos_;
    std::vector<NodePtr> names;
    while (true) {
      NodePtr name = Make(NodeKind::kName, Offset());
      ZM_ASSIGN_OR_RETURN(name->text, ExpectName());
      names.push_back(std::move(name));
      if (!IsOp(",")) break;
      ++pos_;
    }
    if (paren) ZM_RETURN_IF_ERROR(ExpectOp(")"));
    if (names.size() == 1 && !paren) return std::move(names[0]);
    NodePtr tuple = Make(NodeKind::kTuple, offset);
    tuple->children = std::move(names);
    return tuple;
  }

  Result<NodePtr> ParseFor(uint32_t offset) {
    NodePtr node = Make(NodeKind::kFor, offset);
    ZM_ASSIGN_OR_RETURN(node->a, ParseTarget());
    if (!IsName("in")) return Unexpected("'in'");
    ++pos_;
    ZM_ASSIGN_OR_RETURN(node->b, ParseOr());
    if (IsName("if")) {
      ++pos_;
      ZM_ASSIGN_OR_RETURN(node->c, ParseOr());
    }
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    SoftScope hard(&soft_, false);
    std::string found;
    ZM_RETURN_IF_ERROR(ParseBody({"else", "endfor"}, "for", offset, &node->body, &found));
    if (found == "else") {
      ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
      ZM_RETURN_IF_ERROR(ParseBody({"endfor"}, "for", offset, &node->alt, &found));
    }
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    return node;
  }

  Result<NodePtr> ParseSet(uint32_t offset) {
    NodePtr node = Make(NodeKind::kSet, offset);
    if (IsKind(TokenKind::kName) && IsOp(".", 1)) {  // set ns.attr = value
      NodePtr attr = Make(NodeKind::kAttr, Offset());
      NodePtr object = Make(NodeKind::kName, Offset());
      object->text = tokens_[pos_].text;
      pos_ += 2;
      ZM_ASSIGN_OR_RETURN(attr->text, ExpectName());
      attr->a = std::move(object);
      node->a = std::move(attr);
    } else {
      ZM_ASSIGN_OR_RETURN(node->a, ParseTarget());
    }
    if (IsOp("=")) {
      ++pos_;
      ZM_ASSIGN_OR_RETURN(node->b, ParseExpressionSequence());
      ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
      return node;
    }
    if (node->a->kind != NodeKind::kName) return Unexpected("'='");
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'=' or '%}'"));
    std::string found;
    ZM_RETURN_IF_ERROR(ParseBody({"endset"}, "set", offset, &node->body, &found));
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    return node;
  }

  Status ParseParams(std::vector<Arg>* params) {
    ZM_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      Arg param;
      ZM_ASSIGN_OR_RETURN(param.name, ExpectName());
      if (IsOp("=")) {
        ++pos_;
        ZM_ASSIGN_OR_RETURN(param.value, ParseExpression());
      }
      params->push_back(std::move(param));
      if (!IsOp(",")) break;
      ++pos_;
    }
    return ExpectOp(")");
  }

  Result<NodePtr> ParseMacro(uint32_t offset) {
    NodePtr node = Make(NodeKind::kMacro, offset);
    ZM_ASSIGN_OR_RETURN(node->text, ExpectName());
    ZM_RETURN_IF_ERROR(ParseParams(&node->args));
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    SoftScope hard(&soft_, false);
    std::string found;
    ZM_RETURN_IF_ERROR(ParseBody({"endmacro"}, "macro", offset, &node->body, &found));
    if (IsKind(TokenKind::kName)) ++pos_;  // {% endmacro name %}
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    return node;
  }

  Result<NodePtr> ParseCallBlock(uint32_t offset) {
    NodePtr node = Make(NodeKind::kCallBlock, offset);
    if (IsOp("(")) ZM_RETURN_IF_ERROR(ParseParams(&node->args));
    ZM_ASSIGN_OR_RETURN(node->a, ParsePostfix());
    if (node->a->kind != NodeKind::kCall) return ErrorAt(node->a->offset, "expected a macro call after 'call'");
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    std::string found;
    ZM_RETURN_IF_ERROR(ParseBody({"endcall"}, "call", offset, &node->body, &found));
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    return node;
  }

  Result<NodePtr> ParseFilterBlock(uint32_t offset) {
    NodePtr node = Make(NodeKind::kFilterBlock, offset);
    ZM_ASSIGN_OR_RETURN(node->a, ParseFilterCall(nullptr));
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    std::string found;
    ZM_RETURN_IF_ERROR(ParseBody({"endfilter"}, "filter", offset, &node->body, &found));
    ZM_RETURN_IF_ERROR(ExpectKind(TokenKind::kCloseStmt, "'%}'"));
    return node;
  }

  // ---- expressions ----

  // `a, b, c` as a tuple, or a single expression.
  Result<NodePtr> ParseExpressionSequence() {
    const uint32_t offset = Offset();
    ZM_ASSIGN_OR_RETURN(NodePtr first, ParseExpression());
    if (!IsOp(",")) return first;
    NodePtr tuple = Make(NodeKind::kTuple, offset);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      ++pos_;
      if (IsOp(")") || IsKind(TokenKind::kCloseStmt)) break;
      ZM_ASSIGN_OR_RETURN(NodePtr next, ParseExpression());
      tuple->children.push_back(std::move(next));
    }
    return tuple;
  }

  Result<NodePtr> ParseExpression() {
    struct DepthGuard {  // bounds the recursion on hostile input ("((((...")
      int* depth;
      ~DepthGuard() { --*depth; }
    } guard{&(++depth_, depth_)};
    if (depth_ > kMaxNesting) return ErrorAt(Offset(), "expression nested too deeply");
    const uint32_t offset = Offset();
    const size_t unknown_before = unknown_.size();
    ZM_ASSIGN_OR_RETURN(NodePtr value, ParseOr());
    if (!IsName("if")) return value;
    ++pos_;
    unknown_.resize(unknown_before);  // a conditional expression is soft, its first branch included
    SoftScope soft(&soft_, true);
    NodePtr node = Make(NodeKind::kTernary, offset);
    node->a = std::move(value);
    ZM_ASSIGN_OR_RETURN(node->b, ParseOr());
    if (IsName("else")) {
      ++pos_;
      ZM_ASSIGN_OR_RETURN(node->c, ParseExpression());
    }
    return node;
  }

  Result<NodePtr> ParseOr() {
    ZM_ASSIGN_OR_RETURN(NodePtr left, ParseAnd());
    while (IsName("or")) {
      NodePtr node = Make(NodeKind::kBinary, Offset());
      ++pos_;
      node->text = "or";
      node->a = std::move(left);
      ZM_ASSIGN_OR_RETURN(node->b, ParseAnd());
      left = std::move(node);
    }
    return left;
  }

  Result<NodePtr> ParseAnd() {
    ZM_ASSIGN_OR_RETURN(NodePtr left, ParseNot());
    while (IsName("and")) {
      NodePtr node = Make(NodeKind::kBinary, Offset());
      ++pos_;
      node->text = "and";
      node->a = std::move(left);
      ZM_ASSIGN_OR_RETURN(node->b, ParseNot());
      left = std::move(node);
    }
    return left;
  }

  Result<NodePtr> ParseNot() {
    if (IsName("not")) {
      NodePtr node = Make(NodeKind::kUnary, Offset());
      ++pos_;
      node->text = "not";
      ZM_ASSIGN_OR_RETURN(node->a, ParseNot());
      return node;
    }
    return ParseCompare();
  }

  Result<NodePtr> ParseCompare() {
    const uint32_t offset = Offset();
    ZM_ASSIGN_OR_RETURN(NodePtr first, ParseAdditive());
    NodePtr node;
    while (true) {
      std::string op;
      if (IsName("not") && IsName("in", 1)) {
        op = "not in";
        pos_ += 2;
      } else if (IsName("in")) {
        op = "in";
        ++pos_;
      } else if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">=")) {
        op = tokens_[pos_++].text;
      } else {
        break;
      }
      if (!node) {
        node = Make(NodeKind::kCompare, offset);
        node->children.push_back(std::move(first));
      }
      node->ops.push_back(op);
      ZM_ASSIGN_OR_RETURN(NodePtr next, ParseAdditive());
      node->children.push_back(std::move(next));
    }
    return node ? std::move(node) : std::move(first);
  }

  template <typename Next>
  Result<NodePtr> ParseBinaryLevel(std::initializer_list<const char*> ops, Next next) {
    ZM_ASSIGN_OR_RETURN(NodePtr left, (this->*next)());
    while (true) {
      const char* matched = nullptr;
      for (const char* op : ops) {
        if (IsOp(op)) matched = op;
      }
      if (matched == nullptr) break;
      NodePtr node = Make(NodeKind::kBinary, Offset());
      ++pos_;
      node->text = matched;
      node->a = std::move(left);
      ZM_ASSIGN_OR_RETURN(node->b, (this->*next)());
      left = std::move(node);
    }
    return left;
  }
  Result<NodePtr> ParseAdditive() { return ParseBinaryLevel({"+", "-", "~"}, &Parser::ParseMultiplicative); }
  Result<NodePtr> ParseMultiplicative() { return ParseBinaryLevel({"*", "/", "//", "%"}, &Parser::ParsePower); }
  Result<NodePtr> ParsePower() { return ParseBinaryLevel({"**"}, &Parser::ParseTest); }

  Result<NodePtr> ParseTest() {
    ZM_ASSIGN_OR_RETURN(NodePtr operand, ParseFilter());
    while (IsName("is")) {
      NodePtr node = Make(NodeKind::kTest, Offset());
      ++pos_;
      if (IsName("not")) {
        node->negate = true;
        ++pos_;
      }
      const uint32_t name_offset = Offset();
      ZM_ASSIGN_OR_RETURN(node->text, ExpectName());
      if (!IsKnownTest(node->text)) Unknown(name_offset, fmt::format("unknown test '{}'", node->text));
      if (IsOp("(")) {
        ZM_RETURN_IF_ERROR(ParseCallArgs(&node->args));
      } else if (IsKind(TokenKind::kString) || IsKind(TokenKind::kInt) || IsKind(TokenKind::kFloat) ||
                 (IsKind(TokenKind::kName) && !IsName("and") && !IsName("or") && !IsName("else") &&
                  !IsName("if") && !IsName("is") && !IsName("in") && !IsName("not"))) {
        Arg arg;  // jinja2's `x is divisibleby 3`, `x is sameas none`
        ZM_ASSIGN_OR_RETURN(arg.value, ParsePrimary());
        node->args.push_back(std::move(arg));
      }
      node->a = std::move(operand);
      operand = std::move(node);
    }
    return operand;
  }

  // `name` or `name(args)` after a "|" (or after `filter` in a filter block).
  Result<NodePtr> ParseFilterCall(NodePtr operand) {
    NodePtr node = Make(NodeKind::kFilter, Offset());
    const uint32_t name_offset = Offset();
    ZM_ASSIGN_OR_RETURN(node->text, ExpectName());
    if (!IsKnownFilter(node->text)) Unknown(name_offset, fmt::format("unknown filter '{}'", node->text));
    if (IsOp("(")) ZM_RETURN_IF_ERROR(ParseCallArgs(&node->args));
    node->a = std::move(operand);
    return node;
  }

  Result<NodePtr> ParseFilter() {
    ZM_ASSIGN_OR_RETURN(NodePtr operand, ParseUnary());
    while (IsOp("|")) {
      ++pos_;
      ZM_ASSIGN_OR_RETURN(operand, ParseFilterCall(std::move(operand)));
    }
    return operand;
  }

  Result<NodePtr> ParseUnary() {
    if (IsOp("-") || IsOp("+")) {
      NodePtr node = Make(NodeKind::kUnary, Offset());
      node->text = tokens_[pos_++].text;
      ZM_ASSIGN_OR_RETURN(node->a, ParseUnary());
      return node;
    }
    return ParsePostfix();
  }

  Status ParseCallArgs(std::vector<Arg>* args) {
    ZM_RETURN_IF_ERROR(ExpectOp("("));
    bool saw_keyword = false;
    while (!IsOp(")")) {
      Arg arg;
      const uint32_t offset = Offset();
      if (IsOp("**")) {
        ++pos_;
        arg.double_star = true;
      } else if (IsOp("*")) {
        ++pos_;
        arg.star = true;
      } else if (IsKind(TokenKind::kName) && IsOp("=", 1)) {
        arg.name = tokens_[pos_].text;
        pos_ += 2;
        saw_keyword = true;
      } else if (saw_keyword) {
        return ErrorAt(offset, "positional argument after a keyword argument");
      }
      ZM_ASSIGN_OR_RETURN(arg.value, ParseExpression());
      args->push_back(std::move(arg));
      if (!IsOp(",")) break;
      ++pos_;
    }
    return ExpectOp(")");
  }

  Result<NodePtr> ParsePostfix() {
    ZM_ASSIGN_OR_RETURN(NodePtr object, ParsePrimary());
    while (true) {
      if (IsOp(".")) {
        ++pos_;
        if (IsKind(TokenKind::kInt)) {  // x.0 is x[0]
          NodePtr node = Make(NodeKind::kIndex, Offset());
          NodePtr index = Make(NodeKind::kLiteral, Offset());
          const std::optional<uint64_t> i = ParseDecimal(tokens_[pos_].text, INT64_MAX);
          if (!i) return ErrorAt(Offset(), "integer literal out of range");
          ++pos_;
          index->literal = Value::Int(static_cast<int64_t>(*i));
          node->a = std::move(object);
          node->b = std::move(index);
          object = std::move(node);
          continue;
        }
        NodePtr node = Make(NodeKind::kAttr, Offset());
        ZM_ASSIGN_OR_RETURN(node->text, ExpectName());
        node->a = std::move(object);
        object = std::move(node);
      } else if (IsOp("[")) {
        const uint32_t offset = Offset();
        ++pos_;
        NodePtr parts[3];
        int n_colons = 0;
        while (!IsOp("]")) {
          if (IsOp(":")) {
            if (++n_colons > 2) return Unexpected("']'");
            ++pos_;
            continue;
          }
          if (parts[n_colons]) return Unexpected("':' or ']'");
          ZM_ASSIGN_OR_RETURN(parts[n_colons], ParseExpression());
        }
        ++pos_;
        if (n_colons == 0 && !parts[0]) return ErrorAt(offset, "empty subscript '[]'");
        NodePtr node = Make(n_colons == 0 ? NodeKind::kIndex : NodeKind::kSlice, offset);
        node->a = std::move(object);
        node->b = std::move(parts[0]);
        node->c = std::move(parts[1]);
        node->d = std::move(parts[2]);
        object = std::move(node);
      } else if (IsOp("(")) {
        NodePtr node = Make(NodeKind::kCall, Offset());
        ZM_RETURN_IF_ERROR(ParseCallArgs(&node->args));
        node->a = std::move(object);
        object = std::move(node);
      } else {
        return object;
      }
    }
  }

  Result<NodePtr> ParsePrimary() {
    const Token* t = Peek();
    if (t == nullptr) return Unexpected("an expression");
    const uint32_t offset = t->offset;
    switch (t->kind) {
      case TokenKind::kInt:
      case TokenKind::kFloat: {
        NodePtr node = Make(NodeKind::kLiteral, offset);
        if (t->kind == TokenKind::kInt) {
          const std::optional<uint64_t> i = ParseDecimal(t->text, INT64_MAX);
          if (!i) return ErrorAt(offset, "integer literal out of range");
          node->literal = Value::Int(static_cast<int64_t>(*i));
        } else {
          node->literal = Value::Float(ParseFloatLiteral(t->text));
        }
        ++pos_;
        return node;
      }
      case TokenKind::kString: {
        std::string value;
        while (IsKind(TokenKind::kString)) value += tokens_[pos_++].text;  // 'a' 'b' is 'ab'
        NodePtr node = Make(NodeKind::kLiteral, offset);
        node->literal = Value::String(std::move(value));
        return node;
      }
      case TokenKind::kName: {
        ++pos_;
        NodePtr node = Make(NodeKind::kLiteral, offset);
        if (t->text == "true" || t->text == "True") {
          node->literal = Value::Bool(true);
        } else if (t->text == "false" || t->text == "False") {
          node->literal = Value::Bool(false);
        } else if (t->text == "none" || t->text == "None") {
          node->literal = Value::None();
        } else {
          node->kind = NodeKind::kName;
          node->text = t->text;
        }
        return node;
      }
      case TokenKind::kOperator:
        if (t->text == "(") {
          ++pos_;
          if (IsOp(")")) {
            ++pos_;
            return Make(NodeKind::kTuple, offset);
          }
          ZM_ASSIGN_OR_RETURN(NodePtr inner, ParseExpressionSequence());
          ZM_RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (t->text == "[") {
          ++pos_;
          NodePtr node = Make(NodeKind::kList, offset);
          while (!IsOp("]")) {
            ZM_ASSIGN_OR_RETURN(NodePtr item, ParseExpression());
            node->children.push_back(std::move(item));
            if (!IsOp(",")) break;
            ++pos_;
          }
          ZM_RETURN_IF_ERROR(ExpectOp("]"));
          return node;
        }
        if (t->text == "{") {
          ++pos_;
          NodePtr node = Make(NodeKind::kDict, offset);
          while (!IsOp("}")) {
            ZM_ASSIGN_OR_RETURN(NodePtr key, ParseExpression());
            ZM_RETURN_IF_ERROR(ExpectOp(":"));
            ZM_ASSIGN_OR_RETURN(NodePtr value, ParseExpression());
            node->children.push_back(std::move(key));
            node->children.push_back(std::move(value));
            if (!IsOp(",")) break;
            ++pos_;
          }
          ZM_RETURN_IF_ERROR(ExpectOp("}"));
          return node;
        }
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  const std::vector<Token>& tokens_;
  std::string_view source_;
  const std::string& name_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool soft_ = false;
  std::vector<std::pair<uint32_t, std::string>> unknown_;  // unknown filters / tests outside soft frames
};

}  // namespace

Result<std::vector<NodePtr>> Parse(const std::vector<Token>& tokens, std::string_view source,
                                   const std::string& name) {
  return Parser(tokens, source, name).Run();
}

}  // namespace zipmoe::jinja
