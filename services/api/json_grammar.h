// Structured outputs, the character level: a JSON Schema compiled into a grammar (JsonGrammar) and an
// incremental matcher (JsonMatcher) that says, byte by byte, whether a text can still become a JSON
// value valid for the schema. The token level (which vocabulary entries may come next) is
// json_constraint.h; the API uses both for `response_format` (docs/api.md).
//
// Schema subset (JSON Schema 2020-12 / OpenAI structured outputs), anything else is refused by name:
//   type (a name or a list of names), properties, required, additionalProperties (false, or true / a
//   schema on an object without properties), items, minItems, maxItems, minLength, maxLength (code
//   points), format (date, time, date-time, uuid: StringFormat; not beside minLength / maxLength),
//   minimum / maximum / exclusiveMinimum / exclusiveMaximum on integers (|bound| <= 1e15;
//   on numbers they are refused), enum, const, anyOf, $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed);
//   annotations (title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
//   writeOnly) are ignored. enum / const values are kept only where the keywords beside them admit them
//   (JSON Schema 2020-12 Core §7.7.1: every keyword applies); nothing but annotations may stand beside
//   anyOf. Refused as well: a $ref cycle through anyOf that writes nothing before it recurses (left
//   recursion), references that only refer to each other, and schemas with no finite value or that
//   require more than kMaxDepth nesting levels. Objects list their properties in any order, each at most once; every
//   `required` one before the closing brace; an object schema without additionalProperties admits only
//   its properties (as OpenAI's strict mode requires). An empty schema {} is any JSON value.
// What the matcher admits besides the schema: whitespace runs of at most kMaxWhitespaceRun bytes
// between tokens (none inside numbers and literals), numbers of at most kMaxNumberChars characters
// and kMaxExponentDigits exponent digits,
// nesting of at most kMaxDepth levels (a value, property or item is offered only where it can still
// be completed within them: SchemaNode::min_frames), strings of well-formed UTF-8 (no control bytes; escapes
// \" \\ \/ \b \f \n \r \t \uXXXX). enum and const values must be written as nlohmann's compact dump.
// Thread-safety: a compiled JsonGrammar is immutable and shared; a JsonMatcher belongs to one thread.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe::api {

constexpr int kMaxWhitespaceRun = 24;
constexpr int kMaxNumberChars = 32;
constexpr int kMaxExponentDigits = 2;  // |exponent| <= 99: every parser reads the number as a finite double
constexpr int kMaxDepth = 32;
constexpr int kMaxSchemaNesting = 256;  // the compiler's recursion over a schema's keywords and $refs
constexpr int kMaxObjectProperties = 64;
constexpr int kMaxAlternatives = 32;  // framed values of one grammar (JsonGrammar::CompileAlternatives)
constexpr int64_t kMaxIntegerBound = 1000000000000000;  // 1e15: bounds are exact in int64 and double
constexpr int32_t kNoFiniteValue = INT32_MAX / 2;        // SchemaNode::min_frames of a node with no finite value

// Well-formed UTF-8 (RFC 3629, Unicode Table 3-7): for a first byte, how many continuation bytes
// follow and the range of the first of them (later ones are 0x80..0xBF). False for a byte that cannot
// start a character (a continuation byte, C0, C1, F5..FF).
inline bool Utf8Lead(uint8_t c, int32_t* pending, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (c < 0x80) return *pending = 0, true;
  if (c < 0xC2) return false;
  if (c < 0xE0) return *pending = 1, true;
  if (c < 0xF0) {
    if (c == 0xE0) *lo = 0xA0;
    if (c == 0xED) *hi = 0x9F;  // no surrogates
    return *pending = 2, true;
  }
  if (c < 0xF5) {
    if (c == 0xF0) *lo = 0x90;
    if (c == 0xF4) *hi = 0x8F;  // nothing past U+10FFFF
    return *pending = 3, true;
  }
  return false;
}

// JSON Schema `format`s enforced on strings (Validation §7.3; RFC 3339 §5.6, RFC 4122), each written in
// one canonical shape so that Python's jsonschema FormatChecker, pydantic and JavaScript's Date agree:
//   kDate      YYYY-MM-DD, a real calendar day of years 0001-9999 (leap years counted)
//   kTime      HH:MM:SS[.fraction of 1-9 digits] then Z or +HH:MM / -HH:MM (RFC 3339 full-time, hours
//              00-23, minutes and seconds 00-59: no leap second)
//   kDateTime  a kDate, 'T', a kTime
//   kUuid      8-4-4-4-12 hexadecimal digits
// No escapes inside them (every character is printable ASCII).
enum class StringFormat : uint8_t { kNone = 0, kDate, kTime, kDateTime, kUuid };
// The format `name` stands for (kNone for one not enforced); `ok` false then.
StringFormat StringFormatOf(const std::string& name, bool* ok);
// Whether `text` (the string's content, unescaped) is a complete value of `format`.
bool StringFormatAdmits(StringFormat format, const std::string& text);

