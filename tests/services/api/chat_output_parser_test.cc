// Tests for services/api/chat_output_parser: content, reasoning and tool calls told apart by each
// template family's markers, whole and split at every byte (streaming must give the same result).
#include "services/api/chat_output_parser.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zipmoe::api {
namespace {

using nlohmann::json;

ChatSyntax Syntax(bool reasoning, ToolCallSyntax tools, bool starts_in_reasoning = false) {
  ChatSyntax s;
  s.reasoning = reasoning;
  s.tool_calls = tools;
  s.starts_in_reasoning = starts_in_reasoning;
  return s;
}

// The output fed whole, and fed in pieces of `step` bytes; both must agree.
ChatDelta Parse(ChatSyntax syntax, const std::string& text, size_t step = 0) {
  ChatOutputParser p(syntax, "call_");
  ChatDelta all;
  auto merge = [&](ChatDelta d) {
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

void ExpectSameWhenStreamed(ChatSyntax syntax, const std::string& text) {
  const ChatDelta whole = Parse(syntax, text);
  for (size_t step : {1, 2, 3, 7}) {
    const ChatDelta s = Parse(syntax, text, step);
    EXPECT_EQ(s.content, whole.content) << "step " << step;
    EXPECT_EQ(s.reasoning, whole.reasoning) << "step " << step;
    ASSERT_EQ(s.tool_calls.size(), whole.tool_calls.size()) << "step " << step;
    for (size_t i = 0; i < s.tool_calls.size(); ++i) {
      EXPECT_EQ(s.tool_calls[i].name, whole.tool_calls[i].name);
      EXPECT_EQ(s.tool_calls[i].arguments, whole.tool_calls[i].arguments);
    }
  }
}

TEST(DetectChatSyntax, ReadsTheTemplatesMarkers) {
  EXPECT_FALSE(DetectChatSyntax("{{ '<|im_start|>' + m.content }}", "x").active());
  ChatSyntax q3 = DetectChatSyntax("{{ '<tool_call>' }} {{ '</think>' }}", "<|im_start|>assistant\n");
  EXPECT_TRUE(q3.reasoning);
  EXPECT_EQ(q3.tool_calls, ToolCallSyntax::kHermes);
  EXPECT_FALSE(q3.starts_in_reasoning);
  ChatSyntax r1 = DetectChatSyntax("<｜tool▁call▁begin｜> </think>", "<｜Assistant｜><think>\n");
  EXPECT_EQ(r1.tool_calls, ToolCallSyntax::kDeepSeek);
  EXPECT_TRUE(r1.starts_in_reasoning);
  EXPECT_EQ(DetectChatSyntax("[TOOL_CALLS]", "").tool_calls, ToolCallSyntax::kMistral);
  // Granite 3.x's system prompt names <|tool_call|>; Granite 4's template writes Hermes' <tool_call>.
  EXPECT_EQ(DetectChatSyntax("respond only with <|tool_call|> followed by a JSON list", "").tool_calls,
            ToolCallSyntax::kGranite);
  EXPECT_EQ(DetectChatSyntax("{{- '<tool_call>\n{\"name\": \"' }}", "").tool_calls, ToolCallSyntax::kHermes);
  const std::vector<std::string> granite_markers = ChatSyntaxMarkers(DetectChatSyntax("<|tool_call|>", ""));
  EXPECT_EQ(granite_markers, std::vector<std::string>{"<|tool_call|>"});
  // Thinking switched off: the prompt closes the think block itself.
  EXPECT_FALSE(DetectChatSyntax("</think>", "assistant\n<think>\n\n</think>\n\n").starts_in_reasoning);
}

TEST(ChatOutputParser, PlainTextPassesThroughUntouched) {
  const std::string text = "a < b and <toolbox> and <thinking> </tool> [TOOL";
  const ChatDelta d = Parse(Syntax(true, ToolCallSyntax::kHermes), text);
  EXPECT_EQ(d.content, text);
  EXPECT_TRUE(d.reasoning.empty());
  EXPECT_TRUE(d.tool_calls.empty());
  ExpectSameWhenStreamed(Syntax(true, ToolCallSyntax::kHermes), text);
}

TEST(ChatOutputParser, SplitsReasoningFromTheAnswer) {
  const std::string text = "<think>\nLet me add 2 and 2.\n</think>\n\nThe answer is 4.";
  const ChatDelta d = Parse(Syntax(true, ToolCallSyntax::kNone), text);
  EXPECT_EQ(d.reasoning, "\nLet me add 2 and 2.\n");
  EXPECT_EQ(d.content, "The answer is 4.");
  ExpectSameWhenStreamed(Syntax(true, ToolCallSyntax::kNone), text);
}

TEST(ChatOutputParser, ThePromptMayOpenTheThinkBlock) {
  const std::string text = "hmm, 4.</think>4";
  const ChatDelta d = Parse(Syntax(true, ToolCallSyntax::kNone, true), text);
  EXPECT_EQ(d.reasoning, "hmm, 4.");
  EXPECT_EQ(d.content, "4");
  // Never closed: everything was reasoning.
  EXPECT_EQ(Parse(Syntax(true, ToolCallSyntax::kNone, true), "still thinking").reasoning, "still thinking");
  ExpectSameWhenStreamed(Syntax(true, ToolCallSyntax::kNone, true), text);
}

TEST(ChatOutputParser, HermesToolCalls) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n";
  const ChatDelta d = Parse(Syntax(true, ToolCallSyntax::kHermes), text);
  EXPECT_EQ(d.content, "Let me check.\n");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].id, "call_0");
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments), json({{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(d.tool_calls[1].id, "call_1");
  EXPECT_EQ(d.tool_calls[1].name, "now");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  ExpectSameWhenStreamed(Syntax(true, ToolCallSyntax::kHermes), text);
}

TEST(ChatOutputParser, ArgumentsGivenAsAJsonString) {
  const ChatDelta d =
      Parse(Syntax(false, ToolCallSyntax::kHermes), "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\":1}");
}

TEST(ChatOutputParser, GlmArgumentPairs) {
  const std::string text =
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
      "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";
  const ChatDelta d = Parse(Syntax(true, ToolCallSyntax::kHermes), text);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments), json({{"city", "Beijing"}, {"days", 3}}));
  EXPECT_TRUE(d.content.empty());
  ExpectSameWhenStreamed(Syntax(true, ToolCallSyntax::kHermes), text);
}

