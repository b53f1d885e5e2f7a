// Tests for services/api/json_grammar: known texts accepted or refused for each schema construct, at
// every prefix (a valid text's prefixes are all alive, a refused one dies where it breaks), and
// schema errors that name the keyword.
#include "services/api/json_grammar.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zipmoe::api {
namespace {

using nlohmann::json;

std::shared_ptr<const JsonGrammar> Grammar(const json& schema, bool object_root = false) {
  auto g = JsonGrammar::Compile(schema, object_root);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

// True when `text` is a complete valid value; each prefix fed one byte at a time must stay alive
// until the first byte that breaks it.
bool Accepts(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  JsonMatcher m(g);
  for (char c : text) {
    if (!m.Feed(std::string(1, c))) return false;
  }
  return m.Accepting();
}

// True when some continuation of `text` may still be valid.
bool Alive(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  JsonMatcher m(g);
  return m.Feed(text);
}

TEST(JsonGrammar, AnyValue) {
  auto g = Grammar(json::object());
  for (const char* ok : {"1", "-0.5e+3", "\"x\"", "true", "null", "[]", "[1, [2, {}]]", "{\"a\": {\"b\": [null]}}",
                         "  {\"k\" : \"v\"}  ", "\"\\u00e9\\n\"", "\"caf\xc3\xa9\""}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad : {"01", "-", "1.", "tru", "[1,]", "{\"a\" 1}", "{a: 1}", "\"\x01\"", "\"\\x\"", "[1] 2", "'x'",
                          "\"\xc3\"", "\"\x80\"", "{\"a\": 1,}", "nul", "\"\xc1\xb0\"", "\"\xe0\x80\x80\"",
                          "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\""}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
  EXPECT_TRUE(Alive(g, "{\"a\": [1, 2"));
  EXPECT_FALSE(Alive(g, "{\"a\": [1, 2}"));
}

TEST(JsonGrammar, ObjectsWithPropertiesAndRequired) {
  auto g = Grammar(json::parse(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                   "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
                                   "required": ["name", "age"]})"));
  EXPECT_TRUE(Accepts(g, R"({"name": "Ann", "age": 31})"));
  EXPECT_TRUE(Accepts(g, R"({"age": 31, "name": "Ann", "tags": ["a", "b"]})"));
  EXPECT_TRUE(Accepts(g, "{\n  \"name\": \"\",\n  \"age\": -4\n}"));
  EXPECT_FALSE(Accepts(g, R"({"name": "Ann"})"));                       // age missing
  EXPECT_FALSE(Accepts(g, R"({"name": "Ann", "age": 3.5})"));           // not an integer
  EXPECT_FALSE(Accepts(g, R"({"name": "Ann", "age": 3, "name": "B"})"));  // a key twice
  EXPECT_FALSE(Accepts(g, R"({"name": "Ann", "age": 3, "x": 1})"));     // not a property
  EXPECT_FALSE(Accepts(g, R"({"name": 1, "age": 3})"));
  EXPECT_FALSE(Accepts(g, R"({"name": "A", "age": 3, "tags": ["a", "b", "c"]})"));  // maxItems
  EXPECT_TRUE(Alive(g, R"({"nam)"));
  EXPECT_FALSE(Alive(g, R"({"x)"));  // no property starts with x
  EXPECT_FALSE(Accepts(g, "[]"));
}

TEST(JsonGrammar, StringsLengthsEnumsConst) {
  auto s = Grammar(json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"));
  EXPECT_TRUE(Accepts(s, "\"ab\""));
  EXPECT_TRUE(Accepts(s, "\"\xc3\xa9\xc3\xa9\xc3\xa9\""));  // three code points, six bytes
  EXPECT_TRUE(Accepts(s, "\"a\\nb\""));
  EXPECT_FALSE(Accepts(s, "\"a\""));
  EXPECT_FALSE(Accepts(s, "\"abcd\""));
  auto e = Grammar(json::parse(R"({"enum": ["red", "green", 1, 12, null]})"));
  for (const char* ok : {"\"red\"", "\"green\"", "1", "12", "null"}) EXPECT_TRUE(Accepts(e, ok)) << ok;
  for (const char* bad : {"\"blue\"", "2", "123", "\"re\"", "true"}) EXPECT_FALSE(Accepts(e, bad)) << bad;
  auto in_array = Grammar(json::parse(R"({"type": "array", "items": {"enum": [1, 12]}})"));
  EXPECT_TRUE(Accepts(in_array, "[1, 12, 1]"));
  EXPECT_FALSE(Accepts(in_array, "[121]"));
  auto c = Grammar(json::parse(R"({"const": {"a": [1, "x"]}})"));
  EXPECT_TRUE(Accepts(c, R"({"a":[1,"x"]})"));
  EXPECT_FALSE(Accepts(c, R"({"a":[1,"y"]})"));
}

TEST(JsonGrammar, AnyOfTypeListsAndRefs) {
  auto g = Grammar(json::parse(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})"));
  EXPECT_TRUE(Accepts(g, "7"));
  EXPECT_TRUE(Accepts(g, "\"x\""));
  EXPECT_FALSE(Accepts(g, "\"xy\""));
  EXPECT_FALSE(Accepts(g, "7.5"));
  auto nullable = Grammar(json::parse(R"({"type": ["number", "null"]})"));
  EXPECT_TRUE(Accepts(nullable, "null"));
  EXPECT_TRUE(Accepts(nullable, "2.5"));
  auto tree = Grammar(json::parse(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})"));
  EXPECT_TRUE(Accepts(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})"));
  EXPECT_FALSE(Accepts(tree, R"({"v": 1, "kids": [{"w": 2}]})"));
}

TEST(JsonGrammar, ObjectRootAndFreeObjects) {
  auto g = Grammar(json::object(), /*object_root=*/true);
  EXPECT_TRUE(Accepts(g, R"({"any": [1, {"x": null}], "b": "c"})"));
  EXPECT_FALSE(Accepts(g, "[1]"));
  EXPECT_FALSE(Accepts(g, "\"s\""));
  auto map = Grammar(json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"));
  EXPECT_TRUE(Accepts(map, R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(Accepts(map, R"({"a": "1"})"));
}

TEST(JsonGrammar, WhitespaceIsBounded) {
  auto g = Grammar(json::object());
  EXPECT_TRUE(Accepts(g, "[" + std::string(kMaxWhitespaceRun, ' ') + "1]"));
  EXPECT_FALSE(Accepts(g, "[" + std::string(kMaxWhitespaceRun + 1, ' ') + "1]"));
  EXPECT_FALSE(Accepts(g, "1" + std::string(kMaxWhitespaceRun + 1, '\n')));
  EXPECT_FALSE(Accepts(g, std::string(kMaxNumberChars + 1, '1')));
  EXPECT_TRUE(Accepts(g, "1e99"));
  EXPECT_FALSE(Accepts(g, "1e999"));  // parsers overflow past this
}

TEST(JsonGrammar, IntegerBoundsAreExact) {
  auto g = Grammar(json::parse(R"({"type": "integer", "minimum": 0, "maximum": 120})"));
  for (const char* ok : {"0", "7", "99", "120"}) EXPECT_TRUE(Accepts(g, ok)) << ok;
  for (const char* bad : {"-1", "121", "1000", "00", "-0", "1.5"}) EXPECT_FALSE(Accepts(g, bad)) << bad;
  EXPECT_TRUE(Alive(g, "12"));   // 12, 120 fit
  EXPECT_FALSE(Alive(g, "130"));  // no completion of 130 fits
  EXPECT_FALSE(Alive(g, "-"));
  auto neg = Grammar(json::parse(R"({"type": "integer", "exclusiveMinimum": -51, "maximum": -10})"));
  for (const char* ok : {"-10", "-50", "-23"}) EXPECT_TRUE(Accepts(neg, ok)) << ok;
  for (const char* bad : {"-5", "-51", "5", "0", "-9"}) EXPECT_FALSE(Accepts(neg, bad)) << bad;
  auto ex = Grammar(json::parse(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3.5})"));
  for (const char* ok : {"1", "2", "3"}) EXPECT_TRUE(Accepts(ex, ok)) << ok;
  for (const char* bad : {"0", "4"}) EXPECT_FALSE(Accepts(ex, bad)) << bad;
  auto in_object = Grammar(json::parse(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 18}},
      "required": ["age"]})"));
  EXPECT_TRUE(Accepts(in_object, R"({"age": 18})"));
  EXPECT_FALSE(Accepts(in_object, R"({"age": 17})"));  // ends at '}' below the minimum
  EXPECT_FALSE(JsonGrammar::Compile(json::parse(R"({"type": "number", "minimum": 0})")).ok());
  EXPECT_FALSE(JsonGrammar::Compile(json::parse(R"({"type": "integer", "minimum": 5, "maximum": 4})")).ok());
}

TEST(JsonGrammar, FramedValueForAToolCall) {
  auto g = JsonGrammar::CompileFramed(json::parse(R"({"type": "object", "properties": {"name": {"const": "f"},
      "arguments": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}},
      "required": ["name", "arguments"]})"),
                                      "<tool_call>", "</tool_call>");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(Accepts(*g, R"(<tool_call>{"name": "f", "arguments": {"n": 3}}</tool_call>)"));
  EXPECT_TRUE(Accepts(*g, "<tool_call>\n{\"arguments\": {\"n\": 3}, \"name\": \"f\"}\n</tool_call>"));
  EXPECT_TRUE(Accepts(*g, R"(<tool_call>{"name": "f", "arguments": {"n": 30}}</tool_call>)"));  // a number ends at '<'
  EXPECT_FALSE(Accepts(*g, R"(<tool_call>{"name": "f", "arguments": {"n": 3}})"));  // no suffix yet
  EXPECT_FALSE(Accepts(*g, R"({"name": "f", "arguments": {"n": 3}}</tool_call>)"));
  EXPECT_FALSE(Accepts(*g, R"(<tool_call>{"name": "g", "arguments": {"n": 3}}</tool_call>)"));
  EXPECT_FALSE(Accepts(*g, R"(<tool_call>{"name": "f", "arguments": {"n": 3}}</tool_call>x)"));
}

TEST(JsonGrammar, SchemaErrorsNameTheKeyword) {
  auto err = [](const char* schema) {
    auto g = JsonGrammar::Compile(json::parse(schema));
    EXPECT_FALSE(g.ok()) << schema;
    return g.ok() ? std::string() : g.status().message();
  };
  EXPECT_NE(err(R"({"type": "string", "pattern": "^a"})").find("'pattern' at the root"), std::string::npos);
  EXPECT_NE(err(R"({"properties": {"x": {"type": "number", "minimum": 0}}})").find("'minimum (on type number"),
            std::string::npos);
  EXPECT_NE(err(R"({"properties": {"x": {"type": "string", "format": "email"}}})").find("'format' at /properties/x"),
            std::string::npos);
  EXPECT_NE(err(R"({"$ref": "#/nowhere"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "properties": {}, "required": ["a"]})").find("required"), std::string::npos);
  EXPECT_NE(err(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("minItems > maxItems"), std::string::npos);
  EXPECT_NE(err(R"({"type": "date"})").find("unknown type 'date'"), std::string::npos);
  EXPECT_NE(err(R"({"oneOf": [{"type": "string"}]})").find("'oneOf'"), std::string::npos);
  EXPECT_FALSE(JsonGrammar::Compile(json::parse(R"({"type": "string"})"), /*object_root=*/true).ok());
}

}  // namespace
}  // namespace zipmoe::api
