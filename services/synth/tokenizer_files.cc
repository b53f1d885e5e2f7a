// Special-token layouts and tokenizer_config.json / generation_config.json per architecture.
#include "services/synth/tokenizer_files.h"

#include <fmt/format.h>

namespace zipmoe::synth {
namespace {

using nlohmann::json;

const char kQwenEndOfText[] = "<|endoftext|>";
const char kQwenImStart[] = "<|im_start|>";
const char kQwenImEnd[] = "<|im_end|>";
// DeepSeek's specials use U+FF5C FULLWIDTH VERTICAL LINE and U+2581 LOWER ONE EIGHTH BLOCK.
const char kDeepseekBos[] = "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>";
const char kDeepseekEos[] = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";

const char kDeepseekUser[] = "<\uFF5CUser\uFF5C>";
const char kDeepseekAssistant[] = "<\uFF5CAssistant\uFF5C>";
const char kGlmEndOfText[] = "<|endoftext|>";
const char kGlmGMask[] = "[gMASK]";
const char kGlmSop[] = "<sop>";
const char kGlmSystem[] = "<|system|>";
const char kGlmUser[] = "<|user|>";
const char kGlmAssistant[] = "<|assistant|>";
const char kGlmObservation[] = "<|observation|>";

// DeepSeek-V3-style template (its structure: bos, the system prompt, <｜User｜> / <｜Assistant｜>
// turns, tool calls as <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
// ```json ARGS```<｜tool▁call▁end｜>..., tool results as <｜tool▁output▁begin｜>...); written for synth.
const char kDeepseekV3Template[] = R"JINJA({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(system_prompt='') %}{% for message in messages %}{% if message['role'] == 'system' %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% endif %}{% endfor %}{{ bos_token }}{{ ns.system_prompt }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}{% elif message['role'] == 'assistant' %}{{ '<｜Assistant｜>' }}{% if message['content'] %}{{ message['content'] }}{% endif %}{% if message['tool_calls'] %}{{ '<｜tool▁calls▁begin｜>' }}{% for tool in message['tool_calls'] %}{{ '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + tool['function']['name'] + '
```json
' + (tool['function']['arguments'] if tool['function']['arguments'] is string else tool['function']['arguments'] | tojson) + '
```<｜tool▁call▁end｜>' }}{% endfor %}{{ '<｜tool▁calls▁end｜>' }}{% endif %}{{ '<｜end▁of▁sentence｜>' }}{% elif message['role'] == 'tool' %}{{ '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜><｜tool▁outputs▁end｜>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %})JINJA";

// GLM-4.5-style template (its structure: [gMASK]<sop>, <|system|> / <|user|> / <|assistant|> /
// <|observation|> turns, <think>...</think> before an answer, tool calls as <tool_call>NAME
// <arg_key>K</arg_key><arg_value>V</arg_value></tool_call>); written for synth. Templates render
// with trim_blocks (a newline right after a block tag is dropped), so such newlines are expressions.
const char kGlmTemplate[] = R"JINJA([gMASK]<sop>{% if tools %}<|system|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each function call, output the function name and arguments within the following XML format:
<tool_call>{function-name}
<arg_key>{arg-key-1}</arg_key>
<arg_value>{arg-value-1}</arg_value>
...
</tool_call>{% endif %}{% for m in messages %}{% if m['role'] == 'system' %}<|system|>
{{ m['content'] }}{% elif m['role'] == 'user' %}<|user|>
{{ m['content'] }}{% elif m['role'] == 'assistant' %}<|assistant|>
<think>{% if m['reasoning_content'] %}{{ m['reasoning_content'] }}{% endif %}</think>
{% if m['content'] %}{{ m['content'] }}{% endif %}{% if m['tool_calls'] %}{% for tc in m['tool_calls'] %}
<tool_call>{{ tc['function']['name'] }}
{% if tc['function']['arguments'] is mapping %}{% for k, v in tc['function']['arguments'] | items %}<arg_key>{{ k }}</arg_key>
<arg_value>{{ v if v is string else v | tojson }}</arg_value>
{% endfor %}{% endif %}</tool_call>{% endfor %}{% endif %}{% elif m['role'] == 'tool' %}<|observation|>
<tool_response>
{{ m['content'] }}
</tool_response>{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}{{ '\n<think></think>' }}{% endif %}{% endif %})JINJA";

const char kErnieCls[] = "<|begin_of_sentence|>";
const char kErnieSep[] = "<|end_of_sentence|>";