// A string-typed argument (ChatSyntax::string_arguments) keeps its raw text even when that reads as JSON;
// the same text for an argument of another type is JSON.
TEST(ChatOutputParser, StringArgumentsStayTextInTaggedSyntaxes) {
  ChatSyntax glm = Syntax(false, ToolCallSyntax::kHermes);
  glm.string_arguments = {{"f", "code"}, {"f", "flag"}};
  const std::string text = "<tool_call>f\n<arg_key>code</arg_key>\n<arg_value>42</arg_value>\n"
                           "<arg_key>flag</arg_key>\n<arg_value>true</arg_value>\n"
                           "<arg_key>n</arg_key>\n<arg_value>42</arg_value>\n</tool_call>";
  const ChatDelta d = Parse(glm, text);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments), json({{"code", "42"}, {"flag", "true"}, {"n", 42}}));
  ExpectSameWhenStreamed(glm, text);
  ChatSyntax qwen = Syntax(false, ToolCallSyntax::kQwenXml);
  qwen.string_arguments = {{"f", "code"}};
  const std::string xml = "<tool_call>\n<function=f>\n<parameter=code>\nnull\n</parameter>\n"
                          "<parameter=n>\nnull\n</parameter>\n</function>\n</tool_call>";
  const ChatDelta q = Parse(qwen, xml);
  ASSERT_EQ(q.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(q.tool_calls[0].arguments), json({{"code", "null"}, {"n", nullptr}}));
}

TEST(ChatOutputParser, QwenCoderXmlCalls) {
  EXPECT_EQ(DetectChatSyntax("<tool_call>\n<function=x>\n<parameter=y>", "").tool_calls, ToolCallSyntax::kQwenXml);
  const std::string text =
      "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"unit\": \"c\"}\n</parameter>\n</function>\n</tool_call>";
  const ChatDelta d = Parse(Syntax(false, ToolCallSyntax::kQwenXml), text);
  EXPECT_EQ(d.content, "Sure.\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments),
            json({{"city", "New York"}, {"days", 3}, {"opts", {{"unit", "c"}}}}));
  ExpectSameWhenStreamed(Syntax(false, ToolCallSyntax::kQwenXml), text);
  // A call without its </function> is the model's text, kept as written.
  const std::string broken = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>";
  EXPECT_TRUE(Parse(Syntax(false, ToolCallSyntax::kQwenXml), broken).tool_calls.empty());
  EXPECT_EQ(Parse(Syntax(false, ToolCallSyntax::kQwenXml), broken).content, broken);
}

