#include "services/api/chat_output_parser.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::api {
namespace {

using nlohmann::json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekOpen = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekClose = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kGraniteOpen = "<|tool_call|>";
constexpr std::string_view kPythonicOpen = "<|tool_call_start|>";
constexpr std::string_view kPythonicClose = "<|tool_call_end|>";
constexpr std::string_view kPythonicToolList = "<|tool_list_start|>";  // LFM2-8B-A1B's template names only this
constexpr std::string_view kHarmonyStart = "<|start|>";
constexpr std::string_view kHarmonyChannel = "<|channel|>";
constexpr std::string_view kHarmonyMessage = "<|message|>";
constexpr std::string_view kHarmonyEnd = "<|end|>";
constexpr std::string_view kHarmonyReturn = "<|return|>";
constexpr std::string_view kHarmonyCall = "<|call|>";
constexpr std::string_view kHarmonyConstrain = "<|constrain|>";
constexpr std::string_view kArgKey = "<arg_key>";
constexpr std::string_view kArgKeyEnd = "</arg_key>";
constexpr std::string_view kArgValue = "<arg_value>";
constexpr std::string_view kArgValueEnd = "</arg_value>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}


// The marker that opens a tool call, the one that closes it ("" = the end of the output) and markers
// dropped from the content (DeepSeek's list brackets).
struct ToolMarkers {
  std::string_view open, close;
  std::vector<std::string_view> silent;
};

ToolMarkers MarkersOf(ToolCallSyntax s) {
  switch (s) {
    case ToolCallSyntax::kHermes:
    case ToolCallSyntax::kQwenXml: return {kHermesOpen, kHermesClose, {}};
    case ToolCallSyntax::kDeepSeek: return {kDeepSeekOpen, kDeepSeekClose, {kDeepSeekCallsBegin, kDeepSeekCallsEnd}};
    case ToolCallSyntax::kMistral: return {kMistralOpen, "", {}};
    case ToolCallSyntax::kGranite: return {kGraniteOpen, "", {}};
    case ToolCallSyntax::kPythonic: return {kPythonicOpen, kPythonicClose, {}};
    case ToolCallSyntax::kHarmony:
    case ToolCallSyntax::kNone: break;
  }
  return {};
}

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t PartialSuffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// A JSON object parsed from `text`, or a discarded value.
json ParseObject(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json(json::value_t::discarded);
}

// OpenAI's arguments text from a call's arguments value (an object, or a string holding one). A raw value taken
// from the text (GLM's <arg_value>, a Python string) holds whatever bytes the model wrote: bytes that are not
// UTF-8 become U+FFFD rather than a thrown type_error (the generated text is UTF-8 as the stream decoder
// emits it; the parser does not rely on that).
bool ArgumentsText(const json& args, std::string* out) {
  if (args.is_null()) {
    *out = "{}";
    return true;
  }
  if (args.is_object()) {
    *out = args.dump(-1, ' ', false, json::error_handler_t::replace);
    return true;
  }
  if (args.is_string()) {
    const json inner = ParseObject(args.get<std::string>());
    if (inner.is_discarded()) return false;
    *out = inner.dump();
    return true;
  }
  return false;
}

// A function name as OpenAI allows them (letters, digits, '_', '-'; '.' and ':' for namespaced tools).
}  // namespace

bool IsBlank(std::string_view s) { return Trim(s).empty(); }

