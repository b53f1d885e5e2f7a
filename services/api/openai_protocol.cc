#include "services/api/openai_protocol.h"

#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace zipmoe::api {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr int kMaxChoices = 128;   // n per prompt
constexpr int kMaxPrompts = 128;   // prompts of one completions request
constexpr int kMaxLogprobs = 20;   // top alternatives per token
constexpr size_t kMaxStops = 64;         // stop strings per request
constexpr size_t kMaxStopBytes = 1024;   // bytes per stop string

// Fields every client may send that change nothing here (metadata, tool-use switches that only
// matter with tools).
const std::set<std::string>& NoEffectFields() {
  static const std::set<std::string> fields = {"user", "metadata", "store", "service_tier",
                                               "parallel_tool_calls", "prediction"};
  return fields;
}

// The fields this parser reads (everything else is listed in CompletionRequest::ignored).
const std::set<std::string>& KnownFields() {
  static const std::set<std::string> fields = {
      "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
      "seed", "n", "presence_penalty", "frequency_penalty", "stop", "stream", "stream_options", "ignore_eos",
      "logprobs", "top_logprobs", "echo", "best_of", "response_format", "tools", "tool_choice", "functions",
      "function_call", "logit_bias", "suffix", "min_p", "repetition_penalty", "top_a", "chat_template_kwargs",
      "reasoning_effort", "stop_token_ids", "min_tokens", "include_stop_str_in_output", "skip_special_tokens"};
  return fields;
}

bool Present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// Reads `key` as a number in [lo, hi] into *out (unchanged when absent/null).
bool Number(const json& j, const char* key, double lo, double hi, bool lo_open, double* out, ApiError* err) {
  if (!Present(j, key)) return true;
  const json& v = j[key];
  if (!v.is_number()) return *err = BadRequest(fmt::format("'{}' must be a number", key), key), false;
  const double x = v.get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
    return *err = BadRequest(fmt::format("'{}' must be in {}{}, {}], got {}", key, lo_open ? "(" : "[", lo, hi, x), key),
           false;
  *out = x;
  return true;
}

bool Integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out, ApiError* err) {
  if (!Present(j, key)) return true;
  const json& v = j[key];
  if (!v.is_number_integer()) return *err = BadRequest(fmt::format("'{}' must be an integer", key), key), false;
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) return *err = BadRequest(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x), key), false;
  *out = x;
  return true;
}

bool Bool(const json& j, const char* key, bool* out, ApiError* err) {
  if (!Present(j, key)) return true;
  if (!j[key].is_boolean()) return *err = BadRequest(fmt::format("'{}' must be true or false", key), key), false;
  *out = j[key].get<bool>();
  return true;
}

bool TokenIds(const json& arr, const ModelConfig& c, const std::string& param, std::vector<int32_t>* out, ApiError* err) {
  for (const json& t : arr) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= c.vocab_size)
      return *err = BadRequest(fmt::format("'{}': token {} is not an id in [0, {})", param, t.dump(), c.vocab_size), param),
             false;
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return true;
}

bool TextPrompt(const std::string& text, const ProtocolContext& ctx, bool add_special, PromptInput* out, ApiError* err) {
  if (ctx.tokenizer == nullptr)
    return *err = BadRequest("text prompts need a tokenizer (tokenizer.json or tiktoken.model) in the model directory; send token ids", "prompt"), false;
  Result<std::vector<int32_t>> ids = ctx.tokenizer->Encode(text, add_special);
  if (!ids.ok()) return *err = BadRequest(ids.status().ToString(), "prompt"), false;
  out->ids = std::move(ids).value();
  out->text = text;
  return true;
}

bool ParsePrompts(const json& j, const ProtocolContext& ctx, CompletionRequest* out, ApiError* err) {
  if (!Present(j, "prompt")) return *err = BadRequest("'prompt' is required", "prompt"), false;
  const json& p = j["prompt"];
  auto token_prompt = [&](const json& arr) {
    PromptInput in;
    if (!TokenIds(arr, *ctx.config, "prompt", &in.ids, err)) return false;
    if (ctx.tokenizer != nullptr) in.text = ctx.tokenizer->Decode(in.ids);
    out->prompts.push_back(std::move(in));
    return true;
  };
  if (p.is_string()) {
    PromptInput in;
    if (!TextPrompt(p.get<std::string>(), ctx, true, &in, err)) return false;
    out->prompts.push_back(std::move(in));
    return true;
  }
  if (!p.is_array() || p.empty())
    return *err = BadRequest("'prompt' must be a string, [string], [int] or [[int]] (non-empty)", "prompt"), false;
  if (p.size() > static_cast<size_t>(kMaxPrompts) && !p[0].is_number())
    return *err = BadRequest(fmt::format("'prompt' has {} prompts; at most {}", p.size(), kMaxPrompts), "prompt"), false;
  if (p[0].is_number()) return token_prompt(p);
  for (const json& item : p) {
    if (item.is_string()) {
      PromptInput in;
      if (!TextPrompt(item.get<std::string>(), ctx, true, &in, err)) return false;
      out->prompts.push_back(std::move(in));
    } else if (item.is_array() && !item.empty() && item[0].is_number()) {
      if (!token_prompt(item)) return false;
    } else {
      return *err = BadRequest("'prompt' must be a string, [string], [int] or [[int]] (non-empty)", "prompt"), false;
    }
  }
  return true;
}

