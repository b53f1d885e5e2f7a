// Chat prompt formatting from a Hugging Face chat template: tokenizer_config.json's "chat_template"
// (a string, or a list of {name, template}) or a chat_template.jinja beside it (Tokenizer::Load
// puts that file's text into chat_template), rendered by the Jinja engine (common/jinja/jinja.h)
// as transformers' apply_chat_template does: the variables are messages, tools (when given),
// add_generation_prompt, bos_token / eos_token (tokenizer_config strings or {"content": ...},
// when set), then the chat_template_kwargs (e.g. enable_thinking).
// Pure; callable from any thread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/jinja/jinja.h"
#include "common/status.h"

namespace zipmoe {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;  // UTF-8, inserted verbatim
};

// The template text of `tokenizer_config`: chat_template as a string, or from a list of
// {name, template} the one named "tool_use" when `with_tools` and it exists, else "default".
// Errors: kNotFound if there is none.
Result<std::string> ChatTemplateSource(const nlohmann::json& tokenizer_config, bool with_tools);

// The render variables (see above). `tools` null or absent: no `tools` variable.
nlohmann::ordered_json ChatTemplateContext(const nlohmann::json& tokenizer_config,
                                           const nlohmann::ordered_json& messages,
                                           const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                           const nlohmann::ordered_json& extra_kwargs);

// Renders `messages` (OpenAI message objects: role, content, tool_calls, tool_call_id, ...) with
// the chat template of `tokenizer_config` (parsed on each call; Tokenizer caches the parse).
// `tools`: OpenAI function schemas, or null for none. `extra_kwargs`: an object of extra
// variables (chat_template_kwargs), or null.
// Errors: kNotFound if there is no chat_template; kInvalidArgument "chat_template line L, column
// C: ..." if the template does not parse or fails on these messages (raise_exception included).
Result<std::string> ApplyChatTemplate(const nlohmann::json& tokenizer_config, const nlohmann::ordered_json& messages,
                                      const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                      const nlohmann::ordered_json& extra_kwargs);
// The same for nlohmann::json arguments (objects in sorted key order, which tojson then shows).
Result<std::string> ApplyChatTemplate(const nlohmann::json& tokenizer_config, const nlohmann::json& messages,
                                      const nlohmann::json& tools, bool add_generation_prompt,
                                      const nlohmann::json& extra_kwargs);
// Plain {role, content} messages, no tools, no extra variables.
Result<std::string> ApplyChatTemplate(const nlohmann::json& tokenizer_config,
                                      const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt);

// {role, content} messages as OpenAI message objects.
nlohmann::ordered_json ChatMessagesJson(const std::vector<ChatMessage>& messages);

}  // namespace zipmoe