ChatSyntax DetectChatSyntax(std::string_view chat_template, std::string_view rendered_prompt) {
  ChatSyntax s;
  if (chat_template.find(kHarmonyChannel) != std::string_view::npos) {
    s.harmony = true;
    s.tool_calls = ToolCallSyntax::kHarmony;
    return s;
  }
  s.reasoning = chat_template.find(kThinkClose) != std::string_view::npos;
  if (chat_template.find(kDeepSeekOpen) != std::string_view::npos) {
    s.tool_calls = ToolCallSyntax::kDeepSeek;
  } else if (chat_template.find(kHermesOpen) != std::string_view::npos) {
    s.tool_calls = chat_template.find("<parameter=") != std::string_view::npos ? ToolCallSyntax::kQwenXml
                                                                               : ToolCallSyntax::kHermes;
  } else if (chat_template.find(kMistralOpen) != std::string_view::npos) {
    s.tool_calls = ToolCallSyntax::kMistral;
  } else if (chat_template.find(kGraniteOpen) != std::string_view::npos) {
    s.tool_calls = ToolCallSyntax::kGranite;
  } else if (chat_template.find(kPythonicOpen) != std::string_view::npos ||
             chat_template.find(kPythonicToolList) != std::string_view::npos) {
    s.tool_calls = ToolCallSyntax::kPythonic;
  }
  const std::string_view tail = Trim(rendered_prompt);
  s.starts_in_reasoning = s.reasoning && tail.size() >= kThinkOpen.size() &&
                          tail.substr(tail.size() - kThinkOpen.size()) == kThinkOpen;
  return s;
}

bool IsValidToolName(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == ':';
  });
}

std::vector<std::string> ChatSyntaxMarkers(const ChatSyntax& syntax) {
  std::vector<std::string_view> m;
  if (syntax.reasoning) m = {kThinkOpen, kThinkClose};
  switch (syntax.tool_calls) {
    case ToolCallSyntax::kHermes:
      m.insert(m.end(), {kHermesOpen, kHermesClose, kArgKey, kArgKeyEnd, kArgValue, kArgValueEnd});
      break;
    case ToolCallSyntax::kQwenXml: m.insert(m.end(), {kHermesOpen, kHermesClose}); break;
    case ToolCallSyntax::kDeepSeek:
      m.insert(m.end(), {kDeepSeekCallsBegin, kDeepSeekCallsEnd, kDeepSeekOpen, kDeepSeekClose, kDeepSeekSep});
      break;
    case ToolCallSyntax::kMistral: m.push_back(kMistralOpen); break;
    case ToolCallSyntax::kGranite: m.push_back(kGraniteOpen); break;
    case ToolCallSyntax::kPythonic: m.insert(m.end(), {kPythonicOpen, kPythonicClose}); break;
    case ToolCallSyntax::kHarmony: break;
    case ToolCallSyntax::kNone: break;
  }
  if (syntax.harmony)
    m.insert(m.end(), {kHarmonyStart, kHarmonyChannel, kHarmonyMessage, kHarmonyEnd, kHarmonyReturn, kHarmonyCall,
                       kHarmonyConstrain});
  return std::vector<std::string>(m.begin(), m.end());
}

ChatOutputParser::ChatOutputParser(ChatSyntax syntax, std::string id_prefix)
    : syntax_(syntax), id_prefix_(std::move(id_prefix)) {
  if (syntax_.starts_in_reasoning) state_ = State::kReasoning;
  if (syntax_.harmony) state_ = State::kHeader;  // the prompt's <|start|>assistant opened it
}

ChatDelta ChatOutputParser::Push(std::string_view text) {
  ChatDelta out;
  buf_.append(text);
  Run(/*final=*/false, &out);
  return out;
}

ChatDelta ChatOutputParser::Finish() {
  ChatDelta out;
  Run(/*final=*/true, &out);
  pending_space_.clear();
  return out;
}

void ChatOutputParser::EmitContent(std::string_view text, ChatDelta* out) {
  if (text.empty()) return;
  if (skip_space_) {
    while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    skip_space_ = false;
  }
  if (calls_ > 0) {
    // Whitespace after a tool call is kept only where other content follows it: a piece's trailing whitespace
    // waits for the next (so the output streamed in pieces gives what it gives whole).
    size_t end = text.size();
    while (end > 0 && IsSpace(text[end - 1])) --end;
    if (end > 0) {
      out->content += pending_space_;
      pending_space_.clear();
      out->content.append(text.substr(0, end));
    }
    pending_space_.append(text.substr(end));
    return;
  }
  out->content.append(text);
}