// An assistant message's tool_calls as templates expect them: OpenAI's [{id, type: "function",
// function: {name, arguments}}], arguments (a JSON string on the wire) parsed into an object as vLLM
// and llama.cpp hand them to templates (a string that is not JSON stays a string). `as_sent`: the
// same calls with the arguments as the client sent them (a JSON string stays that string), which is
// what transformers' apply_chat_template hands a template given OpenAI's messages (DeepSeek-V3's
// published template concatenates the string); arguments sent as an object there as their compact JSON.
bool ToolCalls(const ordered_json& calls, const std::string& where, ordered_json* out, ordered_json* as_sent,
               ApiError* err) {
  if (!calls.is_array()) return *err = BadRequest(where + " must be an array", where), false;
  *out = ordered_json::array();
  *as_sent = ordered_json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const ordered_json& c = calls[k];
    const std::string w = fmt::format("{}[{}]", where, k);
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      return *err = BadRequest(w + " must be an object with a 'function' object", w), false;
    const ordered_json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      return *err = BadRequest(w + ".function.name must be a string", w + ".function.name"), false;
    ordered_json call = c;
    call["type"] = "function";
    if (!f.contains("arguments") || f["arguments"].is_null()) call["function"]["arguments"] = ordered_json::object();
    as_sent->push_back(call);
    if (as_sent->back()["function"]["arguments"].is_object())  // sent as an object: the compact JSON text
      as_sent->back()["function"]["arguments"] = as_sent->back()["function"]["arguments"].dump();
    if (f.contains("arguments") && f["arguments"].is_string()) {
      const std::string& text = f["arguments"].get_ref<const std::string&>();
      ordered_json parsed = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_discarded()) call["function"]["arguments"] = std::move(parsed);
    } else if (!call["function"]["arguments"].is_object()) {
      return *err = BadRequest(w + ".function.arguments must be a JSON string or an object", w + ".function.arguments"),
             false;
    }
    out->push_back(std::move(call));
  }
  return true;
}

// tools: [{type: "function", function: {name, description?, parameters?}}], handed to the template
// as given.
bool Tools(const ordered_json& j, ordered_json* out, ApiError* err) {
  if (!j.contains("tools") || j["tools"].is_null()) return true;
  const ordered_json& tools = j["tools"];
  if (!tools.is_array()) return *err = BadRequest("'tools' must be an array", "tools"), false;
  for (size_t k = 0; k < tools.size(); ++k) {
    const ordered_json& t = tools[k];
    const std::string w = fmt::format("tools[{}]", k);
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object())
      return *err = BadRequest(w + " must be {\"type\": \"function\", \"function\": {...}}", w), false;
    if (!t["function"].contains("name") || !t["function"]["name"].is_string())
      return *err = BadRequest(w + ".function.name must be a string", w + ".function.name"), false;
    if (!IsValidToolName(t["function"]["name"].get<std::string>()))
      return *err = BadRequest(fmt::format("{}.function.name '{}' must be 1 to 256 of the characters a-z, A-Z, 0-9, "
                                           "'_', '-', '.' and ':'",
                                           w, Clip(t["function"]["name"].get<std::string>())),
                               w + ".function.name"),
             false;
  }
  if (!tools.empty()) *out = tools;
  return true;
}

// `j` is the body as parsed for validation; `oj` the same body with its objects' key order kept
// (what reaches the template: tojson of tools and arguments writes keys in the client's order, as
// transformers does).
// The text a thinking model writes before its answer when the prompt left it inside an open <think>:
// a constrained answer (JSON or a forced call) starts after "</think>" (vLLM's order: reasoning free,
// then the structured part).
std::string FreeTextBefore(const ChatSyntax& syntax) { return syntax.starts_in_reasoning ? "</think>" : ""; }

