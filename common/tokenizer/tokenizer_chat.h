// Chat prompt formatting from a Hugging Face tokenizer_config.json "chat_template", without a
// Jinja engine: the template is recognised by its markers and rendered by fixed C++ code that
// produces what the real template produces for plain {role, content} messages.
//
//   ChatML (template contains "<|im_start|>"; Qwen1.5/Qwen2/Qwen3-MoE):
//     "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then "<|im_start|>assistant\n" if
//     add_generation_prompt. A default system prompt is injected only when the template itself
//     does so: when it contains a constant literal '<|im_start|>system\n<TEXT><|im_end|>' (as
//     Qwen1.5's "You are a helpful assistant" and Qwen2.5's "You are Qwen, ...") and the first
//     message is not a system message. Qwen3's <think> handling and tool calls are not rendered.
//   Mistral/Mixtral (contains "[INST]"): bos_token, then "[INST] {user} [/INST]" and
//     "{assistant}{eos_token}"; roles must alternate user/assistant starting with user and a
//     system message is an error, as the Mixtral-8x7B-Instruct template raises.
//     add_generation_prompt adds nothing ("[/INST]" is the prompt).
//   DeepSeek (contains "User: " and "Assistant:"): bos_token, "{system}\n\n", "User: {user}\n\n",
//     "Assistant: {assistant}{eos_token}", then "Assistant:" if add_generation_prompt; other roles
//     are skipped, as in DeepSeek-V2-Chat's template.
//   Tulu (contains "<|user|>"; OLMoE-Instruct): "<|system|>\n{c}\n", "<|user|>\n{c}\n",
//     "<|assistant|>\n{c}{eos_token}" ("\n" after it unless it is the last message), then
//     "<|assistant|>\n" if add_generation_prompt.
// bos_token / eos_token come from the same tokenizer_config.json (a string or {"content": ...}).
// Pure; callable from any thread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;  // UTF-8, inserted verbatim
};

// Renders `messages` with the chat_template of `tokenizer_config` (the parsed
// tokenizer_config.json; chat_template may be a string or a list of {name, template}, where the
// one named "default" is used).
// Errors: kNotFound if there is no chat_template; kInvalidArgument "unsupported chat_template" for
// an unrecognised template, or a message sequence the template rejects (roles, system message).
Result<std::string> ApplyChatTemplate(const nlohmann::json& tokenizer_config,
                                      const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt);

}  // namespace zipmoe
