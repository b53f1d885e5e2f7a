// Chat templates rendered with the Jinja engine (see tokenizer_chat.h).
#include "common/tokenizer/tokenizer_chat.h"

#include "common/tokenizer/tokenizer_json.h"

namespace zipmoe {

using nlohmann::json;
using nlohmann::ordered_json;

Result<std::string> ChatTemplateSource(const json& tokenizer_config, bool with_tools) {
  const json* entry = nullptr;
  if (tokenizer_config.is_object()) {
    auto it = tokenizer_config.find("chat_template");
    if (it != tokenizer_config.end()) entry = &*it;
  }
  if (entry != nullptr && entry->is_string()) return entry->get<std::string>();
  if (entry != nullptr && entry->is_array()) {
    const json* fallback = nullptr;
    for (const json& t : *entry) {
      if (!t.is_object() || !t.contains("template") || !t["template"].is_string()) continue;
      const std::string name = t.value("name", "");
      if (with_tools && name == "tool_use") return t["template"].get<std::string>();
      if (name == "default") fallback = &t;
    }
    if (fallback != nullptr) return (*fallback)["template"].get<std::string>();
  }
  return Status::NotFound("tokenizer_config.json has no chat_template (nor a chat_template.jinja beside it)");
}

ordered_json ChatTemplateContext(const json& tokenizer_config, const ordered_json& messages, const ordered_json& tools,
                                 bool add_generation_prompt, const ordered_json& extra_kwargs) {
  ordered_json context = ordered_json::object();
  context["messages"] = messages;
  if (!tools.is_null()) context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  for (const char* key : {"bos_token", "eos_token"}) {
    const std::string text = tokenizer::ConfigTokenText(tokenizer_config, key);
    if (!text.empty()) context[key] = text;
  }
  if (extra_kwargs.is_object()) {
    // As transformers' render(messages=..., tools=..., add_generation_prompt=..., **kwargs): the
    // kwargs cannot replace those three (there a duplicate keyword is an error; the API refuses them).
    for (const auto& [k, v] : extra_kwargs.items()) {
      if (k != "messages" && k != "tools" && k != "add_generation_prompt") context[k] = v;
    }
  }
  return context;
}

Result<std::string> ApplyChatTemplate(const json& tokenizer_config, const ordered_json& messages,
                                      const ordered_json& tools, bool add_generation_prompt,
                                      const ordered_json& extra_kwargs) {
  const bool with_tools = tools.is_array() && !tools.empty();
  ZM_ASSIGN_OR_RETURN(std::string source, ChatTemplateSource(tokenizer_config, with_tools));
  ZM_ASSIGN_OR_RETURN(jinja::Template tmpl, jinja::Template::Parse(source, "chat_template"));
  return tmpl.Render(ChatTemplateContext(tokenizer_config, messages, tools, add_generation_prompt, extra_kwargs));
}

Result<std::string> ApplyChatTemplate(const json& tokenizer_config, const json& messages, const json& tools,
                                      bool add_generation_prompt, const json& extra_kwargs) {
  return ApplyChatTemplate(tokenizer_config, ordered_json::parse(messages.dump()), ordered_json::parse(tools.dump()),
                           add_generation_prompt, ordered_json::parse(extra_kwargs.dump()));
}

ordered_json ChatMessagesJson(const std::vector<ChatMessage>& messages) {
  ordered_json out = ordered_json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

Result<std::string> ApplyChatTemplate(const json& tokenizer_config, const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt) {
  return ApplyChatTemplate(tokenizer_config, ChatMessagesJson(messages), ordered_json(nullptr), add_generation_prompt,
                           ordered_json(nullptr));
}

}  // namespace zipmoe