// tool_choice "required" or a named function: the answer is constrained to one call in the template's
// own syntax (chat_output_parser.h), with the arguments valid for the tool's `parameters` schema
// (json_grammar.h):
//   Hermes / Qwen   <tool_call>{"name": N, "arguments": {...}}</tool_call>
//   Mistral         [TOOL_CALLS][{"name": N, "arguments": {...}}]
//   DeepSeek-V3/R1  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//   DeepSeek-V3.1   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//   Harmony         <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...} then <|call|> (an EOS id)
//   GLM-4.5/4.6/4.7 <tool_call>N\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>...</tool_call>
//   Qwen3-Coder     <tool_call>\n<function=N>\n<parameter=k>\nv\n</parameter>\n...</function>\n</tool_call>
//   LFM2 / LFM2.5   <|tool_call_start|>[{"name": N, "arguments": {...}}]<|tool_call_end|> (the JSON form of its
//                   Pythonic calls)
// (DeepSeek's, Harmony's, GLM's and Qwen3-Coder's name sits in the frame: one alternative per tool; the
// last two write the arguments as tagged pairs, a string raw, anything else as JSON: TagSyntax).
bool ForcedToolCall(const json& j, const ordered_json& tools, const std::string& source, CompletionRequest* out,
                    ApiError* err) {
  if (!Present(j, "tool_choice") || (j["tool_choice"].is_string() && j["tool_choice"] != "required")) return true;
  const auto bad = [&](const std::string& why) {
    *err = BadRequest("'tool_choice': " + why, "tool_choice");
    return false;
  };
  if (!tools.is_array() || tools.empty()) return bad("forcing a call needs 'tools'");
  if (out->grammar != nullptr) return bad("a forced call and a JSON response_format cannot be combined");
  const ToolCallSyntax syntax = out->chat_syntax.tool_calls;
  if (syntax == ToolCallSyntax::kNone)
    return bad("this model's chat template writes no tool calls, so none can be forced");
  const bool glm = syntax == ToolCallSyntax::kHermes && source.find("<arg_key>") != std::string::npos;
  const std::string wanted = j["tool_choice"].is_object() ? j["tool_choice"]["function"]["name"].get<std::string>() : "";
  struct Chosen {
    std::string name;
    json params;        // the parameters schema
    std::string label;  // "tools[i].function.parameters": where errors inside it point
  };
  std::vector<Chosen> chosen;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& t = tools[i];
    const std::string name = t["function"]["name"].get<std::string>();
    if (!wanted.empty() && name != wanted) continue;
    const std::string label = fmt::format("tools[{}].function.parameters", i);
    json params = t["function"].contains("parameters") && !t["function"]["parameters"].is_null()
                      ? json::parse(t["function"]["parameters"].dump())
                      : json{{"type", "object"}, {"properties", json::object()},
                             {"additionalProperties", false}};  // OpenAI: no parameters
    // The arguments are an object (what every template writes and the parser reads back): a schema
    // that admits anything ({} or true, often sent for a tool without arguments) means any object; one
    // that admits no object is refused.
    Result<std::shared_ptr<const JsonGrammar>> alone =
        JsonGrammar::CompileAlternatives({JsonGrammar::Framing{params, "", "", {{"", label}}}});
    if (!alone.ok()) return bad(fmt::format("the tools' parameters cannot be enforced: {}", alone.status().message()));
    const SchemaNode::Kind kind = (*alone)->node((*alone)->root()).kind;
    if (kind == SchemaNode::Kind::kAny) {
      params = json{{"type", "object"}};
    } else if (kind != SchemaNode::Kind::kObject) {
      return bad(fmt::format("{} must describe an object (\"type\": \"object\"): the arguments of a call are one",
                             label));
    }
    chosen.push_back({name, std::move(params), label});
  }
  if (chosen.empty()) return bad(fmt::format("no tool is named '{}'", Clip(wanted)));
  std::vector<JsonGrammar::Framing> framings;
  TagSyntax tags = TagSyntax::kJson;
  if (glm || syntax == ToolCallSyntax::kQwenXml) {
    // The arguments as tagged pairs (json_grammar.h TagSyntax), one alternative per tool (its name is in
    // the frame): GLM-4.5 <tool_call>N<arg_key>..., Qwen3-Coder <tool_call>\n<function=N>\n<parameter=...
    tags = glm ? TagSyntax::kGlm : TagSyntax::kQwenXml;
    for (Chosen& c : chosen) {
      if (glm) {
        framings.push_back({std::move(c.params), "<tool_call>" + c.name, "</tool_call>", {{"", c.label}}});
      } else {
        framings.push_back({std::move(c.params), "<tool_call>\n<function=" + c.name + ">\n",
                            "</function>\n</tool_call>", {{"", c.label}}});
      }
    }
  } else if (syntax == ToolCallSyntax::kHarmony) {  // a message to functions.NAME; <|call|> (an EOS id) ends it
    for (Chosen& c : chosen)
      framings.push_back({std::move(c.params),
                          "<|channel|>commentary to=functions." + c.name + " <|constrain|>json<|message|>", "",
                          {{"", c.label}}});
  } else if (syntax == ToolCallSyntax::kDeepSeek) {
    // V3/R1 write the type and a ```json fence; V3.1 the name right after the call's begin marker.
    const bool fenced = source.find("```json") != std::string::npos;
    for (Chosen& c : chosen) {
      const std::string& name = c.name;
      JsonGrammar::Framing f;
      f.schema = std::move(c.params);
      f.documents = {{"", c.label}};
      f.prefix = fenced ? "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n"
                        : "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>";
      f.suffix = fenced ? "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>" : "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
      framings.push_back(std::move(f));
    }
  } else {
    // {"name": N, "arguments": {...}} per tool, each tool's parameters a schema document of its own
    // (its "$ref"s resolve against it, not against the wrapper).
    json alternatives = json::array();
    std::vector<JsonGrammar::Document> documents;
    for (Chosen& c : chosen) {
      documents.push_back({chosen.size() == 1 ? "/properties/arguments"
                                              : fmt::format("/anyOf/{}/properties/arguments", alternatives.size()),
                           c.label});
      alternatives.push_back(json{{"type", "object"},
                                  {"properties", {{"name", {{"const", c.name}}}, {"arguments", std::move(c.params)}}},
                                  {"required", {"name", "arguments"}}});
    }
    const json schema = alternatives.size() == 1 ? alternatives[0] : json{{"anyOf", alternatives}};
    if (syntax == ToolCallSyntax::kMistral) {
      framings.push_back({schema, "[TOOL_CALLS][", "]", documents});
    } else if (syntax == ToolCallSyntax::kGranite) {
      framings.push_back({schema, "<|tool_call|>[", "]", documents});
    } else if (syntax == ToolCallSyntax::kPythonic) {  // LFM2: its markers around a JSON list (the parser reads both)
      framings.push_back({schema, "<|tool_call_start|>[", "]<|tool_call_end|>", documents});
    } else {
      framings.push_back({schema, "<tool_call>", "</tool_call>", documents});
    }
  }
  Result<std::shared_ptr<const JsonGrammar>> g =
      JsonGrammar::CompileAlternatives(framings, FreeTextBefore(out->chat_syntax), tags);
  if (!g.ok()) return bad(fmt::format("the tools' parameters cannot be enforced: {}", g.status().message()));
  out->grammar = std::move(g).value();
  return true;
}

