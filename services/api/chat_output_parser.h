// What a chat model's generated text means to an OpenAI client: the answer (`content`), the
// thinking that came before it (`reasoning_content`, as DeepSeek's and vLLM's APIs name it) and the
// tool calls it made (`tool_calls`), told apart by the markers of the model's own chat template.
//
// The syntax is read from the template (DetectChatSyntax), never from a flag:
//   reasoning   <think> ... </think>  (Qwen3, DeepSeek-R1, GLM-4.5, ...): when the rendered prompt
//               ends inside an open <think> (templates that open it for the model), the output starts
//               as reasoning; a model that never closes it has reasoned all along.
//   tool calls  kHermes     <tool_call>{"name": N, "arguments": {...}}</tool_call>  (Hermes, Qwen2.5,
//                           Qwen3), or GLM-4.5's <tool_call>N<arg_key>k</arg_key><arg_value>v</arg_value>
//                           ...</tool_call> (a value that parses as JSON is that JSON, else a string)
//               kQwenXml    <tool_call><function=N><parameter=k>v</parameter>...</function></tool_call>
//                           (Qwen3-Coder; a value that parses as JSON is that JSON, else the text
//                           without its surrounding newlines)
//               kDeepSeek   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
//                           <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>  (DeepSeek-V3/R1; V3.1's
//                           <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜> too)
//               kMistral    [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] to the end of the output
//                           (Mistral/Mixtral v3 templates)
//               kGranite    <|tool_call|>[{"name": N, "arguments": {...}}, ...] to the end of the output
//                           (IBM Granite 3.x templates, which tell the model to "respond only with
//                           <|tool_call|> followed by a JSON list"; Granite 4 uses kHermes' <tool_call>)
//               kPythonic   <|tool_call_start|>[NAME(key=VALUE, ...), ...]<|tool_call_end|>  (Liquid AI's LFM2 /
//                           LFM2.5 templates, which list the tools between <|tool_list_start|> and
//                           <|tool_list_end|> or render calls in this form): the calls as Python call
//                           expressions with keyword arguments whose values are Python literals ('str' or
//                           "str", numbers, True / False / None, lists, tuples, dicts; JSON's true / false /
//                           null too); the same markers around a JSON list of {"name", "arguments"} objects
//                           (what LFM2 writes when told to answer in JSON, and what a forced call writes)
//   Harmony     gpt-oss (templates with <|channel|>): the output is messages HEADER<|message|>BODY ended by
//               <|end|>, <|return|> or <|call|> (or the end of the output), the next one opened by
//               <|start|>; the header names the channel (<|channel|>analysis / final / commentary) and
//               an optional recipient (to=functions.NAME, before or after the channel, a <|constrain|>
//               format after it). analysis -> reasoning, final -> content, a message to functions.NAME
//               -> a tool call NAME with the body as its arguments (a JSON object), commentary without
//               a recipient (a preamble) -> content. The prompt's <|start|>assistant opened the first
//               header (OpenAI's Harmony format; gpt-oss's chat template).
// A call whose body does not parse stays in `content` as the model wrote it, so nothing is lost.
// Arguments are handed on as JSON text (OpenAI's `function.arguments` string).
//
// Streaming: Push() returns only what is certain. Text that may be the start of a marker (e.g. a
// trailing "<tool" or "</th") is held back until the next Push or Finish decides it; a tool call is
// returned whole once its closing marker arrived. Whitespace between and after tool calls is dropped.
// Not thread-safe: one parser per generated choice.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace zipmoe::api {

enum class ToolCallSyntax { kNone, kHermes, kQwenXml, kDeepSeek, kMistral, kGranite, kHarmony, kPythonic };