TEST(ChatOutputParser, DeepSeekV3AndV31Calls) {
  const std::string v3 =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  const ChatDelta d = Parse(Syntax(true, ToolCallSyntax::kDeepSeek), v3);
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_EQ(d.tool_calls[1].name, "now");
  EXPECT_TRUE(d.content.empty()) << d.content;
  ExpectSameWhenStreamed(Syntax(true, ToolCallSyntax::kDeepSeek), v3);
  const std::string v31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"x\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const ChatDelta e = Parse(Syntax(true, ToolCallSyntax::kDeepSeek), v31);
  ASSERT_EQ(e.tool_calls.size(), 1u);
  EXPECT_EQ(e.tool_calls[0].name, "search");
  EXPECT_EQ(e.tool_calls[0].arguments, "{\"q\":\"x\"}");
}

// Granite 3.x: <|tool_call|> then a JSON list to the end of the output (vLLM's granite parser reads the same);
// text before the marker is content; a list that does not parse stays content, marker and all.
TEST(ChatOutputParser, GraniteCallList) {
  const std::string text =
      "<|tool_call|>[{\"arguments\": {\"city\": \"Oslo\"}, \"name\": \"weather\"}, {\"name\": \"noop\", \"arguments\": {}}]";
  const ChatDelta d = Parse(Syntax(false, ToolCallSyntax::kGranite), text);
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_EQ(d.tool_calls[1].name, "noop");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  EXPECT_TRUE(d.content.empty());
  ExpectSameWhenStreamed(Syntax(false, ToolCallSyntax::kGranite), text);
  const ChatDelta lead = Parse(Syntax(false, ToolCallSyntax::kGranite), "Let me check. <|tool_call|>[{\"name\": \"a\"}]");
  ASSERT_EQ(lead.tool_calls.size(), 1u);
  EXPECT_EQ(lead.tool_calls[0].arguments, "{}");
  EXPECT_NE(lead.content.find("Let me check."), std::string::npos) << lead.content;
  const ChatDelta broken = Parse(Syntax(false, ToolCallSyntax::kGranite), "<|tool_call|>[{\"name\": \"a\"");
  EXPECT_TRUE(broken.tool_calls.empty());
  EXPECT_EQ(broken.content, "<|tool_call|>[{\"name\": \"a\"");
  // Mistral's marker means nothing to Granite's parser.
  const ChatDelta other = Parse(Syntax(false, ToolCallSyntax::kGranite), "[TOOL_CALLS][{\"name\": \"a\"}]");
  EXPECT_TRUE(other.tool_calls.empty());
}

