// Tests for the tokenizer's chat templates (common/tokenizer_chat): ChatML with and without a default
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
  const json mixtral = {{"bos_token", "<s>"}, {"eos_token", "</s>"},
                        {"chat_template", "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
                                          "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}"}};
  auto m = ApplyChatTemplate(mixtral, {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}, true);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]");
  EXPECT_EQ(ApplyChatTemplate(mixtral, {{"system", "x"}, {"user", "Hi"}}, true).status().code(),
            StatusCode::kInvalidArgument);
  const json deepseek = {{"bos_token", {{"content", "<｜begin▁of▁sentence｜>"}}}, {"eos_token", "<｜end▁of▁sentence｜>"},
                         {"chat_template", "{{ bos_token }}{{ 'User: ' + message['content'] + '\\n\\n' }}"
                                           "{{ 'Assistant: ' + message['content'] + eos_token }}"}};
  auto d = ApplyChatTemplate(deepseek, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "Bye"}}, true);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "<｜begin▁of▁sentence｜>Be brief.\n\nUser: Hi\n\nAssistant: Yo<｜end▁of▁sentence｜>User: Bye\n\nAssistant:");
}

TEST(ChatTemplateTest, UnsupportedOrMissingTemplate) {
  auto unsupported = ApplyChatTemplate({{"chat_template", "{{ messages | tojson }}"}}, {{"user", "Hi"}}, true);
  EXPECT_EQ(unsupported.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unsupported.status().message(), HasSubstr("unsupported chat_template"));
  EXPECT_EQ(ApplyChatTemplate(json::object(), {{"user", "Hi"}}, true).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace zipmoe