struct ChatSyntax {
  bool reasoning = false;            // <think> ... </think>
  bool starts_in_reasoning = false;  // the prompt ended inside an open <think>
  ToolCallSyntax tool_calls = ToolCallSyntax::kNone;
  bool harmony = false;              // gpt-oss's channels (reasoning and tool calls in its own way)
  // (tool name, argument name) of every argument whose schema is a string (its `type`, or an enum of
  // strings): in the tagged syntaxes (GLM-4.5's <arg_value>, Qwen3-Coder's <parameter=...>) its value
  // is the raw text even when that text reads as JSON ("42", "true"), as vLLM's parsers of those
  // families read it; other values are JSON when they parse, else text.
  std::set<std::pair<std::string, std::string>> string_arguments;
  bool active() const { return reasoning || harmony || tool_calls != ToolCallSyntax::kNone; }
};

// True when `s` holds only JSON/ASCII whitespace (' ', '\n', '\t', '\r'), or nothing.
bool IsBlank(std::string_view s);

// A function name the parser reads back from a tool call: 1..256 of [A-Za-z0-9_.:-] (OpenAI's own rule,
// ^[a-zA-Z0-9_-]{1,64}$, plus '.' and ':', which namespaced MCP tools use). The API refuses tools named
// otherwise, since a call to them could never come back as `tool_calls`.
bool IsValidToolName(std::string_view name);

// The syntax of the template source `chat_template` (the Jinja text); `rendered_prompt` is this
// request's rendered prompt (for starts_in_reasoning). Templates without any marker: inactive.
ChatSyntax DetectChatSyntax(std::string_view chat_template, std::string_view rendered_prompt);

// The marker texts the parser reads for `syntax` (<think>, </think>, <tool_call>, [TOOL_CALLS], ...).
// Where a tokenizer makes one a special token, the detokenizer must keep it (the API's StreamDecoder
// keeps exactly these and skips the other special tokens), or the parser never sees it.
std::vector<std::string> ChatSyntaxMarkers(const ChatSyntax& syntax);

// kPythonic's call list: "[f(a=1, b='x'), g()]" (the brackets optional around a single call) -> (name, arguments
// object) per call, in order; false when `text` is not such a list (positional arguments, an expression that is
// not a literal, a repeated keyword, a name IsValidToolName refuses, trailing text).
bool ParsePythonicCalls(std::string_view text, std::vector<std::pair<std::string, nlohmann::json>>* calls);

// The Python text of a call's arguments object for a kPythonic history turn (what LFM2.5's template writes):
// key=VALUE pairs joined by ", ", strings in single quotes ('\'' and '\\' escaped), numbers as JSON, true /
// false / null as True / False / None, arrays and objects as JSON text.
std::string PythonicArguments(const nlohmann::ordered_json& arguments);

struct ParsedToolCall {
  std::string id;         // "<id_prefix><n>", n counting from 0 per parser
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

// One step's certain output. Empty strings / vectors: nothing of that kind.
struct ChatDelta {
  std::string content;
  std::string reasoning;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

class ChatOutputParser {
 public:
  ChatOutputParser(ChatSyntax syntax, std::string id_prefix);

  // Feeds the next piece of generated text (valid UTF-8 as the stream decoder emits it).
  ChatDelta Push(std::string_view text);
  // The end of the output: everything held back is decided (an unclosed tool call goes to content;
  // Mistral's and Granite's call lists are parsed here).
  ChatDelta Finish();

  int tool_call_count() const { return calls_; }

 private:
  enum class State { kContent, kReasoning, kToolCall, kHeader, kBody };
  void Run(bool final, ChatDelta* out);
  void RunHarmony(bool final, ChatDelta* out);
  void EndHarmonyMessage(ChatDelta* out);
  void EmitContent(std::string_view text, ChatDelta* out);
  bool ParseCall(std::string_view body, ChatDelta* out);

  ChatSyntax syntax_;
  std::string id_prefix_;
  State state_ = State::kContent;
  std::string buf_;           // undecided text
  std::string pending_space_;  // whitespace after a tool call, kept until other content follows
  bool skip_space_ = false;    // drop the whitespace that follows </think>
  int calls_ = 0;
  // Harmony: the current message's header text, channel and recipient, a called tool's body so far.
  std::string header_, channel_, recipient_, call_body_;
};

}  // namespace zipmoe::api