namespace {

// A recursive-descent reader of the Python literals and call expressions kPythonic's calls are written in.
class PyReader {
 public:
  explicit PyReader(std::string_view s) : s_(s) {}

  void Space() {
    while (p_ < s_.size() && IsSpace(s_[p_])) ++p_;
  }
  bool Eat(char c) {
    Space();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    Space();
    return p_ == s_.size();
  }
  // An identifier or dotted tool name: [A-Za-z0-9_.:-]+ (a keyword argument's name: [A-Za-z_][A-Za-z0-9_]*).
  bool Name(std::string* out, bool tool) {
    Space();
    const size_t b = p_;
    while (p_ < s_.size()) {
      const char c = s_[p_];
      const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (p_ > b && c >= '0' && c <= '9');
      if (!(word || (tool && (c == '.' || c == ':' || c == '-' || (c >= '0' && c <= '9'))))) break;
      ++p_;
    }
    if (p_ == b) return false;
    out->assign(s_.substr(b, p_ - b));
    return true;
  }
  bool Value(json* out, int depth = 0) {
    if (depth > 64) return false;
    Space();
    if (p_ >= s_.size()) return false;
    const char c = s_[p_];
    if (c == '\'' || c == '"') {
      std::string text;
      if (!String(&text)) return false;
      *out = std::move(text);
      return true;
    }
    if (c == '[' || c == '(') {  // a list or a tuple: a JSON array
      const char close = c == '[' ? ']' : ')';
      ++p_;
      *out = json::array();
      while (!Eat(close)) {
        json v;
        if (!Value(&v, depth + 1)) return false;
        out->push_back(std::move(v));
        if (!Eat(',')) {
          if (!Eat(close)) return false;
          break;
        }
      }
      return true;
    }
    if (c == '{') {
      ++p_;
      *out = json::object();
      while (!Eat('}')) {
        Space();
        std::string key;
        if (p_ >= s_.size() || (s_[p_] != '\'' && s_[p_] != '"') || !String(&key) || !Eat(':')) return false;
        json v;
        if (!Value(&v, depth + 1)) return false;
        (*out)[key] = std::move(v);
        if (!Eat(',')) {
          if (!Eat('}')) return false;
          break;
        }
      }
      return true;
    }
    for (const auto& [word, value] : {std::pair<std::string_view, json>{"True", true}, {"False", false},
                                      {"None", nullptr}, {"true", true}, {"false", false}, {"null", nullptr}}) {
      if (s_.substr(p_, word.size()) == word &&
          (p_ + word.size() == s_.size() || !std::isalnum(static_cast<unsigned char>(s_[p_ + word.size()])))) {
        p_ += word.size();
        *out = value;
        return true;
      }
    }
    return Number(out);
  }

 private:
  // A Python string literal: '...' or "..." with the escapes \\ \' \" \n \t \r \b \f \0 \xHH \uXXXX (UTF-8 out).
  bool String(std::string* out) {
    const char quote = s_[p_++];
    while (p_ < s_.size() && s_[p_] != quote) {
      char c = s_[p_++];
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (p_ >= s_.size()) return false;
      c = s_[p_++];
      switch (c) {
        case 'n': out->push_back('\n'); break;
        case 't': out->push_back('\t'); break;
        case 'r': out->push_back('\r'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case '0': out->push_back('\0'); break;
        case 'x':
        case 'u': {
          const size_t n = c == 'x' ? 2 : 4;
          if (p_ + n > s_.size()) return false;
          uint32_t cp = 0;
          for (size_t i = 0; i < n; ++i) {
            const char h = s_[p_ + i];
            const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) return false;
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          p_ += n;
          if (cp >= 0xD800 && cp <= 0xDFFF) return false;  // a lone surrogate is not text
          tokenizer::AppendUtf8(static_cast<char32_t>(cp), out);
          break;
        }
        case '\n': break;  // a line continuation
        default: out->push_back(c);  // \\ \' \" and an unknown escape kept as its character
      }
    }
    if (p_ >= s_.size()) return false;
    ++p_;  // the closing quote
    return true;
  }
  // A JSON number (Python's int / float literals as models write them: -3, 2.5, 1e-3).
  bool Number(json* out) {
    const size_t b = p_;
    while (p_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[p_])) || s_[p_] == '-' || s_[p_] == '+' ||
                              s_[p_] == '.' || s_[p_] == 'e' || s_[p_] == 'E'))
      ++p_;
    if (p_ == b) return false;
    const std::string_view text = s_.substr(b, p_ - b);
    json v = json::parse(text.begin(), text.end(), nullptr, false);
    if (!v.is_number()) return false;
    *out = std::move(v);
    return true;
  }
  std::string_view s_;
  size_t p_ = 0;
};

