// Tests for the tokenizer's chat templates (common/tokenizer/tokenizer_chat): ChatML with and without a default
// system prompt, Mistral and DeepSeek styles, and unsupported or missing templates.
#include "common/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer_pretokenizer.h"
#include "common/tokenizer/tokenizer_regex.h"
#include "common/tokenizer/tokenizer_unicode.h"
#include "common/tokenizer/tokenizer_unigram.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

// ---- chat templates ----

const char kQwen15Template[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(ChatTemplateTest, ChatMlSystemUserWithGenerationPrompt) {
  const json config = {{"chat_template", kQwen15Template}};
  auto out = ApplyChatTemplate(config, {{"system", "You are terse."}, {"user", "Hi!"}}, true);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, ChatMlDefaultSystemPromptOnlyWhenTemplateHasOne) {
  auto qwen15 = ApplyChatTemplate({{"chat_template", kQwen15Template}}, {{"user", "Hi"}}, false);
  ASSERT_TRUE(qwen15.ok());
  EXPECT_EQ(*qwen15, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  const json qwen3 = {{"chat_template",
                       "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
                       "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
                       "{{- '<|im_start|>assistant\\n' }}{%- endif %}"}};
  auto plain = ApplyChatTemplate(qwen3, {{"user", "Hi"}}, true);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, MistralAndDeepseekStyles) {
  // Rendered by the real template now (the marker renderer added "Hello</s>" and refused the system
  // message, although this abbreviated template does neither).
  const json mixtral = {{"bos_token", "<s>"}, {"eos_token", "</s>"},
                        {"chat_template", "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
                                          "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
                                          "'assistant' %}{{ message['content'] + eos_token }}{% else %}"
                                          "{{ raise_exception('Only user and assistant roles are supported!') }}"
                                          "{% endif %}{% endfor %}"}};
  auto m = ApplyChatTemplate(mixtral, {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}, true);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]");
  auto system = ApplyChatTemplate(mixtral, {{"system", "x"}, {"user", "Hi"}}, true);
  EXPECT_EQ(system.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(system.status().message(), HasSubstr("Only user and assistant roles are supported!"));
  const json deepseek = {{"bos_token", {{"content", "<｜begin▁of▁sentence｜>"}}}, {"eos_token", "<｜end▁of▁sentence｜>"},
                         {"chat_template", "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
                                           "{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == "
                                           "'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% elif "
                                           "message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}"
                                           "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"}};
  auto d = ApplyChatTemplate(deepseek, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "Bye"}}, true);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, "<｜begin▁of▁sentence｜>Be brief.\n\nUser: Hi\n\nAssistant: Yo<｜end▁of▁sentence｜>User: Bye\n\nAssistant:");
}

TEST(ChatTemplateTest, ToolCallsToolsAndKwargsPassThrough) {
  const json config = {{"chat_template",
                        "{% for m in messages %}{{ m.role }}:{% if m.tool_calls %}{{ m.tool_calls[0].function | tojson }}"
                        "{% else %}{{ m.content }}{% endif %};{% endfor %}{% if tools %}T={{ tools | length }};{% endif %}"
                        "{% if enable_thinking is defined and enable_thinking is false %}nothink{% endif %}"}};
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]}])");
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  auto out = ApplyChatTemplate(config, messages, tools, false, json{{"enable_thinking", false}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "user:Hi;assistant:{\"arguments\": \"{}\", \"name\": \"f\"};T=1;nothink");
}

TEST(ChatTemplateTest, TemplateListPicksToolUseWhenToolsGiven) {
  const json config = {{"chat_template", json::array({{{"name", "default"}, {"template", "plain"}},
                                                      {{"name", "tool_use"}, {"template", "tools"}}})}};
  auto plain = ApplyChatTemplate(config, json::array(), nullptr, false, nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, "plain");
  auto with_tools = ApplyChatTemplate(config, json::array(), json::array({{{"type", "function"}}}), false, nullptr);
  ASSERT_TRUE(with_tools.ok());
  EXPECT_EQ(*with_tools, "tools");
}

TEST(ChatTemplateTest, BadOrMissingTemplate) {
  auto bad = ApplyChatTemplate({{"chat_template", "line 1\n{{ messages | nosuchfilter }}"}}, {{"user", "Hi"}}, true);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("chat_template line 2"));
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown filter 'nosuchfilter'"));
  EXPECT_EQ(ApplyChatTemplate(json::object(), {{"user", "Hi"}}, true).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace zipmoe