// How a framed value's root object is written. kJson: as JSON. The others write a tool call's arguments
// as tagged pairs, as those chat templates render them (each property once, any order; a string
// property's value raw up to its closing tag, anything else as JSON; whitespace allowed before each
// pair and before the alternative's suffix):
//   kGlm      GLM-4.5 / 4.6 / 4.7:  <arg_key>K</arg_key>\n<arg_value>V</arg_value>
//   kQwenXml  Qwen3-Coder:          <parameter=K>\nV\n</parameter>
enum class TagSyntax : uint8_t { kJson, kGlm, kQwenXml };
struct TagTexts {
  std::string key_open, key_close, value_close;
};
const TagTexts& TagTextsOf(TagSyntax syntax);

// One compiled schema node (internal to the matcher; exposed for tests and the constraint).
struct SchemaNode {
  enum class Kind : uint8_t { kAny, kObject, kArray, kString, kNumber, kInteger, kBoolean, kNull, kLiterals, kAnyOf };
  Kind kind = Kind::kAny;
  // kObject: property names as JSON string literals ("\"name\""), sorted; their value nodes;
  // required ones as a bit mask over that order; `additional` >= 0: other keys allowed, values of
  // that node (only when there are no properties).
  std::vector<std::string> keys;
  std::vector<int32_t> key_nodes;
  uint64_t required = 0;
  int32_t additional = -1;
  // kArray
  int32_t items = -1;
  int32_t min_items = 0, max_items = -1;  // -1: unbounded
  // kString (code points)
  int32_t min_length = 0, max_length = -1;
  // kString: a `format` the matcher enforces (StringFormat), kNone for any string.
  uint8_t format = 0;
  // kInteger: inclusive bounds (minimum / maximum / exclusive*), |bound| <= kMaxIntegerBound
  bool has_minimum = false, has_maximum = false;
  int64_t minimum = 0, maximum = 0;
  // kLiterals: the allowed values' compact JSON texts, sorted and unique
  std::vector<std::string> literals;
  // kAnyOf
  std::vector<int32_t> alternatives;
  // Tagged arguments (TagSyntax other than kJson), filled for the grammar's syntax. kObject: each
  // property's name followed by key_close, sorted, and the index in `keys` of each; kLiterals whose
  // values are all strings: each value raw (decoded) followed by value_close, sorted.
  std::vector<std::string> tag_keys;
  std::vector<int32_t> tag_key_index;
  std::vector<std::string> tag_literals;
  // The fewest matcher frames a complete value of this node needs, its own included (1 for a scalar;
  // an object 1 + the most any required property needs; an anyOf its cheapest alternative);
  // kNoFiniteValue when no finite value exists. The matcher starts a value, a property or an item only
  // where it can still be completed within kMaxDepth, so a text is never led into a dead end.
  int32_t min_frames = 1;
};

class JsonGrammar {
 public:
  // Compiles `schema`. `object_root`: the value must be an object (json_object mode compiles {} with
  // it). Errors: kInvalidArgument naming the keyword and where it sits ("unsupported keyword
  // 'pattern' at /properties/name"), an unresolvable $ref, contradictions (minItems > maxItems, a
  // required property that is not listed, more than kMaxObjectProperties properties).
  static Result<std::shared_ptr<const JsonGrammar>> Compile(const nlohmann::json& schema, bool object_root = false);
  // The value between fixed texts: `prefix` first, then the value (whitespace allowed before it), then
  // `suffix` (whitespace allowed before it). For a forced tool call in the template's syntax, e.g.
  // "<tool_call>" {"name": ..., "arguments": ...} "</tool_call>".
  static Result<std::shared_ptr<const JsonGrammar>> CompileFramed(const nlohmann::json& schema, std::string prefix,
                                                                  std::string suffix);
  // One of several framed values (the matcher keeps every alternative alive until a byte tells them
  // apart), optionally after free text: with `free_until` non-empty, any text comes first up to and
  // including the first occurrence of `free_until` (a thinking model's "</think>"), then whitespace,
  // then one alternative. E.g. a forced DeepSeek-V3 call, whose prefix carries the function name:
  // {prefix "<｜tool▁calls▁begin｜>...function<｜tool▁sep｜>get_weather\n```json\n", the tool's
  // parameters, suffix "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"} per tool. Errors: as Compile,
  // naming the alternative; no alternatives, or more than kMaxAlternatives of them.
  // A subschema that is a schema document of its own inside a framing's schema: a tool's `parameters`
  // inside the call's {"name", "arguments"} wrapper. Its "$ref"s ("#", "#/$defs/...") resolve against it,
  // and error paths inside it start with `label` (e.g. "tools[2].function.parameters").
  struct Document {
    std::string pointer;  // RFC 6901 JSON pointer into the framing's schema ("" = the schema itself)
    std::string label;
  };
  struct Framing {
    nlohmann::json schema;
    std::string prefix, suffix;
    std::vector<Document> documents = {};
  };
  // `tags` other than kJson: every alternative's schema must be an object with properties (a tool's
  // parameters), written as tagged pairs (TagSyntax); a string enum value or a property name holding
  // the syntax's closing text is an error naming it.
  static Result<std::shared_ptr<const JsonGrammar>> CompileAlternatives(const std::vector<Framing>& framings,
                                                                        std::string free_until = "",
                                                                        TagSyntax tags = TagSyntax::kJson);
  // `grammar` with free text up to `free_until` before its value(s) (a copy; `grammar` as it is when
  // free_until is empty).
  static std::shared_ptr<const JsonGrammar> WithFreeTextBefore(std::shared_ptr<const JsonGrammar> grammar,
                                                               std::string free_until);
  // `grammar` with `prefix` written before each alternative's own prefix (a copy).
  static std::shared_ptr<const JsonGrammar> WithPrefix(std::shared_ptr<const JsonGrammar> grammar,
                                                       const std::string& prefix);
  struct Alternative {
    std::string prefix, suffix;
    int32_t root = 0;
  };
  const std::vector<Alternative>& alternatives() const { return alternatives_; }
  const std::string& free_until() const { return free_until_; }
  TagSyntax tags() const { return tags_; }