bool ParseMessages(const json& j, const ordered_json& oj, const ProtocolContext& ctx, CompletionRequest* out,
                   ApiError* err) {
  if (!Present(j, "messages") || !j["messages"].is_array() || j["messages"].empty())
    return *err = BadRequest("'messages' must be a non-empty array", "messages"), false;
  if (ctx.tokenizer == nullptr)
    return *err = BadRequest("chat needs a tokenizer (tokenizer.json or tiktoken.model) in the model directory", "messages"), false;
  ordered_json messages = ordered_json::array();
  ordered_json tools;
  if (!Tools(oj, &tools, err)) return false;
  const bool tool_choice_none = Present(j, "tool_choice") && j["tool_choice"] == "none";
  if (tool_choice_none) tools = ordered_json();  // the model is not offered the tools
  // The template ApplyChatTemplate renders (its tool_use variant when tools are given), read once.
  const std::string source = ctx.tokenizer->ChatTemplateSource(!tools.is_null());
  const bool template_knows_tool_calls = source.find("tool_calls") != std::string::npos;
  const bool pythonic_in_content =
      !template_knows_tool_calls && DetectChatSyntax(source, "").tool_calls == ToolCallSyntax::kPythonic;
  const json& arr = j["messages"];
  std::vector<size_t> null_beside_calls;  // messages whose absent / null content is passed as null
  std::vector<std::pair<size_t, ordered_json>> calls_as_sent;  // tool_calls whose sent arguments differ
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& m = arr[i];
    const ordered_json& om = oj["messages"][i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return *err = BadRequest(where + " must be an object", where), false;
    if (!m.contains("role") || !m["role"].is_string())
      return *err = BadRequest(where + ".role must be a string", where + ".role"), false;
    std::string role = m["role"].get<std::string>();
    static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
    if (kRoles.count(role) == 0)
      return *err = BadRequest(fmt::format("{}.role '{}' is not one of system, developer, user, assistant, tool", where,
                                           role),
                               where + ".role"),
             false;
    if (role == "developer") role = "system";  // OpenAI's newer name for the system message
    ordered_json message{{"role", role}};
    const std::string cwhere = where + ".content";
    const bool has_calls = role == "assistant" && Present(m, "tool_calls");
    if (!m.contains("content") || m["content"].is_null()) {
      if (role != "assistant")
        return *err = BadRequest(cwhere + " is required (null only on an assistant message)", cwhere), false;
      // null beside tool calls for a template that renders them (it tests for null); otherwise an
      // empty answer, which templates that concatenate content can render.
      const bool calls = has_calls && m["tool_calls"].is_array() && !m["tool_calls"].empty();
      message["content"] = calls && template_knows_tool_calls ? ordered_json(nullptr) : ordered_json("");
      if (message["content"].is_null()) null_beside_calls.push_back(messages.size());
    } else if (m["content"].is_string()) {
      message["content"] = m["content"];
    } else if (m["content"].is_array()) {
      std::string content;
      for (size_t k = 0; k < m["content"].size(); ++k) {
        const json& part = m["content"][k];
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          return *err = BadRequest(cwhere + ": each part needs a string 'type'", cwhere), false;
        if (part["type"] != "text")
          return *err = BadRequest(fmt::format("{}: content parts of type '{}' are not supported (text only)", cwhere,
                                               part["type"].get<std::string>()),
                                   cwhere),
                 false;
        if (!part.contains("text") || !part["text"].is_string())
          return *err = BadRequest(cwhere + ": a text part needs a string 'text'", cwhere), false;
        if (k > 0) content += '\n';  // joined as vLLM's "\n".join(texts) joins them
        content += part["text"].get<std::string>();
      }
      message["content"] = content;
    } else {
      return *err = BadRequest(cwhere + " must be a string, an array of text parts or null", cwhere), false;
    }
    if (has_calls) {
      ordered_json calls, as_sent;
      if (!ToolCalls(om["tool_calls"], where + ".tool_calls", &calls, &as_sent, err)) return false;
      if (pythonic_in_content) {
        // LFM2-8B-A1B's template renders no tool_calls: the calls go into the turn's text as the model writes
        // them, <|tool_call_start|>[name(key=value, ...)]<|tool_call_end|>, so it reads its own calls back.
        std::string text = "<|tool_call_start|>[";
        for (size_t k = 0; k < calls.size(); ++k) {
          const ordered_json& f = calls[k]["function"];
          text += (k > 0 ? ", " : "") + f["name"].get<std::string>() + "(" + PythonicArguments(f["arguments"]) + ")";
        }
        message["content"] = message["content"].get<std::string>() + text + "]<|tool_call_end|>";
      } else {
        if (as_sent != calls) calls_as_sent.emplace_back(messages.size(), std::move(as_sent));
        message["tool_calls"] = std::move(calls);
      }
    }
    if (role == "tool") {
      if (Present(m, "tool_call_id")) {
        if (!m["tool_call_id"].is_string())
          return *err = BadRequest(where + ".tool_call_id must be a string", where + ".tool_call_id"), false;
        message["tool_call_id"] = m["tool_call_id"];
      }
    }
    if (Present(m, "name")) {
      if (!m["name"].is_string()) return *err = BadRequest(where + ".name must be a string", where + ".name"), false;
      message["name"] = m["name"];
    }
    // Thinking text a client sends back: vLLM's and DeepSeek's field (reasoning_content), and gpt-oss's
    // (its published template renders a tool-call turn's `thinking` as the analysis channel), each as
    // sent: transformers hands a template the message's own keys, so reasoning_content is not renamed.
    if (role == "assistant") {
      if (Present(m, "reasoning_content") && m["reasoning_content"].is_string())
        message["reasoning_content"] = m["reasoning_content"];
      if (Present(m, "thinking") && m["thinking"].is_string()) message["thinking"] = m["thinking"];
    }
    messages.push_back(std::move(message));
  }
  ordered_json kwargs = ordered_json::object();
  if (Present(j, "chat_template_kwargs")) {
    if (!j["chat_template_kwargs"].is_object())
      return *err = BadRequest("'chat_template_kwargs' must be an object", "chat_template_kwargs"), false;
    kwargs = oj["chat_template_kwargs"];
    for (const char* reserved : {"messages", "tools", "add_generation_prompt"}) {
      if (kwargs.contains(reserved))
        return *err = BadRequest(fmt::format("'chat_template_kwargs' may not set '{}' (a request field sets it)",
                                             reserved),
                                 "chat_template_kwargs"),
               false;
    }
  }
  if (Present(j, "reasoning_effort")) {
    if (!j["reasoning_effort"].is_string())
      return *err = BadRequest("'reasoning_effort' must be a string", "reasoning_effort"), false;
    if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = j["reasoning_effort"];
  }
  const auto render = [&](const ordered_json& msgs) {
    return ctx.tokenizer->ApplyChatTemplate(msgs, tools, /*add_generation_prompt=*/true, kwargs);
  };
  Result<std::string> text = render(messages);
  if (!text.ok() && text.status().code() != StatusCode::kNotFound) {
    // Where the template cannot take the messages as above, in this order (the first that renders wins):
    //  1. the tool calls' arguments as the client sent them (a JSON string: DeepSeek-V3's published
    //     template concatenates it, and fails on an object under jinja2 too);
    //  2. an empty string for a null content beside tool calls (gpt-oss's published template tests
    //     `"..." in message.content`, which fails on null under jinja2 too), as llama.cpp's template
    //     polyfills do, with the parsed arguments, then with the sent ones;
    // a rendering of step 2 that leaves the tool calls out (the same text without them: a template that
    // renders an assistant turn with content as a plain answer) is refused rather than served: the model
    // would read tool results with no call before them. The first error stands when nothing renders.
    struct Candidate {
      ordered_json messages;
      bool empty_content;  // step 2: are the calls still in what it renders?
    };
    ordered_json sent = messages;
    for (const auto& [k, calls] : calls_as_sent) sent[k]["tool_calls"] = calls;
    const auto emptied = [&](ordered_json m) {
      for (const size_t k : null_beside_calls) m[k]["content"] = "";
      return m;
    };
    std::vector<Candidate> candidates;
    if (!calls_as_sent.empty()) candidates.push_back({sent, false});
    if (!null_beside_calls.empty()) {
      candidates.push_back({emptied(messages), true});
      if (!calls_as_sent.empty()) candidates.push_back({emptied(sent), true});
    }
    bool dropped = false;
    for (size_t c = 0; c < candidates.size() && !text.ok(); ++c) {
      Result<std::string> retry = render(candidates[c].messages);
      if (!retry.ok()) continue;
      if (candidates[c].empty_content) {
        ordered_json without = candidates[c].messages;
        for (const size_t k : null_beside_calls) without[k].erase("tool_calls");
        Result<std::string> bare = render(without);
        if (bare.ok() && *bare == *retry) {
          dropped = true;
          continue;
        }
      }
      text = std::move(retry);
    }
    if (!text.ok() && dropped)
      return *err = BadRequest(fmt::format("the model's chat template cannot render the tool calls of messages[{}]: "
                                           "with a null content it fails ({}), with an empty one it leaves them out",
                                           null_beside_calls[0], text.status().message()),
                               fmt::format("messages[{}].tool_calls", null_beside_calls[0])),
             false;
  }
  if (!text.ok() && text.status().code() == StatusCode::kNotFound)
    return *err = BadRequest(fmt::format("this model has no chat template ({}): chat endpoints need one; use "
                                         "/v1/completions with a plain prompt",
                                         text.status().message()),
                             "messages"),
           false;
  if (!text.ok()) return *err = BadRequest(text.status().ToString(), "messages"), false;
  out->chat_syntax = DetectChatSyntax(source, *text);
  // Calls are parsed only where the request offers tools (OpenAI returns no tool_calls without them; vLLM
  // runs its tool parser only then): otherwise call-shaped text stays content.
  if (tool_choice_none || !tools.is_array() || tools.empty()) out->chat_syntax.tool_calls = ToolCallSyntax::kNone;
  if (tools.is_array()) {  // string arguments stay text in the tagged call syntaxes (ChatSyntax)
    for (const ordered_json& t : tools) {
      const ordered_json& f = t["function"];
      if (!f.contains("parameters") || !f["parameters"].is_object() || !f["parameters"].contains("properties") ||
          !f["parameters"]["properties"].is_object())
        continue;
      for (const auto& [arg, schema] : f["parameters"]["properties"].items()) {
        bool text = schema.is_object() && ((schema.contains("type") && schema["type"] == "string") ||
                                           (schema.contains("const") && schema["const"].is_string()));
        if (schema.is_object() && !schema.contains("type") && schema.contains("enum") && schema["enum"].is_array() &&
            !schema["enum"].empty()) {
          text = std::all_of(schema["enum"].begin(), schema["enum"].end(), [](const ordered_json& v) { return v.is_string(); });
        }
        if (text) out->chat_syntax.string_arguments.emplace(f["name"].get<std::string>(), arg);
      }
    }
  }
  if (out->grammar != nullptr && out->chat_syntax.harmony) {
    // response_format on gpt-oss: the JSON is the final channel's message, written at once.
    out->grammar = JsonGrammar::WithPrefix(out->grammar, "<|channel|>final<|message|>");
  } else if (out->grammar != nullptr) {
    // response_format: the JSON is all content; a thinking model reasons first (free text up to
    // its </think>), and that part goes to reasoning_content.
    out->chat_syntax.tool_calls = ToolCallSyntax::kNone;
    if (!out->chat_syntax.starts_in_reasoning) {
      out->chat_syntax = ChatSyntax{};
    } else {
      out->grammar = JsonGrammar::WithFreeTextBefore(out->grammar, FreeTextBefore(out->chat_syntax));
    }
  }
  if (!ForcedToolCall(j, tools, source, out, err)) return false;
  PromptInput in;
  Result<std::vector<int32_t>> ids = ctx.tokenizer->Encode(*text, /*add_special_tokens=*/false);
  if (!ids.ok()) return *err = BadRequest(ids.status().ToString(), "messages"), false;
  in.ids = std::move(ids).value();
  in.text = std::move(text).value();
  out->prompts.push_back(std::move(in));
  return true;
}