// LFM2 / LFM2.5: <|tool_call_start|>[Python calls]<|tool_call_end|>; the JSON list form between the same markers;
// a body that is not such a list stays content, markers and all. The syntax is read from either marker the
// families' templates name (LFM2-8B-A1B's names only <|tool_list_start|>).
TEST(ChatOutputParser, PythonicCalls) {
  EXPECT_EQ(DetectChatSyntax("List of tools: <|tool_list_start|>[", "").tool_calls, ToolCallSyntax::kPythonic);
  EXPECT_EQ(DetectChatSyntax("{{- '<|tool_call_start|>[' }}", "").tool_calls, ToolCallSyntax::kPythonic);
  EXPECT_EQ(ChatSyntaxMarkers(DetectChatSyntax("<|tool_list_start|>", "")),
            (std::vector<std::string>{"<|tool_call_start|>", "<|tool_call_end|>"}));
  const ChatSyntax py = Syntax(false, ToolCallSyntax::kPythonic);
  const std::string text =
      "Checking.<|tool_call_start|>[get_weather(city='Oslo', days=3, units=\"metric\"), "
      "search(q='it\\'s \\u00e9t\\xe9', filters={'lang': 'no', \"n\": [1, 2.5, -3e-2]}, exact=True, page=None, "
      "tags=('a', 'b',), ok=false), noop()]<|tool_call_end|>";
  const ChatDelta d = Parse(py, text);
  ASSERT_EQ(d.tool_calls.size(), 3u) << d.content;
  EXPECT_EQ(d.content, "Checking.");
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments), json::parse(R"({"city": "Oslo", "days": 3, "units": "metric"})"));
  EXPECT_EQ(d.tool_calls[1].name, "search");
  EXPECT_EQ(json::parse(d.tool_calls[1].arguments),
            json::parse(R"({"q": "it's \u00e9t\u00e9", "filters": {"lang": "no", "n": [1, 2.5, -0.03]}, "exact": true,
                            "page": null, "tags": ["a", "b"], "ok": false})"));
  EXPECT_EQ(d.tool_calls[2].name, "noop");
  EXPECT_EQ(d.tool_calls[2].arguments, "{}");
  ExpectSameWhenStreamed(py, text);
  // The JSON form, and one call without the list brackets.
  const ChatDelta j = Parse(py, "<|tool_call_start|>[{\"name\": \"a\", \"arguments\": {\"x\": 1}}]<|tool_call_end|>");
  ASSERT_EQ(j.tool_calls.size(), 1u);
  EXPECT_EQ(j.tool_calls[0].arguments, "{\"x\":1}");
  const ChatDelta bare = Parse(py, "<|tool_call_start|>f(x='y')<|tool_call_end|>");
  ASSERT_EQ(bare.tool_calls.size(), 1u);
  EXPECT_EQ(bare.tool_calls[0].arguments, "{\"x\":\"y\"}");
  // Not calls: positional arguments, an expression, a repeated keyword, an unclosed string or list, trailing text,
  // an invalid name, a lone surrogate escape; each stays content as written.
  for (const char* body : {"[f('x')]", "[f(x=1+2)]", "[f(x=1, x=2)]", "[f(x='a)]", "[f(x=[1, 2)]", "[f()] and more",
                           "[f g()]", "[f(x='\\ud800')]", "[]", "[f(x=y)]"}) {
    const std::string t = std::string("<|tool_call_start|>") + body + "<|tool_call_end|>";
    const ChatDelta b = Parse(py, t);
    EXPECT_TRUE(b.tool_calls.empty()) << body;
    EXPECT_EQ(b.content, t) << body;
  }
  // Found by the chat_output fuzz target: text after a call ending in whitespace gave "T " whole but "T" streamed.
  // The whitespace after a call is content only where more content follows, in every piece size.
  const std::string tail = "<|tool_call_start|>[f()]<|tool_call_end|> done, T \n";
  EXPECT_EQ(Parse(py, tail).content, " done, T");
  ExpectSameWhenStreamed(py, tail);
  const std::string hermes = "<tool_call>{\"name\": \"f\"}</tool_call>\n\nok \n";
  EXPECT_EQ(Parse(Syntax(false, ToolCallSyntax::kHermes), hermes).content, "\n\nok");
  ExpectSameWhenStreamed(Syntax(false, ToolCallSyntax::kHermes), hermes);
  // Never closed: the text as written.
  const ChatDelta open = Parse(py, "<|tool_call_start|>[f(x=1)]");
  EXPECT_TRUE(open.tool_calls.empty());
  EXPECT_EQ(open.content, "<|tool_call_start|>[f(x=1)]");
}

// The history's calls written back for a template that renders none (LFM2-8B-A1B): Python literals as LFM2.5's
// template writes them, keys in the order sent.
TEST(ChatOutputParser, PythonicArgumentsRoundTrip) {
  const nlohmann::ordered_json args = nlohmann::ordered_json::parse(
      R"({"z": "it's a \\ path", "a": 2, "b": true, "c": null, "d": [1, "x"], "e": {"k": false}})");
  const std::string text = PythonicArguments(args);
  EXPECT_EQ(text, R"(z='it\'s a \\ path', a=2, b=True, c=None, d=[1,"x"], e={"k":false})");
  std::vector<std::pair<std::string, json>> calls;
  ASSERT_TRUE(ParsePythonicCalls("[f(" + text + ")]", &calls));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].second, json::parse(args.dump()));
}

TEST(ChatOutputParser, MistralCallList) {
  const std::string text = "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]";
  const ChatDelta d = Parse(Syntax(false, ToolCallSyntax::kMistral), text);
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "a");
  EXPECT_EQ(d.tool_calls[1].name, "b");
  EXPECT_TRUE(d.content.empty());
  ExpectSameWhenStreamed(Syntax(false, ToolCallSyntax::kMistral), text);
}