// ERNIE-4.5-style template (cls token, "User: " / "Assistant: " turns, the sep token after an answer);
// written for synth.
const char kErnieTemplate[] = R"JINJA({%- if not add_generation_prompt is defined -%}{%- set add_generation_prompt = true -%}{%- endif -%}{{- '<|begin_of_sentence|>' -}}{%- for message in messages -%}{%- if message['role'] == 'system' -%}{{- message['content'] + '\n' -}}{%- elif message['role'] == 'user' -%}{{- 'User: ' + message['content'] + '\n' -}}{%- elif message['role'] == 'assistant' -%}{{- 'Assistant: ' + message['content'] + '<|end_of_sentence|>' -}}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{- 'Assistant: ' -}}{%- endif -%})JINJA";

// Qwen1.5 ChatML template (Qwen/Qwen1.5-MoE-A2.7B-Chat tokenizer_config.json).
const char kChatMlTemplate[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Granite-3.x-style template (its structure: <|start_of_role|>ROLE<|end_of_role|>CONTENT<|end_of_text|> and a
// newline per message, the tools as an available_tools message first, an assistant's calls as
// <|tool_call|>[{"name": N, "arguments": {...}}, ...], tool results in the tool_response role); written for synth.
const char kGraniteStartOfRole[] = "<|start_of_role|>";
const char kGraniteEndOfRole[] = "<|end_of_role|>";
const char kGraniteToolCall[] = "<|tool_call|>";
const char kGraniteEndOfText[] = "<|end_of_text|>";
const char kGraniteTemplate[] =
    "{%- if tools %}{{- '<|start_of_role|>available_tools<|end_of_role|>\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson(indent=4) }}{%- if not loop.last %}{{- '\\n\\n' }}{%- endif %}"
    "{%- endfor %}{{- '<|end_of_text|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>[' }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set f = call['function'] if call['function'] is defined else call %}"
    "{{- '{\"name\": ' + f['name'] | tojson + ', \"arguments\": ' }}"
    "{{- f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}{{- '}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}"
    "{%- endfor %}{{- ']<|end_of_text|>\\n' }}"
    "{%- else %}"
    "{%- set role = 'tool_response' if message['role'] == 'tool' else message['role'] %}"
    "{{- '<|start_of_role|>' + role + '<|end_of_role|>' + (message['content'] or '') + '<|end_of_text|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}";

// Granite-4.0-style template (role markers as Granite 3, the tools listed in a system message, calls and
// results in Hermes' <tool_call> / <tool_response> tags as the 4.0 template writes them); written for synth.
const char kGranite4Template[] =
    "{%- if tools %}{{- '<|start_of_role|>system<|end_of_role|>You may call these tools:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\nReturn each call as <tool_call>{\"name\": NAME, \"arguments\": ARGS}</tool_call>.<|end_of_text|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{- '<|start_of_role|>assistant<|end_of_role|>' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set f = call['function'] if call['function'] is defined else call %}"
    "{{- '<tool_call>\\n{\"name\": ' + f['name'] | tojson + ', \"arguments\": ' }}"
    "{{- f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|end_of_text|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|start_of_role|>user<|end_of_role|><tool_response>\\n' + message['content'] + '\\n</tool_response><|end_of_text|>\\n' }}"
    "{%- else %}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + (message['content'] or '') + '<|end_of_text|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}";

// LFM2-style template (its structure: bos, a system turn carrying "List of tools: <|tool_list_start|>[...]
// <|tool_list_end|>", ChatML turns, tool results wrapped in <|tool_response_start|> / <|tool_response_end|>, an
// assistant's calls as Pythonic <|tool_call_start|>[name(arg=value, ...)]<|tool_call_end|>); written for synth.
const char kLfm2Template[] =
    "{{- bos_token }}"
    "{%- set ns = namespace(system='') %}"
    "{%- if messages and messages[0]['role'] == 'system' %}{%- set ns.system = messages[0]['content'] %}{%- endif %}"
    "{%- if tools %}"
    "{%- set ns.system = ns.system + ('\\n' if ns.system else '') + 'List of tools: <|tool_list_start|>[' %}"
    "{%- for tool in tools %}{%- set ns.system = ns.system + (tool if tool is string else tool | tojson) %}"
    "{%- if not loop.last %}{%- set ns.system = ns.system + ', ' %}{%- endif %}{%- endfor %}"
    "{%- set ns.system = ns.system + ']<|tool_list_end|>' %}"
    "{%- endif %}"
    "{%- if ns.system %}{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'tool' %}{{- '<|tool_response_start|>' + message['content'] + '<|tool_response_end|>' }}"
    "{%- else %}{{- message['content'] or '' }}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] %}{{- '<|tool_call_start|>[' }}"
    "{%- for call in message['tool_calls'] %}{%- set f = call['function'] if call['function'] is defined else call %}"
    "{{- f['name'] + '(' }}"
    "{%- if f['arguments'] is mapping %}{%- for k, v in f['arguments'] | items %}"
    "{{- k + '=' + v | tojson }}{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{- ')' }}{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{{- ']<|tool_call_end|>' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Trinity-style template (ChatML turns; the tools listed in the system turn with Hermes' <tool_call> JSON calls and
// <tool_response> results; an assistant's reasoning_content in <think> ... </think> before its answer); written for
// synth.
const char kTrinityTemplate[] =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- 'You may call functions. Their signatures are within <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\nReturn each call as <tool_call>{\"name\": NAME, \"arguments\": ARGS}</tool_call>.<|im_end|>\\n' }}"
    "{%- elif messages and messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] != 'system' %}"
    "{%- if message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' and message['reasoning_content'] %}"
    "{{- '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n' }}{%- endif %}"
    "{{- message['content'] or '' }}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] %}{%- for call in message['tool_calls'] %}"
    "{%- set f = call['function'] if call['function'] is defined else call %}"
    "{{- '\\n<tool_call>\\n{\"name\": ' + f['name'] | tojson + ', \"arguments\": ' }}"
    "{{- f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Mixtral-8x7B-Instruct-v0.1 template.