// logit_bias: {"<token id>": bias in [-100, 100]} (OpenAI's API reference), ids within the vocabulary.
bool LogitBias(const json& j, const ProtocolContext& ctx, executor::SamplingParams* sampling, ApiError* err) {
  if (!Present(j, "logit_bias")) return true;
  const json& m = j["logit_bias"];
  if (!m.is_object()) return *err = BadRequest("'logit_bias' must be an object {token id: bias}", "logit_bias"), false;
  constexpr size_t kMaxBiases = 1024;
  if (m.size() > kMaxBiases)
    return *err = BadRequest(fmt::format("'logit_bias' has {} entries (at most {})", m.size(), kMaxBiases), "logit_bias"),
           false;
  const int64_t vocab = ctx.config != nullptr ? ctx.config->vocab_size : INT32_MAX;
  for (const auto& [key, value] : m.items()) {
    int64_t id = -1;
    size_t used = 0;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || key.empty() || id < 0 || id >= vocab)
      return *err = BadRequest(fmt::format("'logit_bias': key '{}' is not a token id in [0, {})", Clip(key), vocab),
                               "logit_bias"),
             false;
    if (!value.is_number() || value.get<double>() < -100.0 || value.get<double>() > 100.0)
      return *err = BadRequest(fmt::format("'logit_bias': the bias of token {} must be a number in [-100, 100]", id),
                               "logit_bias"),
             false;
    sampling->logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return true;
}

