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

// \u escapes stay well-formed UTF-16: a high surrogate takes a low one right after it (the pair is one
// character of maxLength), a low one never stands alone, and no prefix is alive that cannot end well.
TEST(JsonGrammar, UnicodeEscapesAreWellFormedSurrogatePairs) {
  auto s = Grammar(json::parse(R"({"type": "string", "maxLength": 2})"));
  EXPECT_TRUE(Accepts(s, R"("\u00e9\u4e2d")"));
  EXPECT_TRUE(Accepts(s, R"("\ud83d\ude00x")"));  // U+1F600 and x: two characters
  EXPECT_TRUE(Accepts(s, R"("\uD83D\uDE00\uDBFF\uDFFF")"));
  EXPECT_TRUE(Accepts(s, R"("\ud7ff\ue000")"));  // just outside the surrogates
  EXPECT_FALSE(Accepts(s, R"("\ud83d\ude00xy")"));  // three characters
  EXPECT_FALSE(Alive(s, R"("\udc)"));          // a low surrogate first: dead at its second digit
  EXPECT_FALSE(Alive(s, R"("\udddd)"));
  EXPECT_FALSE(Alive(s, R"("\ud83d")"));       // a high one then the end of the string
  EXPECT_FALSE(Alive(s, R"("\ud83dx)"));
  EXPECT_FALSE(Alive(s, R"("\ud83d\n)"));
  EXPECT_FALSE(Alive(s, R"("\ud83d\ud8)"));    // a high one after a high one
  EXPECT_FALSE(Alive(s, R"("\ud83d\u00)"));
  EXPECT_TRUE(Alive(s, R"("\ud83d\ud)"));
  auto key = Grammar(json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"));
  EXPECT_TRUE(Accepts(key, R"({"\ud83d\ude00": 1})"));
  EXPECT_FALSE(Alive(key, R"({"\ude00)"));
}

// "properties": {} lists no property: only {} (OpenAI's strict mode), unlike a bare {"type": "object"}.
TEST(JsonGrammar, EmptyPropertiesAdmitOnlyTheEmptyObject) {
  auto empty = Grammar(json::parse(R"({"type": "object", "properties": {}})"));
  EXPECT_TRUE(Accepts(empty, "{}"));
  EXPECT_TRUE(Accepts(empty, "{ }"));
  EXPECT_FALSE(Accepts(empty, R"({"a": 1})"));
  auto bare = Grammar(json::parse(R"({"type": "object"})"));
  EXPECT_TRUE(Accepts(bare, R"({"a": 1})"));
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

// A forced DeepSeek-V3 call: the function name sits in the frame, so each tool is an alternative
// with its own prefix and schema; the matcher keeps both alive until the name tells them apart.
TEST(JsonGrammar, AlternativesEachWithTheirOwnFrame) {
  const std::string begin = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>";
  const std::string end = "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  auto g = JsonGrammar::CompileAlternatives(
      {{json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"),
        begin + "weather\n```json\n", end},
       {json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})"),
        begin + "wait\n```json\n", end}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ((*g)->alternatives().size(), 2u);
  EXPECT_TRUE(Accepts(*g, begin + "weather\n```json\n{\"city\": \"Oslo\"}" + end));
  EXPECT_TRUE(Accepts(*g, begin + "wait\n```json\n{\"n\": 5}" + end));
  EXPECT_FALSE(Accepts(*g, begin + "weather\n```json\n{\"n\": 5}" + end));    // the other tool's arguments
  EXPECT_FALSE(Accepts(*g, begin + "wait\n```json\n{\"city\": \"Oslo\"}" + end));
  EXPECT_FALSE(Accepts(*g, begin + "sleep\n```json\n{}" + end));
  EXPECT_FALSE(Accepts(*g, begin + "weather\n```json\n{\"city\": \"Oslo\"}"));  // no end yet
  // The errors name the alternative; the number of alternatives is bounded.
  auto bad = JsonGrammar::CompileAlternatives({{json::object(), "a", "b"}, {json::parse(R"({"pattern": "x"})"), "c", ""}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("alternative 1"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(JsonGrammar::CompileAlternatives({}).ok());
  std::vector<JsonGrammar::Framing> many(kMaxAlternatives + 1, JsonGrammar::Framing{json::object(), "p", "s"});
  EXPECT_FALSE(JsonGrammar::CompileAlternatives(many).ok());
}

// A thinking model under a constraint: free text up to the first "</think>", then the value (after
// whitespace, and after the frame's prefix when there is one).
TEST(JsonGrammar, FreeTextUpToTheMarkerThenTheValue) {
  auto g = JsonGrammar::CompileAlternatives({{json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["a"]})"), "", ""}}, "</think>");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(Accepts(*g, "</think>{\"a\": 1}"));
  EXPECT_TRUE(Accepts(*g, "Let me see: {\"b\": 2} is wrong, <b>bold</b>, <</think>\n\n{\"a\": 1}"));
  EXPECT_TRUE(Accepts(*g, "a </thin and </thi</think>{\"a\": 1}"));  // marker prefixes that break off
  EXPECT_FALSE(Accepts(*g, "{\"a\": 1}"));                            // still thinking: no answer yet
  EXPECT_FALSE(Accepts(*g, "ok</think>"));
  EXPECT_FALSE(Accepts(*g, "ok</think>{\"a\": \"x\"}"));
  EXPECT_FALSE(Accepts(*g, "ok</think>{\"a\": 1}</think>"));           // one marker only: then JSON
  JsonMatcher m(*g);
  EXPECT_TRUE(m.InFreeTextAtRest());
  ASSERT_TRUE(m.Feed("hmm </th"));
  EXPECT_FALSE(m.InFreeTextAtRest());  // part of the marker is written
  ASSERT_TRUE(m.Feed("ink>"));
  EXPECT_FALSE(m.InFreeTextAtRest());

  auto framed = JsonGrammar::CompileAlternatives({{json::object(), "<tool_call>", "</tool_call>"}}, "</think>");
  ASSERT_TRUE(framed.ok());
  EXPECT_TRUE(Accepts(*framed, "x</think>\n\n<tool_call>{}</tool_call>"));
  EXPECT_FALSE(Accepts(*framed, "x\n\n<tool_call>{}</tool_call>"));
  // WithFreeTextBefore adds the same lead to a compiled grammar.
  auto plain = JsonGrammar::Compile(json::parse(R"({"type": "integer"})"));
  ASSERT_TRUE(plain.ok());
  auto led = JsonGrammar::WithFreeTextBefore(*plain, "</think>");
  EXPECT_TRUE(Accepts(led, "so 3?</think> 3"));
  EXPECT_FALSE(Accepts(led, "3"));
  EXPECT_EQ(JsonGrammar::WithFreeTextBefore(*plain, ""), *plain);
}

// Special tokens (FeedFixedText) may write a fixed text or the end marker of the free text, never JSON
// content or free text.
TEST(JsonGrammar, FixedTextOnlyTakesMarkers) {
  auto g = JsonGrammar::CompileAlternatives({{json::parse(R"({"type": "object", "properties": {"s": {"type": "string"}}})"),
                                              "[TOOL_CALLS][", "]"}},
                                            "</think>");
  ASSERT_TRUE(g.ok());
  JsonMatcher m(*g);
  EXPECT_TRUE(m.InFixedText());
  EXPECT_FALSE(JsonMatcher(m).FeedFixedText("[TOOL_CALLS]"));  // free text first
  EXPECT_FALSE(JsonMatcher(m).FeedFixedText("<|im_end|>"));
  ASSERT_TRUE(m.Feed("thinking"));
  ASSERT_TRUE(m.FeedFixedText("</think>"));  // a special </think> (GLM) ends the free text
  ASSERT_TRUE(m.Feed("\n"));
  ASSERT_TRUE(m.FeedFixedText("[TOOL_CALLS]"));
  EXPECT_FALSE(m.InFixedText() && JsonMatcher(m).FeedFixedText("[TOOL_CALLS]"));
  ASSERT_TRUE(m.Feed("[{\"s\": \""));
  EXPECT_FALSE(m.InFixedText());
  EXPECT_FALSE(JsonMatcher(m).FeedFixedText("[TOOL_CALLS]"));  // inside a JSON string: plain bytes only
  EXPECT_TRUE(JsonMatcher(m).Feed("[TOOL_CALLS]"));
  ASSERT_TRUE(m.Feed("x\"}"));
  EXPECT_TRUE(m.FeedFixedText("]"));
  EXPECT_TRUE(m.Accepting());
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
  EXPECT_NE(err(R"({"properties": {"x": {"type": "string", "format": "email"}}})")
                .find("'format \"email\" (date, time, date-time and uuid are enforced)' at /properties/x"),
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

namespace zipmoe::api {
namespace {

// Tagged arguments (TagSyntax): a GLM-4.5 call and a Qwen3-Coder call as their chat templates write
// them; string values raw up to the closing tag, other values as JSON; any order, each property once,
// required ones present; enums of strings raw; special-token texts only where the syntax has them.
std::shared_ptr<const JsonGrammar> Tagged(TagSyntax tags, const std::string& prefix, const std::string& suffix) {
  const json schema = json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string", "minLength": 1, "maxLength": 12},
      "days": {"type": "integer", "minimum": 1, "maximum": 14},
      "unit": {"enum": ["c", "celsius", "f"]},
      "ci": {"type": "boolean"},
      "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["city", "unit"], "additionalProperties": false})");
  auto g = JsonGrammar::CompileAlternatives({{schema, prefix, suffix}}, "", tags);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

TEST(JsonGrammar, GlmTaggedArguments) {
  const auto g = Tagged(TagSyntax::kGlm, "<tool_call>get_weather", "</tool_call>");
  const std::string kv = "\n<arg_key>city</arg_key>\n<arg_value>Rome <3 &\"x\"</arg_value>"
                         "\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>";
  EXPECT_TRUE(Accepts(g, "<tool_call>get_weather" + kv + "\n</tool_call>"));
  EXPECT_TRUE(Accepts(g, "<tool_call>get_weather\n<arg_key>unit</arg_key>\n<arg_value>c</arg_value>"
                         "\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>"
                         "<arg_key>ci</arg_key>\n<arg_value>true</arg_value>"
                         "<arg_key>tags</arg_key>\n<arg_value>[\"a\", \"b\"]</arg_value>"
                         "<arg_key>city</arg_key>\n<arg_value>Köln\nWest</arg_value></tool_call>"));
  EXPECT_FALSE(Accepts(g, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value></tool_call>"))
      << "unit is required";
  EXPECT_FALSE(Accepts(g, "<tool_call>get_weather" + kv + "<arg_key>city</arg_key>\n<arg_value>X</arg_value></tool_call>"))
      << "a property twice";
  EXPECT_FALSE(Accepts(g, "<tool_call>get_weather" + kv + "<arg_key>days</arg_key>\n<arg_value>15</arg_value></tool_call>"))
      << "maximum";
  EXPECT_FALSE(Accepts(g, "<tool_call>get_weather" + kv + "<arg_key>days</arg_key>\n<arg_value>\"3\"</arg_value></tool_call>"))
      << "an integer is JSON";
  EXPECT_FALSE(Accepts(g, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value></arg_value>"
                          "<arg_key>unit</arg_key>\n<arg_value>c</arg_value></tool_call>"))
      << "minLength 1";
  EXPECT_FALSE(Accepts(g, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>abcdefghijklm</arg_value>"
                          "<arg_key>unit</arg_key>\n<arg_value>c</arg_value></tool_call>"))
      << "maxLength 12";
  EXPECT_TRUE(Accepts(g, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>abcdefghijkl</arg_value>"
                         "<arg_key>unit</arg_key>\n<arg_value>c</arg_value></tool_call>"));
  EXPECT_FALSE(Accepts(g, "<tool_call>get_weather\n<arg_key>unit</arg_key>\n<arg_value>kelvin</arg_value>"
                          "<arg_key>city</arg_key>\n<arg_value>X</arg_value></tool_call>"))
      << "not in the enum";
  EXPECT_FALSE(Accepts(g, "<tool_call>get_weather\n<arg_key>town</arg_key>\n<arg_value>X</arg_value></tool_call>"));
  // The raw string cannot hold its closing tag, but may hold a prefix of it.
  EXPECT_TRUE(Accepts(g, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value></arg_valu</arg_value>"
                         "<arg_key>unit</arg_key>\n<arg_value>f</arg_value></tool_call>"));
  // Special tokens write the syntax's texts, never a name or a value.
  JsonMatcher m(g);
  ASSERT_TRUE(m.FeedFixedText("<tool_call>"));
  ASSERT_TRUE(m.Feed("get_weather\n"));
  EXPECT_TRUE(m.InFixedText());
  ASSERT_TRUE(m.FeedFixedText("<arg_key>"));
  EXPECT_FALSE(JsonMatcher(m).FeedFixedText("city"));
  ASSERT_TRUE(m.Feed("city"));
  ASSERT_TRUE(m.FeedFixedText("</arg_key>"));
  ASSERT_TRUE(m.Feed("\n"));
  ASSERT_TRUE(m.FeedFixedText("<arg_value>"));
  ASSERT_TRUE(m.Feed("Rome"));
  ASSERT_TRUE(m.FeedFixedText("</arg_value>"));
  EXPECT_FALSE(m.Accepting());
}

TEST(JsonGrammar, QwenXmlTaggedArguments) {
  const auto g = Tagged(TagSyntax::kQwenXml, "<tool_call>\n<function=get_weather>\n", "</function>\n</tool_call>");
  EXPECT_TRUE(Accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n</parameter>\n"
                         "<parameter=unit>\nf\n</parameter>\n<parameter=days>\n7\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(Accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=unit>\ncelsius\n</parameter>\n"
                         "<parameter=city>\nln 1\nln 2\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(Accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(Accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=unit>\nc\n</parameter>\n"
                          "<parameter=city>\nX\n</parameter>\n<parameter=days>\n0\n</parameter>\n</function>\n</tool_call>"));
}

TEST(JsonGrammar, TaggedArgumentsNeedPropertiesAndWritableNames) {
  EXPECT_FALSE(JsonGrammar::CompileAlternatives({{json{{"type", "array"}}, "", ""}}, "", TagSyntax::kGlm).ok());
  EXPECT_FALSE(JsonGrammar::CompileAlternatives({{json::parse(R"({"type":"object","additionalProperties":true})"), "", ""}},
                                                "", TagSyntax::kGlm).ok());
  const auto bad = JsonGrammar::CompileAlternatives(
      {{json::parse(R"({"type":"object","properties":{"a<b":{"type":"string"}}})"), "", ""}}, "", TagSyntax::kGlm);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a<b"), std::string::npos) << bad.status().ToString();
  // No parameters at all: the call is its frame.
  auto none = JsonGrammar::CompileAlternatives(
      {{json::parse(R"({"type":"object","properties":{},"additionalProperties":false})"), "<tool_call>ping", "</tool_call>"}},
      "", TagSyntax::kGlm);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(Accepts(*none, "<tool_call>ping\n</tool_call>"));
}

std::string CompileError(const json& schema) {
  auto g = JsonGrammar::Compile(schema);
  EXPECT_FALSE(g.ok()) << schema.dump();
  return g.ok() ? "" : std::string(g.status().message());
}

// A $ref cycle through anyOf that writes nothing first expanded forever in the matcher (a crash on the
// first token); a cycle of bare references compiled to "any value".
TEST(JsonGrammar, LeftRecursionAndBareReferenceCyclesAreRefused) {
  for (const char* text : {R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})",
                           R"({"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "integer"}]}}, "$ref": "#/$defs/A"})",
                           R"({"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
                                         "B": {"anyOf": [{"$ref": "#/$defs/A"}]}}, "$ref": "#/$defs/A"})"}) {
    EXPECT_NE(CompileError(json::parse(text)).find("refers back to itself before any value"), std::string::npos)
        << text;
  }
  for (const char* text : {R"({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"})",
                           R"({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"})"}) {
    EXPECT_NE(CompileError(json::parse(text)).find("cycle of references"), std::string::npos) << text;
  }
  // Recursion behind a byte ('[' here) is fine.
  auto g = Grammar(json::parse(R"({"anyOf": [{"type": "array", "items": {"$ref": "#"}}, {"type": "null"}]})"));
  EXPECT_TRUE(Accepts(g, "[[null], [], null]"));
  EXPECT_FALSE(Accepts(g, "[1]"));
}

// A required property or item that recurses without end has no finite instance: refused, rather than
// leading the text into a dead end.
TEST(JsonGrammar, SchemasWithoutAFiniteValueAreRefused) {
  const std::string e = CompileError(json::parse(
      R"({"$defs": {"N": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "required": ["n"]}},
          "$ref": "#/$defs/N"})"));
  EXPECT_NE(e.find("admits no finite value"), std::string::npos) << e;
  EXPECT_NE(e.find("/$defs/N"), std::string::npos) << e;
  EXPECT_NE(CompileError(json::parse(R"({"type": "array", "minItems": 1, "items": {"$ref": "#"}})"))
                .find("admits no finite value"),
            std::string::npos);
  // The same recursion, optional, is a valid schema: the object may stop.
  auto g = Grammar(json::parse(R"({"type": "object", "properties": {"n": {"$ref": "#"}}})"));
  EXPECT_TRUE(Accepts(g, R"({"n": {"n": {}}})"));
}

// The matcher holds kMaxDepth frames: a schema that needs more is refused when compiled, and optional
// nesting stops offering deeper values where they could no longer be completed (no dead end).
TEST(JsonGrammar, NestingStaysWithinTheMatchersDepth) {
  const auto nested = [](int levels) {
    json s{{"type", "integer"}};
    for (int i = 0; i < levels; ++i) s = json{{"type", "array"}, {"items", s}, {"minItems", 1}, {"maxItems", 1}};
    return s;
  };
  // levels arrays + the integer: kMaxDepth frames fit exactly.
  auto fits = Grammar(nested(kMaxDepth - 1));
  EXPECT_TRUE(Accepts(fits, std::string(kMaxDepth - 1, '[') + "7" + std::string(kMaxDepth - 1, ']')));
  const std::string e = CompileError(nested(kMaxDepth));
  EXPECT_NE(e.find("requires nesting " + std::to_string(kMaxDepth + 1) + " levels deep"), std::string::npos) << e;
  // Optional recursion: {"n": {"n": ... {}}} may nest until the innermost object is frame kMaxDepth,
  // where "n" is no longer offered and only '}' may follow.
  auto g = Grammar(json::parse(R"({"type": "object", "properties": {"n": {"$ref": "#"}}})"));
  std::string text;
  for (int i = 1; i < kMaxDepth; ++i) text += "{\"n\":";
  text += "{";
  EXPECT_TRUE(Alive(g, text));
  EXPECT_FALSE(Alive(g, text + "\""));
  EXPECT_TRUE(Accepts(g, text + std::string(kMaxDepth, '}')));
  // Arrays likewise: no ',' or item that could not be closed.
  auto a = Grammar(json::parse(R"({"type": "array", "items": {"$ref": "#"}})"));
  const std::string deep(kMaxDepth, '[');
  EXPECT_TRUE(Alive(a, deep));
  EXPECT_FALSE(Alive(a, deep + "["));
  EXPECT_TRUE(Accepts(a, deep + std::string(kMaxDepth, ']')));
}

// pydantic's nested Optional models: each level a $defs entry whose property is anyOf [$ref, null]. A
// chain of 30 values fits the matcher's 32 frames; the compiler's own recursion (~3 keywords a level)
// is no longer the limit (it refused such a chain at 21 levels, saying "deeper than 64").
TEST(JsonGrammar, DeepOptionalModelChainsCompileUpToTheValueDepth) {
  const auto chain = [](int levels) {
    json defs = json::object();
    for (int i = 0; i < levels; ++i) {
      json props = {{"name", {{"type", "string"}}}};
      if (i + 1 < levels) props["next"] = {{"anyOf", {{{"$ref", "#/$defs/M" + std::to_string(i + 1)}}, {{"type", "null"}}}}};
      defs["M" + std::to_string(i)] = {{"type", "object"}, {"properties", props}, {"required", {"name"}}};
    }
    return json{{"$defs", defs}, {"$ref", "#/$defs/M0"}};
  };
  auto g = Grammar(chain(30));
  std::string text;
  for (int i = 0; i < 29; ++i) text += R"({"name": "a", "next": )";
  text += R"({"name": "z"})";
  for (int i = 0; i < 29; ++i) text += "}";
  EXPECT_TRUE(Accepts(g, text));
  EXPECT_TRUE(JsonGrammar::Compile(chain(80)).ok());  // optional levels: compiles, offered while they fit
}

// enum / const values are filtered by the keywords beside them (every keyword applies); anything
// beside anyOf is refused by name.
TEST(JsonGrammar, KeywordsBesideEnumConstAndAnyOf) {
  auto g = Grammar(json::parse(R"({"type": "string", "enum": ["a", 1, null]})"));
  EXPECT_TRUE(Accepts(g, "\"a\""));
  EXPECT_FALSE(Accepts(g, "1"));
  EXPECT_FALSE(Accepts(g, "null"));
  g = Grammar(json::parse(R"({"type": "string", "enum": ["abcdef", "x"], "maxLength": 3})"));
  EXPECT_TRUE(Accepts(g, "\"x\""));
  EXPECT_FALSE(Accepts(g, "\"abcdef\""));
  g = Grammar(json::parse(R"({"type": "integer", "minimum": 2, "enum": [1, 2, 2.0, 3.5, "2"]})"));
  EXPECT_TRUE(Accepts(g, "2"));
  EXPECT_TRUE(Accepts(g, "2.0"));  // an integer in JSON Schema
  EXPECT_FALSE(Accepts(g, "1"));
  EXPECT_FALSE(Accepts(g, "3.5"));
  g = Grammar(json::parse(R"({"enum": [{"a": 1}, {"a": "x"}, {"b": 1}],
                             "properties": {"a": {"type": "integer"}}, "required": ["a"]})"));
  EXPECT_TRUE(Accepts(g, R"({"a":1})"));
  EXPECT_FALSE(Accepts(g, R"({"a":"x"})"));
  EXPECT_FALSE(Accepts(g, R"({"b":1})"));
  g = Grammar(json::parse(R"({"const": "b", "enum": ["b", "c"]})"));
  EXPECT_TRUE(Accepts(g, "\"b\""));
  EXPECT_FALSE(Accepts(g, "\"c\""));
  EXPECT_NE(CompileError(json::parse(R"({"const": "a", "enum": ["b", "c"]})")).find("not one of its enum values"),
            std::string::npos);
  EXPECT_NE(CompileError(json::parse(R"({"type": "integer", "enum": ["a", "b"]})")).find("beside it"),
            std::string::npos);
  std::string e = CompileError(json::parse(R"({"anyOf": [{"type": "integer"}, {"type": "null"}], "maximum": 3})"));
  EXPECT_NE(e.find("'maximum' beside anyOf at the root"), std::string::npos) << e;
  e = CompileError(json::parse(R"({"anyOf": [{"type": "object"}], "required": ["a"]})"));
  EXPECT_NE(e.find("'required' beside anyOf"), std::string::npos) << e;
  // Annotations beside anyOf stay fine (pydantic's Optional fields).
  g = Grammar(json::parse(R"({"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null, "title": "X"})"));
  EXPECT_TRUE(Accepts(g, "null"));
}

// A tool's parameters inside the call's wrapper are a document of their own: "$ref"s resolve against
// them, and errors name them by their label.
TEST(JsonGrammar, NestedDocumentsResolveTheirOwnRefs) {
  const json params = json::parse(R"({"$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}},
                                                             "required": ["city"], "additionalProperties": false}},
                                      "type": "object", "properties": {"home": {"$ref": "#/$defs/Address"},
                                      "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                                      "required": ["home"], "additionalProperties": false})");
  const json wrapper{{"type", "object"},
                     {"properties", {{"name", {{"const", "t"}}}, {"arguments", params}}},
                     {"required", {"name", "arguments"}}};
  auto g = JsonGrammar::CompileAlternatives(
      {JsonGrammar::Framing{wrapper, "<tool_call>", "</tool_call>", {{"/properties/arguments", "tools[0].function.parameters"}}}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(Accepts(*g, R"(<tool_call>{"name": "t", "arguments": {"home": {"city": "Oslo"}, "next": {"home": {"city": "B"}, "next": null}}}</tool_call>)"));
  // "#" is the parameters, not the wrapper.
  EXPECT_FALSE(Accepts(*g, R"(<tool_call>{"name": "t", "arguments": {"home": {"city": "Oslo"}, "next": {"name": "t", "arguments": {}}}}</tool_call>)"));
  // Without the document, the wrapper's root has no $defs.
  auto plain = JsonGrammar::CompileAlternatives({JsonGrammar::Framing{wrapper, "<tool_call>", "</tool_call>"}});
  ASSERT_FALSE(plain.ok());
  json bad = wrapper;
  bad["properties"]["arguments"]["properties"]["home"]["$ref"] = "#/$defs/Nowhere";
  auto e = JsonGrammar::CompileAlternatives(
      {JsonGrammar::Framing{bad, "<tool_call>", "</tool_call>", {{"/properties/arguments", "tools[0].function.parameters"}}}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("at tools[0].function.parameters/properties/home does not resolve"), std::string::npos)
      << e.status().ToString();
}

// format: date, time, date-time and uuid enforced character by character (pydantic's datetime, date,
// time and UUID fields); others refused by name.
TEST(JsonGrammar, StringFormatsAreEnforced) {
  const auto g = [](const char* format) {
    return Grammar(json{{"type", "string"}, {"format", format}});
  };
  auto date = g("date");
  for (const char* ok : {"\"2024-02-29\"", "\"0001-01-01\"", "\"9999-12-31\"", "\"2023-11-30\""})
    EXPECT_TRUE(Accepts(date, ok)) << ok;
  for (const char* bad : {"\"2023-02-29\"", "\"1900-02-29\"", "\"2024-04-31\"", "\"2024-13-01\"", "\"2024-00-10\"",
                          "\"2024-01-00\"", "\"0000-01-01\"", "\"2024-1-01\"", "\"2024-01-01T\"", "\"\"",
                          "\"2024\\u002d01-01\""})
    EXPECT_FALSE(Accepts(date, bad)) << bad;
  EXPECT_FALSE(Alive(date, "\"2023-02-3"));  // no February 3x
  auto time = g("time");
  for (const char* ok : {"\"00:00:00Z\"", "\"23:59:59.123456789Z\"", "\"12:30:00+05:30\"", "\"12:30:00-23:59\""})
    EXPECT_TRUE(Accepts(time, ok)) << ok;
  for (const char* bad : {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:60Z\"", "\"12:00:00\"", "\"12:00:00.Z\"",
                          "\"12:00:00.1234567890Z\"", "\"12:00:00+24:00\"", "\"12:00:00z\"", "\"1:00:00Z\""})
    EXPECT_FALSE(Accepts(time, bad)) << bad;
  auto dt = g("date-time");
  EXPECT_TRUE(Accepts(dt, "\"2024-02-29T23:59:59.5+01:00\""));
  EXPECT_FALSE(Accepts(dt, "\"2024-02-29 23:59:59Z\""));
  EXPECT_FALSE(Accepts(dt, "\"2024-02-29\""));
  auto uuid = g("uuid");
  EXPECT_TRUE(Accepts(uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(Accepts(uuid, "\"123E4567-E89B-12D3-A456-426614174000\""));
  EXPECT_FALSE(Accepts(uuid, "\"123e4567e89b12d3a456426614174000\""));
  EXPECT_FALSE(Accepts(uuid, "\"123e4567-e89b-12d3-a456-42661417400g\""));
  // Inside objects (a pydantic model), and enum values filtered by the format.
  auto model = Grammar(json::parse(R"({"type": "object", "properties": {"at": {"type": "string", "format": "date-time"},
                                      "id": {"type": "string", "format": "uuid"}}, "required": ["at", "id"]})"));
  EXPECT_TRUE(Accepts(model, R"({"at": "2020-01-01T00:00:00Z", "id": "00000000-0000-0000-0000-000000000000"})"));
  auto e = Grammar(json::parse(R"({"type": "string", "format": "date", "enum": ["2024-02-30", "2024-02-29", "x"]})"));
  EXPECT_TRUE(Accepts(e, "\"2024-02-29\""));
  EXPECT_FALSE(Accepts(e, "\"2024-02-30\""));
  // The plain-string fast path must not skip a format's automaton.
  JsonMatcher m(date);
  ASSERT_TRUE(m.Feed("\"20"));
  int32_t room = 0;
  EXPECT_FALSE(m.InPlainString(&room));
  EXPECT_NE(CompileError(json::parse(R"({"type": "string", "format": "date", "maxLength": 10})")).find("beside format"),
            std::string::npos);
  // Without "type": format alone means a formatted string (it was ignored: "" passed as a date), and it
  // filters enum / const values beside it.
  auto alone = Grammar(json::parse(R"({"format": "date"})"));
  EXPECT_TRUE(Accepts(alone, "\"2024-02-29\""));
  EXPECT_FALSE(Accepts(alone, "\"\""));
  EXPECT_FALSE(Accepts(alone, "7"));
  auto ids = Grammar(json::parse(R"({"format": "uuid", "enum": ["x", "123e4567-e89b-12d3-a456-426614174000"]})"));
  EXPECT_TRUE(Accepts(ids, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(Accepts(ids, "\"x\""));
  EXPECT_NE(CompileError(json::parse(R"({"format": "date", "const": "2023-02-29"})")).find("beside it"),
            std::string::npos);
  EXPECT_NE(CompileError(json::parse(R"({"format": "email"})")).find("format \"email\""), std::string::npos);
  // OpenAPI's numeric formats beside a numeric type stay annotations.
  EXPECT_TRUE(Accepts(Grammar(json::parse(R"({"type": "integer", "format": "int64"})")), "12"));
  EXPECT_TRUE(StringFormatAdmits(StringFormat::kDateTime, "1999-12-31T23:59:59Z"));
  EXPECT_FALSE(StringFormatAdmits(StringFormat::kDateTime, "1999-12-31T23:59:59"));
}

}  // namespace
}  // namespace zipmoe::api
