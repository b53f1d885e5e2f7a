// libFuzzer target: ChatOutputParser (services/api/chat_output_parser.h), the reader of what a model
// generated (content, reasoning, tool calls) in every template family's syntax, and ParsePythonicCalls.
// Input: byte 0 picks the syntax (tool-call family x reasoning x starting inside <think>), byte 1 the piece
// size the text is streamed in (1..16); the rest is the generated text, any bytes. Checked, beyond
// ASan/UBSan: the streamed pieces give exactly what the whole text gives (content, reasoning, every call's
// name and arguments), every call's arguments text is a JSON object, and with no call found, no byte of the
// text is lost from content + reasoning (the parser only drops markers, whitespace after </think> and
// between calls).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/api/chat_output_parser.h"

namespace {

using zipmoe::api::ChatDelta;
using zipmoe::api::ChatOutputParser;
using zipmoe::api::ChatSyntax;
using zipmoe::api::ToolCallSyntax;

[[noreturn]] void Fail(const char* why) {
  std::fprintf(stderr, "harness: %s\n", why);
  std::abort();
}

ChatDelta Run(const ChatSyntax& syntax, std::string_view text, size_t step) {
  ChatOutputParser p(syntax, "call_");
  ChatDelta all;
  const auto merge = [&](ChatDelta d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    for (auto& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
  };
  if (step == 0) {
    merge(p.Push(text));
  } else {
    for (size_t i = 0; i < text.size(); i += step) merge(p.Push(text.substr(i, step)));
  }
  merge(p.Finish());
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr ToolCallSyntax kSyntaxes[] = {ToolCallSyntax::kNone,    ToolCallSyntax::kHermes,
                                                  ToolCallSyntax::kQwenXml, ToolCallSyntax::kDeepSeek,
                                                  ToolCallSyntax::kMistral, ToolCallSyntax::kGranite,
                                                  ToolCallSyntax::kHarmony, ToolCallSyntax::kPythonic};
  ChatSyntax syntax;
  syntax.tool_calls = kSyntaxes[data[0] % 8];
  syntax.harmony = syntax.tool_calls == ToolCallSyntax::kHarmony;
  syntax.reasoning = !syntax.harmony && (data[0] & 8) != 0;
  syntax.starts_in_reasoning = syntax.reasoning && (data[0] & 16) != 0;
  const size_t step = 1 + data[1] % 16;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  const ChatDelta whole = Run(syntax, text, 0);
  const ChatDelta pieces = Run(syntax, text, step);
  if (whole.content != pieces.content || whole.reasoning != pieces.reasoning) Fail("streamed text differs from whole");
  if (whole.tool_calls.size() != pieces.tool_calls.size()) Fail("streamed calls differ from whole");
  for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
    if (whole.tool_calls[i].name != pieces.tool_calls[i].name ||
        whole.tool_calls[i].arguments != pieces.tool_calls[i].arguments)
      Fail("a streamed call differs from whole");
    const nlohmann::json args = nlohmann::json::parse(whole.tool_calls[i].arguments, nullptr, false);
    if (!args.is_object()) Fail("a call's arguments are not a JSON object");
  }
  if (whole.tool_calls.empty() && whole.content.size() + whole.reasoning.size() > text.size())
    Fail("content + reasoning longer than the text");

  std::vector<std::pair<std::string, nlohmann::json>> calls;
  if (zipmoe::api::ParsePythonicCalls(text, &calls)) {
    for (const auto& [name, args] : calls) {
      if (!zipmoe::api::IsValidToolName(name) || !args.is_object()) Fail("ParsePythonicCalls gave a bad call");
      // What the history writes back for these arguments reads back as the same object (where they are UTF-8:
      // other bytes are replaced on the way out, so they cannot come back the same).
      std::string text;
      try {
        text = args.dump();
      } catch (const nlohmann::json::type_error&) {
        continue;
      }
      nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
      std::vector<std::pair<std::string, nlohmann::json>> again;
      if (!zipmoe::api::ParsePythonicCalls(name + "(" + zipmoe::api::PythonicArguments(ordered) + ")", &again) ||
          again.size() != 1 || again[0].second != args)
        Fail("PythonicArguments does not read back");
    }
  }
  return 0;
}