// vLLM's stop_token_ids ([int], at most kMaxStops ids in [0, vocab)) and min_tokens (>= 0, at most
// max_tokens when that is given).
bool StopTokenIds(const json& j, const ProtocolContext& ctx, CompletionRequest* out, ApiError* err) {
  if (Present(j, "stop_token_ids")) {
    const json& ids = j["stop_token_ids"];
    const int64_t vocab = ctx.config != nullptr ? ctx.config->vocab_size : INT32_MAX;
    if (!ids.is_array()) return *err = BadRequest("'stop_token_ids' must be an array of token ids", "stop_token_ids"), false;
    if (ids.size() > kMaxStops)
      return *err = BadRequest(fmt::format("'stop_token_ids' has {} ids; at most {}", ids.size(), kMaxStops),
                               "stop_token_ids"),
             false;
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)
        return *err = BadRequest(fmt::format("'stop_token_ids': {} is not a token id in [0, {})", Clip(id.dump()), vocab),
                                 "stop_token_ids"),
               false;
      out->stop_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!Integer(j, "min_tokens", 0, INT32_MAX, &out->min_tokens, err)) return false;
  if (out->max_tokens >= 0 && out->min_tokens > out->max_tokens)
    return *err = BadRequest(fmt::format("'min_tokens' ({}) is more than max_tokens ({})", out->min_tokens,
                                         out->max_tokens),
                             "min_tokens"),
           false;
  return true;
}

// response_format: text (free), json_object (any JSON object) or json_schema (that schema), compiled
// into the grammar the choices are constrained to.
bool ResponseFormat(const json& j, CompletionRequest* out, ApiError* err) {
  if (!Present(j, "response_format")) return true;
  const json& f = j["response_format"];
  const auto bad = [&](const std::string& why) {
    *err = BadRequest("'response_format': " + why, "response_format");
    return false;
  };
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    return bad("must be an object with a string 'type' (text, json_object or json_schema)");
  const std::string type = f["type"].get<std::string>();
  if (type == "text") return true;
  static const json kAnything = json::object();
  const json* schema = &kAnything;
  if (type == "json_schema") {
    if (!f.contains("json_schema") || !f["json_schema"].is_object())
      return bad("type json_schema needs a 'json_schema' object {name, schema, strict}");
    const json& js = f["json_schema"];
    if (!js.contains("schema") || !(js["schema"].is_object() || js["schema"].is_boolean()))
      return bad("json_schema.schema must be a JSON Schema object");
    schema = &js["schema"];
  } else if (type != "json_object") {
    return bad(fmt::format("unknown type '{}' (text, json_object or json_schema)", Clip(type)));
  }
  Result<std::shared_ptr<const JsonGrammar>> g = JsonGrammar::Compile(*schema, /*object_root=*/type == "json_object");
  if (!g.ok()) return bad(std::string(g.status().message()));
  out->grammar = std::move(g).value();
  return true;
}

// Fields whose non-default values this server cannot honour: 400 naming them.
bool RejectUnsupported(const json& j, bool chat, const CompletionRequest& r, ApiError* err) {
  if (!chat && Present(j, "tools")) return *err = BadRequest("'tools' is a chat field", "tools"), false;
  if (Present(j, "tool_choice")) {
    const json& tc = j["tool_choice"];
    const bool word = tc.is_string() && (tc == "none" || tc == "auto" || tc == "required");
    const bool named = tc.is_object() && tc.value("type", "") == "function" && tc.contains("function") &&
                       tc["function"].is_object() && tc["function"].contains("name") && tc["function"]["name"].is_string();
    if (!word && !named)
      return *err = BadRequest("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}",
                               "tool_choice"),
             false;
    if (!chat) return *err = BadRequest("'tool_choice' is a chat field", "tool_choice"), false;
  }
  if (Present(j, "functions") && !(j["functions"].is_array() && j["functions"].empty()))
    return *err = BadRequest("'functions': function calling is not supported by this server", "functions"), false;
  if (Present(j, "function_call") && j["function_call"] != "none")
    return *err = BadRequest("'function_call': function calling is not supported by this server", "function_call"),
           false;
  if (Present(j, "suffix") && !(j["suffix"].is_string() && j["suffix"].get<std::string>().empty()))
    return *err = BadRequest("'suffix' (insertion) is not supported by this server", "suffix"), false;
  if (Present(j, "top_a") && !(j["top_a"].is_number() && j["top_a"].get<double>() == 0.0))
    return *err = BadRequest("'top_a' is not supported by this server (0 only)", "top_a"), false;
  // vLLM's sampling extensions that would change the answer: refused unless at their no-op value, so
  // that a client relying on one learns it is not applied.
  if (Present(j, "include_stop_str_in_output") && j["include_stop_str_in_output"] != false)
    return *err = BadRequest("'include_stop_str_in_output' is not supported by this server (false only: the text ends "
                             "before the stop string)",
                             "include_stop_str_in_output"),
           false;
  if (Present(j, "skip_special_tokens") && j["skip_special_tokens"] != true)
    return *err = BadRequest("'skip_special_tokens' is not supported by this server (true only)", "skip_special_tokens"),
           false;
  if (Present(j, "best_of")) {
    if (chat) return *err = BadRequest("'best_of' is a completions field", "best_of"), false;
    if (!j["best_of"].is_number_integer() || j["best_of"].get<int64_t>() != r.n)
      return *err = BadRequest(fmt::format("'best_of' must equal n ({}): ranking extra samples is not supported", r.n),
                               "best_of"),
             false;
  }
  if (chat && Present(j, "echo")) return *err = BadRequest("'echo' is a completions field", "echo"), false;
  if (chat && Present(j, "suffix")) return *err = BadRequest("'suffix' is a completions field", "suffix"), false;
  return true;
}

}  // namespace