TEST(ChatOutputParser, ABrokenCallStaysInTheContent) {
  const std::string bad = "x <tool_call>{\"name\": \"f\", \"arguments\": {oops}}</tool_call> y";
  const ChatDelta d = Parse(Syntax(false, ToolCallSyntax::kHermes), bad);
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, bad);
  // Unclosed at the end of the output.
  const std::string open = "x <tool_call>{\"name\": \"f\"";
  EXPECT_EQ(Parse(Syntax(false, ToolCallSyntax::kHermes), open).content, open);
  ExpectSameWhenStreamed(Syntax(false, ToolCallSyntax::kHermes), bad);
  ExpectSameWhenStreamed(Syntax(false, ToolCallSyntax::kHermes), open);
  // A name that is not one (spaces) and a non-object are refused too.
  EXPECT_TRUE(Parse(Syntax(false, ToolCallSyntax::kHermes), "<tool_call>{\"name\": \"a b\"}</tool_call>").tool_calls.empty());
  EXPECT_TRUE(Parse(Syntax(false, ToolCallSyntax::kHermes), "<tool_call>[1]</tool_call>").tool_calls.empty());
}

TEST(ChatOutputParser, HoldsBackOnlyWhatMayBeAMarker) {
  ChatOutputParser p(Syntax(true, ToolCallSyntax::kHermes), "c");
  EXPECT_EQ(p.Push("Hello <to").content, "Hello ");
  EXPECT_EQ(p.Push("day").content, "<today");
  EXPECT_EQ(p.Push(" </").content, " </");  // "</" is not a prefix of any marker outside reasoning
  EXPECT_EQ(p.Finish().content, "");
}

TEST(ChatOutputParser, TextAfterACallIsKept) {
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nDone.";
  const ChatDelta d = Parse(Syntax(false, ToolCallSyntax::kHermes), text);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.content, "\n\nDone.");
  EXPECT_EQ(Parse(Syntax(false, ToolCallSyntax::kHermes), "<tool_call>{\"name\": \"f\"}</tool_call>\n\n").content, "");
  ExpectSameWhenStreamed(Syntax(false, ToolCallSyntax::kHermes), text);
}

// gpt-oss's Harmony channels: analysis -> reasoning, final -> content, a message to functions.NAME
// -> a tool call (recipient before or after the channel), a preamble on commentary -> content; the
// stop token may or may not reach the text; streamed byte by byte the same.
TEST(ChatOutputParser, HarmonyChannelsAndCalls) {
  const ChatSyntax h = DetectChatSyntax("{{ '<|start|>assistant<|channel|>final<|message|>' }}", "<|start|>assistant");
  ASSERT_TRUE(h.harmony);
  EXPECT_EQ(h.tool_calls, ToolCallSyntax::kHarmony);
  const std::vector<std::string> markers = ChatSyntaxMarkers(h);
  EXPECT_NE(std::find(markers.begin(), markers.end(), "<|channel|>"), markers.end());

  const std::string answer =
      "<|channel|>analysis<|message|>User greets. Reply.<|end|><|start|>assistant<|channel|>final<|message|>Hello "
      "<there>!<|return|>";
  ChatDelta d = Parse(h, answer);
  EXPECT_EQ(d.reasoning, "User greets. Reply.");
  EXPECT_EQ(d.content, "Hello <there>!");
  EXPECT_TRUE(d.tool_calls.empty());
  ExpectSameWhenStreamed(h, answer);
  // Without the stop token in the text (an EOS is not detokenized).
  EXPECT_EQ(Parse(h, "<|channel|>final<|message|>Hi").content, "Hi");

  const std::string call =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
  d = Parse(h, call);
  EXPECT_EQ(d.reasoning, "Need weather.");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(d.tool_calls[0].id, "call_0");
  ExpectSameWhenStreamed(h, call);
  // The recipient in the role part; <|call|> not in the text; a preamble first.
  d = Parse(h, "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.f<|channel|>commentary "
               "json<|message|>{}");
  EXPECT_EQ(d.content, "Checking.");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(d.tool_calls[0].arguments, "{}");
  // A body that is not a JSON object stays as written; a header never finished too.
  d = Parse(h, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>not json<|call|>");
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "not json");
  EXPECT_EQ(Parse(h, "<|channel|>fin").content, "<|channel|>fin");
  // With tool_choice none the parser keeps the channels but makes no calls.
  ChatSyntax none = h;
  none.tool_calls = ToolCallSyntax::kNone;
  d = Parse(none, call);
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.reasoning, "Need weather.");
}

}  // namespace
}  // namespace zipmoe::api