// Python's repr of a string as LFM2.5's template writes it: in single quotes, ' and \ escaped.
std::string PythonString(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

}  // namespace

bool ParsePythonicCalls(std::string_view text, std::vector<std::pair<std::string, json>>* calls) {
  PyReader r(text);
  const bool list = r.Eat('[');
  calls->clear();
  for (;;) {
    if (list && r.Eat(']')) break;
    std::string name;
    if (!r.Name(&name, /*tool=*/true) || !IsValidToolName(name) || !r.Eat('(')) return false;
    json args = json::object();
    while (!r.Eat(')')) {
      std::string key;
      json value;
      if (!r.Name(&key, /*tool=*/false) || !r.Eat('=') || !r.Value(&value) || args.contains(key)) return false;
      args[key] = std::move(value);
      if (!r.Eat(',')) {
        if (!r.Eat(')')) return false;
        break;
      }
    }
    calls->emplace_back(std::move(name), std::move(args));
    if (!list) break;
    if (!r.Eat(',')) {
      if (!r.Eat(']')) return false;
      break;
    }
  }
  return r.AtEnd() && !calls->empty();
}

std::string PythonicArguments(const nlohmann::ordered_json& arguments) {
  std::string out;
  if (!arguments.is_object()) return out;
  for (auto it = arguments.begin(); it != arguments.end(); ++it) {
    if (!out.empty()) out += ", ";
    const nlohmann::ordered_json& v = it.value();
    out += it.key() + "=";
    if (v.is_string()) {
      out += PythonString(v.get<std::string>());
    } else if (v.is_boolean()) {
      out += v.get<bool>() ? "True" : "False";
    } else if (v.is_null()) {
      out += "None";
    } else {
      out += v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
  }
  return out;
}

bool ChatOutputParser::ParseCall(std::string_view body, ChatDelta* out) {
  std::vector<ParsedToolCall> calls;
  auto add = [&](std::string_view name, const json& args) {
    std::string text;
    if (!IsValidToolName(name) || !ArgumentsText(args, &text)) return false;
    calls.push_back(ParsedToolCall{"", std::string(name), std::move(text)});
    return true;
  };
  body = Trim(body);
  const auto raw_string = [this](std::string_view tool, const std::string& arg) {
    return syntax_.string_arguments.count({std::string(Trim(tool)), arg}) > 0;
  };
  switch (syntax_.tool_calls) {
    case ToolCallSyntax::kHermes: {
      const json j = ParseObject(body);
      if (!j.is_discarded()) {
        if (!j.contains("name") || !j["name"].is_string()) return false;
        const json args = j.contains("arguments") ? j["arguments"] : j.value("parameters", json());
        if (!add(j["name"].get<std::string>(), args)) return false;
        break;
      }
      // GLM-4.5: NAME then <arg_key>k</arg_key><arg_value>v</arg_value> pairs.
      const size_t first = body.find(kArgKey);
      const std::string_view name = Trim(body.substr(0, first));
      json args = json::object();
      size_t pos = first;
      while (pos != std::string_view::npos) {
        const size_t k0 = pos + kArgKey.size();
        const size_t k1 = body.find(kArgKeyEnd, k0);
        if (k1 == std::string_view::npos) return false;
        const size_t v0 = body.find(kArgValue, k1);
        if (v0 == std::string_view::npos || !IsBlank(body.substr(k1 + kArgKeyEnd.size(), v0 - k1 - kArgKeyEnd.size())))
          return false;
        const size_t v1 = body.find(kArgValueEnd, v0);
        if (v1 == std::string_view::npos) return false;
        const std::string_view value = body.substr(v0 + kArgValue.size(), v1 - v0 - kArgValue.size());
        const std::string key(Trim(body.substr(k0, k1 - k0)));
        json parsed = raw_string(name, key) ? json(nullptr) : json::parse(value.begin(), value.end(), nullptr, false);
        args[key] = parsed.is_discarded() || raw_string(name, key) ? json(std::string(value)) : parsed;
        const size_t next = v1 + kArgValueEnd.size();
        pos = body.find(kArgKey, next);
        if (!IsBlank(body.substr(next, pos == std::string_view::npos ? std::string_view::npos : pos - next)))
          return false;
      }
      if (!add(name, args)) return false;
      break;
    }
    case ToolCallSyntax::kQwenXml: {  // <function=N> (<parameter=K> V </parameter>)* </function>
      constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kParam = "<parameter=",
                                 kParamEnd = "</parameter>";
      if (body.substr(0, kFn.size()) != kFn) return false;
      const size_t name_end = body.find('>');
      if (name_end == std::string_view::npos) return false;
      const std::string_view name = body.substr(kFn.size(), name_end - kFn.size());
      std::string_view rest = Trim(body.substr(name_end + 1));
      if (rest.size() < kFnEnd.size() || rest.substr(rest.size() - kFnEnd.size()) != kFnEnd) return false;
      rest = Trim(rest.substr(0, rest.size() - kFnEnd.size()));
      json args = json::object();
      while (!rest.empty()) {
        if (rest.substr(0, kParam.size()) != kParam) return false;
        const size_t key_end = rest.find('>');
        const size_t value_end = rest.find(kParamEnd);
        if (key_end == std::string_view::npos || value_end == std::string_view::npos || value_end < key_end)
          return false;
        const std::string key(rest.substr(kParam.size(), key_end - kParam.size()));
        std::string_view value = rest.substr(key_end + 1, value_end - key_end - 1);
        if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
        if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
        json parsed = raw_string(name, key) ? json(nullptr) : json::parse(value.begin(), value.end(), nullptr, false);
        args[key] = parsed.is_discarded() || raw_string(name, key) ? json(std::string(value)) : parsed;
        rest = Trim(rest.substr(value_end + kParamEnd.size()));
      }
      if (!add(name, args)) return false;
      break;
    }
    case ToolCallSyntax::kDeepSeek: {
      const size_t sep = body.find(kDeepSeekSep);
      if (sep == std::string_view::npos) return false;
      const std::string_view left = Trim(body.substr(0, sep));
      std::string_view right = Trim(body.substr(sep + kDeepSeekSep.size()));
      std::string_view name = left;
      if (left == "function") {  // V3/R1: NAME\n```json\n{...}\n```
        const size_t nl = right.find('\n');
        if (nl == std::string_view::npos) return false;
        name = Trim(right.substr(0, nl));
        right = Trim(right.substr(nl + 1));
        if (right.substr(0, 7) == "```json") right.remove_prefix(7);
        else if (right.substr(0, 3) == "```") right.remove_prefix(3);
        if (right.size() >= 3 && right.substr(right.size() - 3) == "```") right.remove_suffix(3);
        right = Trim(right);
      }
      const json args = ParseObject(right);
      if (args.is_discarded() || !add(name, args)) return false;
      break;
    }
    case ToolCallSyntax::kMistral:
    case ToolCallSyntax::kGranite: {
      const json j = json::parse(body.begin(), body.end(), nullptr, false);
      if (!j.is_array() || j.empty()) return false;
      for (const json& c : j) {
        if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return false;
        if (!add(c["name"].get<std::string>(), c.value("arguments", json()))) return false;
      }
      break;
    }
    case ToolCallSyntax::kPythonic: {
      std::vector<std::pair<std::string, json>> parsed;
      const json list = json::parse(body.begin(), body.end(), nullptr, false);
      if (list.is_array() && !list.empty() && list[0].is_object()) {  // the JSON form
        for (const json& c : list) {
          if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return false;
          if (!add(c["name"].get<std::string>(), c.value("arguments", json()))) return false;
        }
        break;
      }
      if (!ParsePythonicCalls(body, &parsed) || parsed.empty()) return false;
      for (const auto& [name, args] : parsed)
        if (!add(name, args)) return false;
      break;
    }
    case ToolCallSyntax::kHarmony: {  // body = the arguments object; the name came with the header
      const json args = ParseObject(body);
      if (args.is_discarded() || !add(recipient_.substr(std::string_view("functions.").size()), args)) return false;
      break;
    }
    case ToolCallSyntax::kNone: return false;
  }
  for (ParsedToolCall& c : calls) {
    c.id = id_prefix_ + std::to_string(calls_++);
    out->tool_calls.push_back(std::move(c));
  }
  pending_space_.clear();
  return true;
}

namespace {

// The word after `key` in a Harmony header ("analysis" of "<|channel|>analysis", "functions.f" of
// "to=functions.f"): up to a space or the next special token.
std::string HeaderField(std::string_view header, std::string_view key) {
  const size_t p = header.find(key);
  if (p == std::string_view::npos) return "";
  std::string_view rest = header.substr(p + key.size());
  while (!rest.empty() && IsSpace(rest.front())) rest.remove_prefix(1);
  size_t end = 0;
  while (end < rest.size() && !IsSpace(rest[end]) && rest[end] != '<') ++end;
  return std::string(rest.substr(0, end));
}

}  // namespace

// A message's end: a call's body becomes the tool call (or, if it is not a JSON object, content as written).
void ChatOutputParser::EndHarmonyMessage(ChatDelta* out) {
  if (!recipient_.empty()) {
    if (!ParseCall(call_body_, out)) EmitContent(call_body_, out);
  }
  header_.clear();
  channel_.clear();
  recipient_.clear();
  call_body_.clear();
  state_ = State::kHeader;
}

void ChatOutputParser::RunHarmony(bool final, ChatDelta* out) {
  for (;;) {
    if (state_ == State::kHeader) {
      const size_t p = buf_.find(kHarmonyMessage);
      if (p == std::string::npos) {
        if (!final) return;
        EmitContent(header_ + buf_, out);  // a header never finished: the text as written
        header_.clear();
        buf_.clear();
        return;
      }
      header_ += buf_.substr(0, p);
      buf_.erase(0, p + kHarmonyMessage.size());
      // A new message may repeat <|start|>ROLE before its channel.
      const size_t start = header_.rfind(kHarmonyStart);
      if (start != std::string::npos) header_.erase(0, start + kHarmonyStart.size());
      channel_ = HeaderField(header_, kHarmonyChannel);
      const std::string to = HeaderField(header_, "to=");
      recipient_ = to.rfind("functions.", 0) == 0 && to.size() > std::string_view("functions.").size() ? to : "";
      state_ = State::kBody;
      skip_space_ = false;
      continue;
    }
    // kBody: up to the earliest terminator.
    size_t best = std::string::npos, len = 0;
    for (std::string_view m : {kHarmonyEnd, kHarmonyReturn, kHarmonyCall, kHarmonyStart}) {
      const size_t p = buf_.find(m);
      if (p != std::string::npos && p < best) best = p, len = m.size();
    }
    size_t take = best;
    if (best == std::string::npos) {
      size_t keep = 0;
      if (!final)
        for (std::string_view m : {kHarmonyEnd, kHarmonyReturn, kHarmonyCall, kHarmonyStart})
          keep = std::max(keep, PartialSuffix(buf_, m));
      take = buf_.size() - keep;
    }
    const std::string_view text = std::string_view(buf_).substr(0, take);
    if (!recipient_.empty()) {
      call_body_.append(text);
    } else if (channel_ == "analysis") {
      out->reasoning.append(text);
    } else {
      EmitContent(text, out);
    }
    if (best == std::string::npos) {
      buf_.erase(0, take);
      if (final) EndHarmonyMessage(out);
      return;
    }
    const bool next_message = std::string_view(buf_).substr(best, len) == kHarmonyStart;
    buf_.erase(0, best + (next_message ? 0 : len));  // <|start|> begins the next header
    EndHarmonyMessage(out);
  }
}

void ChatOutputParser::Run(bool final, ChatDelta* out) {
  if (syntax_.harmony) return RunHarmony(final, out);
  const ToolMarkers tools = MarkersOf(syntax_.tool_calls);
  for (;;) {
    if (state_ == State::kContent) {
      // The earliest marker that changes state or is dropped.
      size_t best = std::string::npos;
      std::string_view marker;
      auto consider = [&](std::string_view m) {
        if (m.empty()) return;
        const size_t p = buf_.find(m);
        if (p != std::string::npos && (p < best || (p == best && m.size() > marker.size()))) best = p, marker = m;
      };
      if (syntax_.reasoning) consider(kThinkOpen);
      consider(tools.open);
      for (std::string_view m : tools.silent) consider(m);
      if (best == std::string::npos) {
        size_t keep = 0;
        if (!final) {
          if (syntax_.reasoning) keep = std::max(keep, PartialSuffix(buf_, kThinkOpen));
          if (!tools.open.empty()) keep = std::max(keep, PartialSuffix(buf_, tools.open));
          for (std::string_view m : tools.silent) keep = std::max(keep, PartialSuffix(buf_, m));
        }
        EmitContent(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      EmitContent(std::string_view(buf_).substr(0, best), out);
      buf_.erase(0, best + marker.size());
      if (marker == kThinkOpen) {
        state_ = State::kReasoning;
      } else if (marker == tools.open) {
        state_ = State::kToolCall;
      }
      continue;
    }
    if (state_ == State::kReasoning) {
      const size_t p = buf_.find(kThinkClose);
      if (p == std::string::npos) {
        const size_t keep = final ? 0 : PartialSuffix(buf_, kThinkClose);
        out->reasoning.append(buf_, 0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      out->reasoning.append(buf_, 0, p);
      buf_.erase(0, p + kThinkClose.size());
      state_ = State::kContent;
      skip_space_ = true;  // the answer starts after the blank lines that follow </think>
      continue;
    }
    // kToolCall
    if (tools.close.empty()) {  // Mistral: the list runs to the end of the output
      if (!final) return;
      if (!ParseCall(buf_, out)) EmitContent(std::string(tools.open) + buf_, out);
      buf_.clear();
      state_ = State::kContent;
      return;
    }
    const size_t p = buf_.find(tools.close);
    if (p == std::string::npos) {
      if (!final) return;
      EmitContent(std::string(tools.open) + buf_, out);  // never closed: the model's text as written
      buf_.clear();
      state_ = State::kContent;
      return;
    }
    if (!ParseCall(std::string_view(buf_).substr(0, p), out))
      EmitContent(std::string(tools.open) + buf_.substr(0, p + tools.close.size()), out);
    buf_.erase(0, p + tools.close.size());
    state_ = State::kContent;
  }
}

}  // namespace zipmoe::api