  const SchemaNode& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t root() const { return root_; }

 private:
  friend class SchemaCompiler;
  std::vector<SchemaNode> nodes_;
  int32_t root_ = 0;  // alternatives_[0].root
  std::vector<Alternative> alternatives_;  // Compile: one, without texts
  std::string free_until_;
  TagSyntax tags_ = TagSyntax::kJson;
};

// The matcher's state: one or more parse stacks (anyOf keeps alternatives alive until a byte tells
// them apart). Cheap to copy (the constraint copies it per vocabulary prefix it tries).
class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar);

  // Consumes bytes; false (and the state unchanged) if no valid text continues with them.
  bool Feed(std::string_view bytes);
  // As Feed, but only the grammar's fixed texts (a prefix or suffix) may take the bytes: how a special
  // token (e.g. Mistral's [TOOL_CALLS]) is matched, which may write a marker but never JSON content.
  bool FeedFixedText(std::string_view bytes);
  // True when some parse stack is inside or before a fixed text (where FeedFixedText may succeed): a
  // prefix, suffix or free-text marker, or the texts of tagged pairs.
  bool InFixedText() const;
  // True when every parse stack is in the free text before `free_until` with none of the marker
  // matched yet: any byte string without the marker's first byte keeps the state as it is.
  bool InFreeTextAtRest() const;
  // True when the text so far is one complete valid value (possibly followed by whitespace).
  bool Accepting() const;
  const JsonGrammar& grammar() const { return *grammar_; }
  // True when nothing at all can follow (complete, and the whitespace budget spent or none allowed).
  bool dead() const { return stacks_.empty(); }

  // The plain-string fast path of the constraint: true when every stack is inside a string, outside
  // any escape or UTF-8 sequence, so that any run of ordinary characters (no '"', '\\', control or
  // partial UTF-8) keeps the state as it is but for the length; `*room` = code points the tightest
  // maxLength still allows (INT32_MAX when none).
  bool InPlainString(int32_t* room) const;
  // Advances every stack's string length by `code_points` (after InPlainString said true and
  // code_points <= room).
  void AdvancePlainString(int32_t code_points);

  struct Frame {
    uint8_t kind = 0, phase = 0;
    int32_t node = -1;
    int32_t a = 0, b = 0, c = 0;  // per kind: literal range [a, b) and position c; string length a,
                                  // pending UTF-8 bytes / escape digits b; array count a; object key c
    uint64_t seen = 0;            // object: properties seen
  };
  struct Stack {
    Frame frames[kMaxDepth];
    int32_t depth = 0;
    int32_t ws = 0;  // the current whitespace run
    Stack() = default;
    Stack(const Stack& o) : depth(o.depth), ws(o.ws) {
      for (int32_t i = 0; i < depth; ++i) frames[i] = o.frames[i];
    }
    Stack& operator=(const Stack& o) {
      depth = o.depth;
      ws = o.ws;
      for (int32_t i = 0; i < depth; ++i) frames[i] = o.frames[i];
      return *this;
    }
  };

 private:
  void Step(const Stack& s, uint8_t c, std::vector<Stack>* out) const;
  bool StepTop(Stack& s, uint8_t c, std::vector<Stack>* out) const;
  void ChildDone(Stack& s) const;
  bool StartValue(Stack& s, int32_t node, uint8_t c, std::vector<Stack>* out) const;
  bool StackAccepting(const Stack& s) const;
  bool KeyOpen(const Frame& obj, int32_t depth, int32_t k) const;
  bool AnyKeyOpen(const Frame& obj, int32_t depth) const;
  bool FreeValueFits(const Frame& obj, int32_t depth) const;
  const std::vector<std::string>& LiteralsOf(const Frame& f) const;
  Frame LiteralFrame(uint8_t phase, int32_t node) const;

  std::shared_ptr<const JsonGrammar> grammar_;
  std::vector<Stack> stacks_;
  std::vector<Stack> scratch_;
  bool fixed_text_only_ = false;  // FeedFixedText in progress
};

}  // namespace zipmoe::api