const char kMistralTemplate[] =
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}";

// DeepSeek-V2-Lite-Chat template.
const char kDeepseekTemplate[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}"
    "{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}"
    "{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

// OLMoE-1B-7B-0924-Instruct (Tulu) template, without the leading bos_token (OLMoE has none).
const char kTuluTemplate[] =
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}"
    "{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}"
    "{% if not loop.last %}{{ '<|assistant|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% else %}{{ '<|assistant|>\\n' + message['content'] + eos_token }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}";

// gpt-oss's Harmony format, reduced to what a synthetic model needs (written for zipmoe, not the
// released template, which also renders tools as a TypeScript namespace and the model identity):
// every message is <|start|>ROLE<|message|>TEXT<|end|>; an assistant turn's reasoning is its
// `analysis` channel, its answer the `final` channel; the generation prompt is <|start|>assistant.
const char kHarmonyTemplate[] =
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' or message['role'] == 'developer' -%}"
    "{{ '<|start|>' + ('system' if message['role'] == 'system' else 'developer') + '<|message|>' + message['content'] + '<|end|>' }}"
    "{%- elif message['role'] == 'user' -%}"
    "{{ '<|start|>user<|message|>' + message['content'] + '<|end|>' }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{%- if message.get('reasoning_content') -%}"
    "{{ '<|start|>assistant<|channel|>analysis<|message|>' + message['reasoning_content'] + '<|end|>' }}"
    "{%- endif -%}"
    "{{ '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}";

json AddedTokensDecoder(const SpecialTokenLayout& layout) {
  json decoder = json::object();
  auto add = [&](const std::string& token) {
    decoder[std::to_string(layout.IdOf(token))] = {{"content", token},  {"lstrip", false},
                                                   {"normalized", false}, {"rstrip", false},
                                                   {"single_word", false}, {"special", true}};
  };
  for (const std::string& t : layout.front) add(t);
  for (const std::string& t : layout.back) add(t);
  return decoder;
}

