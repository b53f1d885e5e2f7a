// Chat template recognition and rendering (see tokenizer_chat.h).
#include "common/tokenizer/tokenizer_chat.h"

#include <optional>

#include <fmt/format.h>

#include "common/tokenizer/tokenizer_json.h"

namespace zipmoe {
namespace {

using nlohmann::json;
using tokenizer::ConfigTokenText;

constexpr char kImStart[] = "<|im_start|>";
constexpr char kImEnd[] = "<|im_end|>";

// The template string: chat_template as a string, or the "default" entry of a list of
// {name, template}.
std::optional<std::string> TemplateText(const json& config) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const json& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
  }
  return std::nullopt;
}

// Undoes the escapes of a Jinja string literal: \n, \t, \', \", \\.
std::string UnescapeJinja(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The default system prompt of a ChatML template: the text of a constant literal
// '<|im_start|>system\n<TEXT><|im_end|>' (no quote, brace or '+' inside), if there is one.
std::optional<std::string> DefaultSystemPrompt(const std::string& tmpl) {
  for (const std::string& opener : {std::string(kImStart) + "system\\n", std::string(kImStart) + "system\n"}) {
    size_t pos = 0;
    while ((pos = tmpl.find(opener, pos)) != std::string::npos) {
      pos += opener.size();
      const size_t end = tmpl.find(kImEnd, pos);
      if (end == std::string::npos) break;
      const std::string text = tmpl.substr(pos, end - pos);
      if (!text.empty() && text.find_first_of("'\"{}+") == std::string::npos) return UnescapeJinja(text);
    }
  }
  return std::nullopt;
}

std::string RenderChatMl(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                         bool add_generation_prompt) {
  std::string out;
  auto append = [&out](const std::string& role, const std::string& content) {
    out += fmt::format("{}{}\n{}{}\n", kImStart, role, content, kImEnd);
  };
  if (!messages.empty() && messages[0].role != "system") {
    if (std::optional<std::string> system = DefaultSystemPrompt(tmpl)) append("system", *system);
  }
  for (const ChatMessage& m : messages) append(m.role, m.content);
  if (add_generation_prompt) out += fmt::format("{}assistant\n", kImStart);
  return out;
}

Result<std::string> RenderMistral(const std::string& bos, const std::string& eos,
                                  const std::vector<ChatMessage>& messages) {
  std::string out = bos;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if ((m.role == "user") != (i % 2 == 0)) {
      return Status::InvalidArgument(fmt::format(
          "chat_template: conversation roles must alternate user/assistant/user/assistant/... "
          "(message {} has role '{}')", i, m.role));
    }
    if (m.role == "user") {
      out += "[INST] " + m.content + " [/INST]";
    } else if (m.role == "assistant") {
      out += m.content + eos;
    } else {
      return Status::InvalidArgument(fmt::format(
          "chat_template: only user and assistant roles are supported (message {} has role '{}')", i, m.role));
    }
  }
  return out;
}

std::string RenderDeepseek(const std::string& bos, const std::string& eos,
                           const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out = bos;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out += "User: " + m.content + "\n\n";
    } else if (m.role == "assistant") {
      out += "Assistant: " + m.content + eos;
    } else if (m.role == "system") {
      out += m.content + "\n\n";
    }
  }
  if (add_generation_prompt) out += "Assistant:";
  return out;
}

std::string RenderTulu(const std::string& bos, const std::string& eos,
                       const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out = bos;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool last = i + 1 == messages.size();
    if (m.role == "system") {
      out += "<|system|>\n" + m.content + "\n";
    } else if (m.role == "user") {
      out += "<|user|>\n" + m.content + "\n";
    } else if (m.role == "assistant") {
      out += "<|assistant|>\n" + m.content + eos + (last ? "" : "\n");
    }
    if (last && add_generation_prompt) out += "<|assistant|>\n";
  }
  return out;
}

}  // namespace

Result<std::string> ApplyChatTemplate(const json& tokenizer_config,
                                      const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt) {
  if (!tokenizer_config.is_object()) {
    return Status::NotFound("tokenizer_config.json: no chat_template (config is not an object)");
  }
  const std::optional<std::string> tmpl = TemplateText(tokenizer_config);
  if (!tmpl) return Status::NotFound("tokenizer_config.json: no chat_template");
  // The bos_token is emitted only where the template mentions it.
  const std::string bos =
      tmpl->find("bos_token") != std::string::npos ? ConfigTokenText(tokenizer_config, "bos_token") : "";
  const std::string eos = ConfigTokenText(tokenizer_config, "eos_token");

  if (tmpl->find(kImStart) != std::string::npos) return RenderChatMl(*tmpl, messages, add_generation_prompt);
  if (tmpl->find("[INST]") != std::string::npos) return RenderMistral(bos, eos, messages);
  if (tmpl->find("User: ") != std::string::npos && tmpl->find("Assistant:") != std::string::npos) {
    return RenderDeepseek(bos, eos, messages, add_generation_prompt);
  }
  if (tmpl->find("<|user|>") != std::string::npos) return RenderTulu(bos, eos, messages, add_generation_prompt);
  return Status::InvalidArgument("unsupported chat_template (recognised: ChatML, Mistral [INST], "
                                 "DeepSeek User:/Assistant:, Tulu <|user|>)");
}

}  // namespace zipmoe