ApiError BadRequest(std::string message, std::string param) {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param), ""};
}

nlohmann::json ErrorJson(const ApiError& e) {
  return json{{"error",
               {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

int64_t CompletionRequest::MaxNewTokens(size_t i, int64_t context_length, bool encoder_decoder) const {
  if (max_tokens >= 0) return max_tokens;
  if (encoder_decoder) return context_length;
  return std::max<int64_t>(0, context_length - static_cast<int64_t>(prompts[i].ids.size()));
}

bool ParseJsonObject(const std::string& body, json* out, ApiError* err) {
  try {
    *out = json::parse(body);
  } catch (const json::parse_error& e) {
    const size_t at = e.byte > 0 ? e.byte - 1 : 0;
    // Printable ASCII only: the message goes back inside a JSON string (no control bytes, no
    // invalid UTF-8 from a cut multi-byte character).
    const auto printable = [](std::string text) {
      for (char& c : text)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
      return text;
    };
    const std::string near = printable(body.substr(std::min(at, body.size()), 64));
    // e.what() quotes the token being read, which may be most of the body: give only its reason.
    std::string reason = e.what();
    const size_t colon = reason.find(": syntax error");
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
    const size_t last_read = reason.find("; last read:");
    if (last_read != std::string::npos) reason = reason.substr(0, last_read);
    if (reason.size() > 160) reason.resize(160);
    reason = printable(reason);
    *err = BadRequest(fmt::format("the request body is not valid JSON: {} at byte {} (near '{}')", reason, e.byte,
                                  near));
    return false;
  } catch (const json::out_of_range&) {  // a number beyond float64, e.g. 1E1111 (nlohmann's error 406)
    *err = BadRequest("the request body holds a number out of range (beyond a 64-bit float)");
    return false;
  }
  if (!out->is_object()) {
    *err = BadRequest(fmt::format("the request body is a JSON {}, not an object", out->type_name()));
    return false;
  }
  return true;
}

bool ParseCompletionRequest(const std::string& body, Endpoint endpoint, const ProtocolContext& ctx,
                            CompletionRequest* out, ApiError* err) {
  json j;
  if (!ParseJsonObject(body, &j, err)) return false;
  const bool chat = endpoint == Endpoint::kChat;
  *out = CompletionRequest();
  out->endpoint = endpoint;
  try {
    for (const auto& [key, value] : j.items())
      if (KnownFields().count(key) == 0 || NoEffectFields().count(key) != 0) out->ignored.push_back(key);
    if (Present(j, "model")) {
      if (!j["model"].is_string()) return *err = BadRequest("'model' must be a string", "model"), false;
      out->model = j["model"].get<std::string>();
    }
    // Sampling and limits first: cheap checks before tokenizing a large prompt.
    int64_t n = 1;
    if (!Integer(j, "n", 1, kMaxChoices, &n, err)) return false;
    out->n = static_cast<int>(n);
    if (!RejectUnsupported(j, chat, *out, err)) return false;
    const char* tokens_key = chat && Present(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    // 0 only on completions (with echo, a prompt's scoring); a chat answer of no tokens is a 400, as
    // OpenAI's and vLLM's.
    if (!Integer(j, tokens_key, chat ? 1 : 0, INT64_MAX, &out->max_tokens, err)) return false;
    double temperature = 1.0, top_p = 1.0, presence = 0.0, frequency = 0.0;
    if (!Number(j, "temperature", 0.0, 1e6, false, &temperature, err)) return false;
    if (!Number(j, "top_p", 0.0, 1.0, true, &top_p, err)) return false;
    if (!Number(j, "presence_penalty", -2.0, 2.0, false, &presence, err)) return false;
    if (!Number(j, "frequency_penalty", -2.0, 2.0, false, &frequency, err)) return false;
    // vLLM's extensions (sampler.h): min_p in [0, 1]; repetition_penalty > 0 (1 = off), at most 100.
    double min_p = 0.0, repetition = 1.0;
    if (!Number(j, "min_p", 0.0, 1.0, false, &min_p, err)) return false;
    if (!Number(j, "repetition_penalty", 0.0, 100.0, true, &repetition, err)) return false;
    int64_t top_k = 0;
    if (!Integer(j, "top_k", 0, INT32_MAX, &top_k, err)) return false;
    out->sampling.temperature = static_cast<float>(temperature);
    out->sampling.top_p = static_cast<float>(top_p);
    out->sampling.top_k = top_k;
    out->sampling.presence_penalty = static_cast<float>(presence);
    out->sampling.frequency_penalty = static_cast<float>(frequency);
    out->sampling.min_p = static_cast<float>(min_p);
    out->sampling.repetition_penalty = static_cast<float>(repetition);
    if (!LogitBias(j, ctx, &out->sampling, err)) return false;
    if (!ResponseFormat(j, out, err)) return false;
    if (Present(j, "seed")) {
      if (!j["seed"].is_number_integer()) return *err = BadRequest("'seed' must be an integer", "seed"), false;
      out->sampling.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>()
                                                           : static_cast<uint64_t>(j["seed"].get<int64_t>());
      out->seeded = true;
    } else {
      static thread_local std::mt19937_64 rng{std::random_device{}()};
      out->sampling.seed = rng();
    }
    if (!Bool(j, "ignore_eos", &out->ignore_eos, err)) return false;
    if (!Bool(j, "stream", &out->stream, err)) return false;
    if (Present(j, "stream_options")) {
      const json& so = j["stream_options"];
      if (!out->stream)
        return *err = BadRequest("'stream_options' is only allowed when 'stream' is true", "stream_options"), false;
      if (!so.is_object()) return *err = BadRequest("'stream_options' must be an object", "stream_options"), false;
      if (Present(so, "include_usage")) {
        if (!so["include_usage"].is_boolean())
          return *err = BadRequest("'stream_options.include_usage' must be true or false", "stream_options"), false;
        out->include_usage = so["include_usage"].get<bool>();
      }
    }
    if (Present(j, "stop")) {
      const json& s = j["stop"];
      if (s.is_string()) {
        out->stop.push_back(s.get<std::string>());
      } else if (s.is_array()) {
        for (const json& x : s) {
          if (!x.is_string()) return *err = BadRequest("'stop' must be a string or an array of strings", "stop"), false;
          out->stop.push_back(x.get<std::string>());
        }
      } else {
        return *err = BadRequest("'stop' must be a string or an array of strings", "stop"), false;
      }
      if (out->stop.size() > kMaxStops)
        return *err = BadRequest(fmt::format("'stop' has {} strings; at most {}", out->stop.size(), kMaxStops), "stop"),
               false;
      for (const std::string& s : out->stop)
        if (s.size() > kMaxStopBytes)
          return *err = BadRequest(fmt::format("a 'stop' string is {} bytes; at most {}", s.size(), kMaxStopBytes),
                                   "stop"),
                 false;
    }
    if (!StopTokenIds(j, ctx, out, err)) return false;
    if (chat) {
      bool want = false;
      if (!Bool(j, "logprobs", &want, err)) return false;
      int64_t top = 0;
      if (!Integer(j, "top_logprobs", 0, kMaxLogprobs, &top, err)) return false;
      if (Present(j, "top_logprobs") && !want)
        return *err = BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs"), false;
      out->logprobs = want ? static_cast<int32_t>(top) : -1;
      // The same body with key order kept, for the template (parsed only for chat; it parsed above).
      const ordered_json oj = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (!oj.is_object()) return *err = BadRequest("the body must be a JSON object"), false;
      if (!ParseMessages(j, oj, ctx, out, err)) return false;
    } else {
      if (Present(j, "logprobs")) {
        int64_t k = 0;
        if (!Integer(j, "logprobs", 0, kMaxLogprobs, &k, err)) return false;
        out->logprobs = static_cast<int32_t>(k);
      }
      if (!Bool(j, "echo", &out->echo, err)) return false;
      if (out->echo && out->logprobs >= 0)
        return *err = BadRequest("'echo' with 'logprobs' (prompt log-probabilities) is not supported", "echo"), false;
      if (!ParsePrompts(j, ctx, out, err)) return false;
    }
    const ModelConfig& c = *ctx.config;
    const char* prompt_param = chat ? "messages" : "prompt";
    for (size_t i = 0; i < out->prompts.size(); ++i) {
      const int64_t len = static_cast<int64_t>(out->prompts[i].ids.size());
      if (len == 0) return *err = BadRequest("the prompt is empty", prompt_param), false;
      if (len > c.max_position_embeddings)
        return *err = BadRequest(fmt::format("the prompt has {} tokens, more than the model's context length ({} tokens)",
                                             len, c.max_position_embeddings),
                                 prompt_param),
               false;
      // An encoder-decoder model's prompt feeds the encoder; the completion has the decoder's own limit.
      const int64_t used = c.is_encoder_decoder() ? 0 : len;
      // Without max_tokens the completion gets the rest of the context: none left is a 400 (as vLLM), not
      // an empty answer.
      if (out->max_tokens < 0 && used >= c.max_position_embeddings)
        return *err = BadRequest(fmt::format("the prompt has {} tokens and fills the model's context length ({} tokens): "
                                             "no room for a completion",
                                             len, c.max_position_embeddings),
                                 prompt_param),
               false;
      if (out->max_tokens >= 0 && used + out->max_tokens > c.max_position_embeddings)
        return *err = BadRequest(fmt::format("this model's context length is {} tokens; the request asks for {} ({} in "
                                             "the prompt, {} in the completion)",
                                             c.max_position_embeddings, used + out->max_tokens, used, out->max_tokens),
                                 tokens_key),
               false;
    }
    if (out->prompts.size() * static_cast<size_t>(out->n) > static_cast<size_t>(kMaxChoices))
      return *err = BadRequest(fmt::format("{} prompts x n {} choices: at most {} in one request", out->prompts.size(),
                                           out->n, kMaxChoices),
                               "n"),
             false;
    // A grammar may leave EOS the only token allowed (a complete value), which min_tokens forbids.
    if (out->min_tokens > 0 && out->grammar != nullptr)
      return *err = BadRequest("'min_tokens' cannot be combined with a constrained answer (response_format json_object / "
                               "json_schema, or a forced tool call)",
                               "min_tokens"),
             false;
    // Without max_tokens, the room the prompt leaves (with it, StopTokenIds checked min_tokens against it).
    for (size_t i = 0; i < out->prompts.size() && out->max_tokens < 0; ++i)
      if (out->min_tokens > out->MaxNewTokens(i, c.max_position_embeddings, c.is_encoder_decoder()))
        return *err = BadRequest(fmt::format("'min_tokens' ({}) is more than the {} tokens the context leaves after the "
                                             "prompt",
                                             out->min_tokens,
                                             out->MaxNewTokens(i, c.max_position_embeddings, c.is_encoder_decoder())),
                                 "min_tokens"),
               false;
  } catch (const json::exception& e) {  // e.g. a number out of range for its field
    *err = BadRequest(e.what());
    return false;
  }
  return true;
}

}  // namespace zipmoe::api