json NullOr(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

int64_t SpecialTokenLayout::IdOf(const std::string& token) const {
  for (size_t i = 0; i < front.size(); ++i) {
    if (front[i] == token) return static_cast<int64_t>(i);
  }
  for (size_t i = 0; i < back.size(); ++i) {
    if (back[i] == token) return vocab_size - static_cast<int64_t>(back.size()) + static_cast<int64_t>(i);
  }
  return -1;
}

Result<SpecialTokenLayout> SpecialTokensForArch(const std::string& arch, int64_t vocab_size) {
  SpecialTokenLayout layout;
  layout.vocab_size = vocab_size;
  if (arch == "qwen2_moe" || arch == "qwen3_moe" || arch == "qwen3_next") {
    layout.back = {kQwenEndOfText, kQwenImStart, kQwenImEnd};
    layout.bos_token = kQwenEndOfText;
    layout.eos_token = arch == "qwen2_moe" ? kQwenEndOfText : kQwenImEnd;
    layout.pad_token = kQwenEndOfText;
  } else if (arch == "qwen3_5_moe") {  // Qwen's specials in their real order (vision ids as in config.json)
    layout.back = {kQwenEndOfText,      kQwenImStart,      kQwenImEnd,        "<|object_ref_start|>",
                   "<|object_ref_end|>", "<|box_start|>",   "<|box_end|>",     "<|quad_start|>",
                   "<|quad_end|>",       "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                   "<|image_pad|>",      "<|video_pad|>"};
    layout.eos_token = kQwenImEnd;
    layout.pad_token = kQwenEndOfText;
  } else if (arch == "mixtral") {
    layout.front = {"<unk>", "<s>", "</s>"};
    layout.bos_token = "<s>";
    layout.eos_token = "</s>";
    layout.prepend_bos = true;
  } else if (arch == "olmoe") {
    layout.front = {"<|endoftext|>", "<|padding|>"};
    layout.eos_token = "<|endoftext|>";
    layout.pad_token = "<|padding|>";
  } else if (arch == "deepseek_v2") {
    layout.back = {kDeepseekBos, kDeepseekEos};
    layout.bos_token = kDeepseekBos;
    layout.eos_token = kDeepseekEos;
    layout.pad_token = kDeepseekEos;
    layout.prepend_bos = true;
  } else if (arch == "deepseek_v3") {  // the template writes bos_token (add_bos_token false)
    layout.back = {kDeepseekBos, kDeepseekEos, kDeepseekUser, kDeepseekAssistant};
    layout.bos_token = kDeepseekBos;
    layout.eos_token = kDeepseekEos;
    layout.pad_token = kDeepseekEos;
  } else if (arch == "ernie4_5_moe") {  // <unk> 0 (pad), <s> 1, </s> 2 as the real vocabulary
    layout.front = {"<unk>", "<s>", "</s>"};
    layout.back = {kErnieCls, kErnieSep};
    layout.bos_token = "<s>";
    layout.eos_token = "</s>";
    layout.pad_token = "<unk>";
  } else if (arch == "gpt_oss") {  // o200k_harmony's special tokens, in their real order
    layout.back = {"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                   "<|start|>",       "<|end|>",       "<|message|>", "<|call|>"};
    layout.bos_token = "<|startoftext|>";
    layout.eos_token = "<|return|>";
    layout.pad_token = "<|endoftext|>";
  } else if (arch == "granitemoe" || arch == "granitemoeshared" || arch == "granitemoehybrid") {
    // Granite 3's vocabulary: StarCoder's 19 specials first (<|end_of_text|> = 0 is bos, eos and pad), its
    // three role / tool tokens last (49152-49154 in the real 49155). granitemoehybrid uses it too (Granite 4's
    // own 100k vocabulary, bos / eos 100257, is not reproduced).
    layout.front = {kGraniteEndOfText, "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<filename>",
                    "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>",
                    "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<empty_output>", "<commit_before>",
                    "<commit_msg>", "<commit_after>", "<reponame>"};
    layout.back = {kGraniteStartOfRole, kGraniteEndOfRole, kGraniteToolCall};
    layout.bos_token = kGraniteEndOfText;
    layout.eos_token = kGraniteEndOfText;
    layout.pad_token = kGraniteEndOfText;
  } else if (arch == "lfm2_moe") {
    // LFM2's specials first (<|pad|> 0, <|startoftext|> 1 the bos, <|im_end|> 7 the eos as in the release's
    // config.json), then its tool-list / tool-call / tool-response markers; the template writes the bos.
    layout.front = {"<|pad|>",          "<|startoftext|>",   "<|endoftext|>",        "<|fim_pre|>",
                    "<|fim_mid|>",      "<|fim_suf|>",       "<|im_start|>",         "<|im_end|>",
                    "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>", "<|tool_call_end|>",
                    "<|tool_response_start|>", "<|tool_response_end|>"};
    layout.bos_token = "<|startoftext|>";
    layout.eos_token = "<|im_end|>";
    layout.pad_token = "<|pad|>";
  } else if (arch == "afmoe") {  // Trinity: ChatML's three last, as qwen3_moe (no BOS)
    layout.back = {kQwenEndOfText, kQwenImStart, kQwenImEnd};
    layout.eos_token = kQwenImEnd;
    layout.pad_token = kQwenEndOfText;
  } else if (arch == "glm4_moe" || arch == "glm4_moe_lite") {  // no BOS: the template writes [gMASK]<sop>
    layout.back = {kGlmEndOfText, kGlmGMask, kGlmSop, kGlmSystem, kGlmUser, kGlmAssistant, kGlmObservation};
    layout.eos_token = kGlmEndOfText;
    layout.pad_token = kGlmEndOfText;
  } else {
    return Status::InvalidArgument(fmt::format("no tokenizer layout for arch '{}'", arch));
  }
  if (vocab_size < 256 + layout.n_special()) {
    return Status::InvalidArgument(fmt::format(
        "vocab_size {} of arch '{}' is below 256 byte tokens + {} special tokens", vocab_size, arch,
        layout.n_special()));
  }
  return layout;
}

nlohmann::json TokenizerConfigJson(const std::string& arch, const SpecialTokenLayout& layout) {
  json c;
  c["added_tokens_decoder"] = AddedTokensDecoder(layout);
  c["bos_token"] = NullOr(layout.bos_token);
  c["eos_token"] = layout.eos_token;
  c["pad_token"] = NullOr(layout.pad_token);
  c["unk_token"] = nullptr;
  const bool qwen3 = arch == "qwen3_moe" || arch == "qwen3_next" || arch == "qwen3_5_moe";
  if (arch == "qwen2_moe" || qwen3) {
    c["add_prefix_space"] = false;
    c["additional_special_tokens"] = {kQwenImStart, kQwenImEnd};
    c["chat_template"] = kChatMlTemplate;
    c["clean_up_tokenization_spaces"] = false;
    c["errors"] = "replace";
    c["model_max_length"] = arch == "qwen2_moe" ? 32768 : qwen3 && arch != "qwen3_moe" ? 262144 : 131072;
    c["split_special_tokens"] = false;
    c["tokenizer_class"] = "Qwen2Tokenizer";
    if (qwen3) c["add_bos_token"] = false;
  } else if (arch == "mixtral") {
    c["add_bos_token"] = true;
    c["add_eos_token"] = false;
    c["additional_special_tokens"] = json::array();
    c["chat_template"] = kMistralTemplate;
    c["clean_up_tokenization_spaces"] = false;
    c["legacy"] = true;
    c["model_max_length"] = 1e30;
    c["sp_model_kwargs"] = json::object();
    c["spaces_between_special_tokens"] = false;
    c["tokenizer_class"] = "LlamaTokenizerFast";
    c["unk_token"] = "<unk>";
    c["use_default_system_prompt"] = false;
  } else if (arch == "deepseek_v2") {
    c["add_bos_token"] = true;
    c["add_eos_token"] = false;
    c["chat_template"] = kDeepseekTemplate;
    c["clean_up_tokenization_spaces"] = false;
    c["legacy"] = true;
    c["model_max_length"] = 16384;
    c["sp_model_kwargs"] = json::object();
    c["tokenizer_class"] = "LlamaTokenizerFast";
  } else if (arch == "deepseek_v3") {
    c["add_bos_token"] = false;
    c["add_eos_token"] = false;
    c["chat_template"] = kDeepseekV3Template;
    c["clean_up_tokenization_spaces"] = false;
    c["legacy"] = true;
    c["model_max_length"] = 131072;
    c["sp_model_kwargs"] = json::object();
    c["tokenizer_class"] = "LlamaTokenizerFast";
  } else if (arch == "ernie4_5_moe") {
    c["add_bos_token"] = false;
    c["add_eos_token"] = false;
    c["chat_template"] = kErnieTemplate;
    c["clean_up_tokenization_spaces"] = false;
    c["cls_token"] = kErnieCls;
    c["sep_token"] = kErnieSep;
    c["model_max_length"] = 131072;
    c["tokenizer_class"] = "Ernie4_5_Tokenizer";
  } else if (arch == "glm4_moe" || arch == "glm4_moe_lite") {
    c["additional_special_tokens"] = {kGlmGMask, kGlmSop, kGlmSystem, kGlmUser, kGlmAssistant, kGlmObservation};
    c["chat_template"] = kGlmTemplate;
    c["clean_up_tokenization_spaces"] = false;
    c["do_lower_case"] = false;
    c["model_max_length"] = 128000;
    c["padding_side"] = "left";
    c["remove_space"] = false;
    c["tokenizer_class"] = "PreTrainedTokenizer";
  } else if (arch == "granitemoe" || arch == "granitemoeshared" || arch == "granitemoehybrid") {
    c["add_bos_token"] = false;
    c["add_prefix_space"] = false;
    c["additional_special_tokens"] = {kGraniteStartOfRole, kGraniteEndOfRole, kGraniteToolCall};
    c["chat_template"] = arch == "granitemoehybrid" ? kGranite4Template : kGraniteTemplate;
    c["clean_up_tokenization_spaces"] = true;
    c["errors"] = "replace";
    c["model_max_length"] = 4096;
    c["padding_side"] = "left";
    c["tokenizer_class"] = "GPT2Tokenizer";
    c["unk_token"] = kGraniteEndOfText;
  } else if (arch == "lfm2_moe") {
    c["add_bos_token"] = false;
    c["add_eos_token"] = false;
    c["chat_template"] = kLfm2Template;
    c["clean_up_tokenization_spaces"] = false;
    c["legacy"] = false;
    c["model_max_length"] = 1e30;
    c["tokenizer_class"] = "PreTrainedTokenizerFast";
    c["use_default_system_prompt"] = false;
  } else if (arch == "afmoe") {
    c["add_bos_token"] = false;
    c["add_eos_token"] = false;
    c["additional_special_tokens"] = {kQwenImStart, kQwenImEnd};
    c["chat_template"] = kTrinityTemplate;
    c["clean_up_tokenization_spaces"] = false;
    c["model_max_length"] = 131072;
    c["tokenizer_class"] = "PreTrainedTokenizerFast";
  } else if (arch == "gpt_oss") {
    c["chat_template"] = kHarmonyTemplate;
    c["clean_up_tokenization_spaces"] = false;
    c["model_input_names"] = {"input_ids", "attention_mask"};
    c["model_max_length"] = 1e30;
    c["tokenizer_class"] = "PreTrainedTokenizerFast";
  } else {  // olmoe
    c["add_bos_token"] = false;
    c["add_eos_token"] = false;
    c["chat_template"] = kTuluTemplate;
    c["clean_up_tokenization_spaces"] = true;
    c["model_max_length"] = 1e30;
    c["tokenizer_class"] = "GPTNeoXTokenizer";
  }
  return c;
}

nlohmann::json GenerationConfigJson(const nlohmann::json& config) {
  json g;
  g["_from_model_config"] = true;
  const std::string type = config.value("model_type", "");
  if (config.contains("bos_token_id")) g["bos_token_id"] = config["bos_token_id"];
  if (config.contains("eos_token_id")) g["eos_token_id"] = config["eos_token_id"];
  // Qwen3 stops on <|im_end|> or <|endoftext|>, as its real generation_config.json.
  if ((type == "qwen3_moe" || type == "qwen3_next") && config.contains("bos_token_id")) {
    g["eos_token_id"] = {config["eos_token_id"], config["bos_token_id"]};
  }
  // Qwen3.5: config.json's text_config names <|endoftext|>; generation stops on <|im_end|> (the id after
  // <|im_start|>, two after <|endoftext|>) or <|endoftext|>, as its generation_config.json.
  if (type == "qwen3_5_moe" && config.contains("text_config") && config["text_config"].contains("eos_token_id")) {
    const int64_t end_of_text = config["text_config"]["eos_token_id"].get<int64_t>();
    g["eos_token_id"] = {end_of_text + 2, end_of_text};
    g["pad_token_id"] = end_of_text;
  }
  if (config.contains("pad_token_id")) g["pad_token_id"] = config["pad_token_id"];
  if (config.contains("bos_token_id") && config["bos_token_id"].is_null()) g.erase("bos_token_id");
  // gpt-oss stops on <|return|>, <|endoftext|> and <|call|> (its generation_config.json).
  if (config.value("model_type", "") == "gpt_oss" && config.contains("vocab_size")) {
    const int64_t v = config["vocab_size"].get<int64_t>();  // the layout's back: ... <|message|>, <|call|>
    g["eos_token_id"] = {config["eos_token_id"], config["pad_token_id"], v - 1};
  }
  // ERNIE answers end with <|end_of_sentence|> (the vocabulary's last token in synth): a stop id too.
  if (config.value("model_type", "") == "ernie4_5_moe" && config.contains("vocab_size"))
    g["eos_token_id"] = {config["eos_token_id"], config["vocab_size"].get<int64_t>() - 1};
  g["transformers_version"] = config.value("transformers_version", "4.51.0");
  return g;
}

}  // namespace zipmoe::synth
