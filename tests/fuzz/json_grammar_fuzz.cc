// libFuzzer target: structured outputs' schema compiler and matcher (services/api/json_grammar.h), what a
// client's `response_format` json_schema and a tool's `parameters` become. Input: byte 0 picks the mode (bit 0
// object_root; bit 1 the schema between fixed texts "<a>" / "</a>"; bits 2-3 the tagged syntax of a forced
// call: JSON, GLM's <arg_key>, Qwen3-Coder's <parameter=>), then a schema (JSON) up to the first NUL, then a
// text the matcher is fed. Checked beyond ASan/UBSan:
//   - the text fed whole and byte by byte reaches the same verdict (how far it is taken, Accepting);
//   - a byte refused leaves the state as it was (feeding it again is refused again);
//   - where InPlainString says so, an ordinary character ('a') is taken, as the sampler's fast path assumes;
//   - plain grammars (no fixed texts, JSON): an accepted text parses as JSON, an object under object_root,
//     and equals the schema's `const` where the schema is only that.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/api/json_grammar.h"

namespace {

using zipmoe::api::JsonGrammar;
using zipmoe::api::JsonMatcher;
using zipmoe::api::TagSyntax;

[[noreturn]] void Fail(const char* why) {
  std::fprintf(stderr, "harness: %s\n", why);
  std::abort();
}

// Feeds `text` one byte at a time; returns how many bytes were taken before the first refusal.
size_t FeedBytes(JsonMatcher* m, std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!m->Feed(text.substr(i, 1))) {
      if (m->Feed(text.substr(i, 1))) Fail("a refused byte was taken on the second try");
      return i;
    }
    int32_t room = 0;
    if (m->InPlainString(&room) && room >= 1) {
      JsonMatcher probe = *m;
      if (!probe.Feed("a")) Fail("InPlainString, yet an ordinary character is refused");
    }
  }
  return text.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 8192) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  if (nul == std::string_view::npos) return 0;
  const std::string_view schema_text = rest.substr(0, nul), text = rest.substr(nul + 1);
  const nlohmann::json schema = nlohmann::json::parse(schema_text.begin(), schema_text.end(), nullptr, false);
  if (schema.is_discarded()) return 0;
  const bool object_root = (mode & 1) != 0, framed = (mode & 2) != 0;
  const TagSyntax tags = static_cast<TagSyntax>(((mode >> 2) & 3) % 3);
  zipmoe::Result<std::shared_ptr<const JsonGrammar>> grammar =
      tags != TagSyntax::kJson ? JsonGrammar::CompileAlternatives({JsonGrammar::Framing{schema, "<a>", "</a>"}}, "", tags)
      : framed                 ? JsonGrammar::CompileFramed(schema, "<a>", "</a>")
                               : JsonGrammar::Compile(schema, object_root);
  if (!grammar.ok()) return 0;

  JsonMatcher whole(*grammar);
  const bool whole_ok = whole.Feed(text);
  JsonMatcher bytes(*grammar);
  const size_t taken = FeedBytes(&bytes, text);
  if (whole_ok != (taken == text.size())) Fail("fed whole and byte by byte disagree on the text");
  if (whole_ok && whole.Accepting() != bytes.Accepting()) Fail("fed whole and byte by byte disagree on Accepting");

  if (whole_ok && whole.Accepting() && tags == TagSyntax::kJson && !framed) {
    const nlohmann::json value = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
    if (value.is_discarded()) Fail("an accepted text is not JSON");
    if (object_root && !value.is_object()) Fail("object_root accepted a value that is not an object");
    if (schema.is_object() && schema.size() == 1 && schema.contains("const") && value != schema["const"])
      Fail("a const schema accepted another value");
  }
  return 0;
}
